"""The `relaunch` verbs, one module each.

`controller/cli.py` imports every module in this package and calls its `register(subparsers)`
(modules without one are skipped, so helpers may live here too). A verb module:

    def register(subparsers) -> None:
        parser = subparsers.add_parser(
            "verb", help="one line for `relaunch --help`",
            description="what it does", epilog="Example:\\n  relaunch verb ...",
            formatter_class=argparse.RawDescriptionHelpFormatter)
        parser.add_argument(...)
        parser.set_defaults(handler=run)

    def run(args: argparse.Namespace) -> int:   # the exit code
        ...

Keep heavy imports (Google clients, torch) inside `run`, so `relaunch --help` stays fast and a
broken dependency of one verb does not break the others.
"""
