"""The command line: one greeting per name."""

import sys

from greet.core import greet


def main(argv):
    """Prints greet(name) for each name (the world when none); returns 0."""
    for name in argv or [""]:
        print(greet(name))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
