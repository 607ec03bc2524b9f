"""`python -m trainbox ARGS…` runs the `trainbox` program with ARGS (the same CLI)."""
import os
import sys

from . import TrainboxError, binary


def main():
    try:
        exe = binary()
    except TrainboxError as e:
        print(f"trainbox: {e}", file=sys.stderr)
        return 2
    os.execv(exe, [exe] + sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
