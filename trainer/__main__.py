import sys


def main(argv: list[str] | None = None) -> int:
    print("relaunch-train: not yet", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
