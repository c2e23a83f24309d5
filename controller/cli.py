"""The `relaunch` command line. Verbs are added by their own modules."""
import sys


def main(argv: list[str] | None = None) -> int:
    print("relaunch: not yet", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
