"""`python tests/data/mistranslate.py NODE -o FILE`: `python -m seedsweep capture` with a
translation bug planted on purpose: the first `op = "gelu"` layer of the written file becomes
`"gelu-tanh"`. The mirror proof must then fail and name that layer, in the reference
computation, at the first micro-step, as the first op whose output differs (every layer before
it still equals the test's)."""
import sys

from seedsweep import capture, translate

_emit = translate.Translator.emit


def emit(self):
    return _emit(self).replace('op = "gelu"\n', 'op = "gelu-tanh"\n', 1)


translate.Translator.emit = emit
sys.exit(capture.main(sys.argv[1:]))
