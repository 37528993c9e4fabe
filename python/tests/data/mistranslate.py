"""`python tests/data/mistranslate.py FROM TO NODE -o FILE`: `python -m seedsweep capture` with a
translation bug planted on purpose: the first line `FROM` of the written file becomes `TO` (a
line of TOML each; TO may be empty, removing the line). The mirror proof must then fail and name
the first op whose output differs (every layer before it still equals the test's)."""
import os
import sys

# the package beside these tests (as `python -m seedsweep` run from python/ imports it), not
# another installed copy
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from seedsweep import capture, translate  # noqa: E402

_emit = translate.Translator.emit
FROM, TO = sys.argv[1] + "\n", (sys.argv[2] + "\n" if sys.argv[2] else "")


def emit(self):
    text = _emit(self)
    if FROM not in text:
        raise SystemExit(f"mistranslate: no line {FROM!r} in the translation")
    return text.replace(FROM, TO, 1)


translate.Translator.emit = emit
sys.exit(capture.main(sys.argv[3:]))
