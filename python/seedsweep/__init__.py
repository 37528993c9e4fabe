"""seedsweep from Python: the bundled binary, `capture` (a pytest test -> a scenario file whose
mirror is checked bit for bit) and a pytest plugin (`pytest --seedsweep=N`)."""
from ._binary import binary, run_binary

__all__ = ["binary", "run_binary"]
__version__ = "0.1.0"
