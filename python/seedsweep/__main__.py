"""`python -m seedsweep capture ...` is the capture command; any other arguments pass through
to the seedsweep binary unchanged (`python -m seedsweep sweep --seeds 40`)."""
import os
import sys


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "capture":
        from .capture import main as capture_main
        return capture_main(argv[1:])
    from ._binary import binary
    exe = binary()
    if os.name == "nt":
        import subprocess
        return subprocess.call([exe, *argv])
    os.execv(exe, [exe, *argv])


if __name__ == "__main__":
    sys.exit(main())
