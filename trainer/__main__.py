"""`python -m trainer` / `relaunch-train`: the command every replica runs (docs/contracts.md)."""

import sys


def main(argv: list[str] | None = None) -> int:
    from trainer import launch

    return launch.run_launcher(sys.argv[1:] if argv is None else list(argv))


if __name__ == "__main__":
    sys.exit(main())
