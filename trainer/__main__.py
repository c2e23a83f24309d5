"""`python -m trainer` / `relaunch-train`: the command every replica runs (docs/contracts.md)."""

import sys


def main(argv: list[str] | None = None) -> int:
    from trainer import launch

    args = sys.argv[1:] if argv is None else list(argv)
    launch._WORKER_ARGV[:] = args
    return launch.run_launcher(args)


if __name__ == "__main__":
    sys.exit(main())
