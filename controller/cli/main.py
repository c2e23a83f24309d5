"""The `relaunch` command line. Verbs live in `controller/commands/`, one module each."""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys

from controller.cli import commands
from controller.cli.suggest import Parser

PROG = "relaunch"


def _debugging() -> bool:
    return os.environ.get("RELAUNCH_DEBUG") == "1"


def _error(message: str) -> None:
    print(f"{PROG}: error: {message}", file=sys.stderr)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("relaunch")
    except PackageNotFoundError:
        return "unknown (not installed)"


class _VersionAction(argparse.Action):
    """--version, reading the installed version only when asked (it costs an import)."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"{PROG} {_version()}")
        parser.exit()


def _quiet_broken_pipe() -> int:
    """The reader went away (`relaunch status | head`): no traceback, no error line. stdout is
    pointed at /dev/null so that the interpreter's final flush does not complain either."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog=PROG,
        description=(
            "Keep long multi-node PyTorch training jobs alive on Spot GPUs on Vertex AI: "
            "resubmit from the latest checkpoint after every preemption."
        ),
        epilog="Run `relaunch VERB --help` for a verb's options and an example.",
    )
    parser.add_argument("--version", action=_VersionAction, help="print the version and exit")
    subparsers = parser.add_subparsers(title="verbs", metavar="VERB", dest="verb")
    for module_info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        name = f"{commands.__name__}.{module_info.name}"
        try:
            module = importlib.import_module(name)
        except Exception as error:  # one broken verb must not take the whole CLI down
            if _debugging():
                raise
            print(f"{PROG}: warning: verb module {name} failed to load: {error}", file=sys.stderr)
            continue
        register = getattr(module, "register", None)
        if callable(register):
            register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    from controller import userconfig as config

    try:
        config.export_to_environ()  # `relaunch config` and the devstack layer, under the env
    except config.ConfigError as error:
        _error(str(error))
        return 1
    parser = build_parser()
    try:
        args, extras = parser.parse_known_args(argv)
        if extras:
            getattr(args, "_parser_with_extras", parser).unrecognized(extras)
    except SystemExit as stop:  # --help and usage errors; keep main() returning an int
        return stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 2)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return 2
    stale = config.stale_devstack_variables()
    if stale and getattr(args, "verb", None) not in ("devstack", "config"):
        _error(stale)
        return 1
    try:
        return int(handler(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `relaunch status | head`
        return _quiet_broken_pipe()
    except Exception as error:
        if _debugging():
            raise
        return _report(error)


def _report(error: Exception) -> int:
    """A failure as one plain sentence: what went wrong, never the exception's class name."""
    from controller.cli.common import CommandError, sentence

    if isinstance(error, CommandError):
        _error(sentence(error))
        return error.status
    detail = sentence(error)
    _error(detail or "an unexpected failure with no message (RELAUNCH_DEBUG=1 shows where)")
    return 1


if __name__ == "__main__":
    sys.exit(main())
