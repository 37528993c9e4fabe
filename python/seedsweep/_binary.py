"""Where the seedsweep binary is: `SEEDSWEEP_BIN`, else the one shipped in this package (or in
the installed distribution, when a source checkout of the package shadows it, as when running
from `python/`), else `seedsweep` on PATH."""
import os
import shutil
import subprocess
from pathlib import Path


def binary():
    env = os.environ.get("SEEDSWEEP_BIN")
    if env:
        return env
    here = Path(__file__).resolve().parent / "bin" / ("seedsweep.exe" if os.name == "nt" else "seedsweep")
    if here.is_file():
        return str(here)
    try:
        from importlib.metadata import distributions
        name = "seedsweep/bin/" + ("seedsweep.exe" if os.name == "nt" else "seedsweep")
        # every distribution of that name on sys.path, not only the first: from `python/`, the
        # `seedsweep.egg-info` a `pip install ./python` leaves in the source tree comes first
        # and has no binary
        for dist in distributions(name="seedsweep"):
            installed = Path(dist.locate_file(name))
            if installed.is_file():
                return str(installed)
    except ImportError:
        pass
    found = shutil.which("seedsweep")
    if found:
        return found
    raise SystemExit("seedsweep: no binary (not shipped in the package, SEEDSWEEP_BIN unset, none on PATH); "
                     "reinstall with `pip install ./python` from the repository")


def run_binary(args, **kw):
    """Runs the binary with `args` (a list of strings); returns the CompletedProcess."""
    return subprocess.run([binary(), *map(str, args)], **kw)
