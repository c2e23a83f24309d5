"""`relaunch config set|get|unset|list`: the CLI's properties, like `gcloud config`."""

from __future__ import annotations

import argparse
import sys

from controller.cli import common as view

EXAMPLE = """\
Each property has an environment variable, which wins when set. Otherwise the value comes from
the devstack layer (written by `relaunch devstack up`, removed by `down`), then from the
user's file (written here), then from the built-in default. `list` shows where each came from.
Besides the CLI's properties, any controller setting (README, "Configuration") may be set, for
`relaunch controller` run by hand.

Example:
  relaunch config set state_store gs://acme-relaunch-state/controller
  relaunch config set project acme-ml
  relaunch config get state_store
  relaunch config list
  relaunch config unset project
"""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "config",
        help="set, show or unset the CLI's settings (state store, project, ...)",
        description="Configure the relaunch CLI once, instead of exporting variables in every shell.",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(handler=lambda args: _usage(parser))
    verbs = parser.add_subparsers(title="sub-verbs", metavar="SUBVERB")
    setter = verbs.add_parser("set", help="set a property in the config file")
    setter.add_argument("key", metavar="KEY")
    setter.add_argument("value", metavar="VALUE")
    setter.set_defaults(handler=_set)
    getter = verbs.add_parser("get", help="print a property's value (exit 1 if unset)")
    getter.add_argument("key", metavar="KEY")
    getter.set_defaults(handler=_get)
    unsetter = verbs.add_parser("unset", help="remove a property from the config file")
    unsetter.add_argument("key", metavar="KEY")
    unsetter.set_defaults(handler=_unset)
    lister = verbs.add_parser("list", help="every property, its value and where it came from")
    lister.add_argument("--json", action="store_true", help="print {key: {value, source}} as JSON")
    lister.set_defaults(handler=_list)


def _usage(parser) -> int:
    parser.print_help(sys.stderr)
    return view.EXIT_USAGE


def _checked(run):
    from controller.userconfig import ConfigError

    try:
        return run()
    except ConfigError as error:
        return view.fail(str(error), view.EXIT_USAGE)


def _set(args) -> int:
    from controller import userconfig as config

    def run() -> int:
        path = config.set_value(args.key, args.value)
        print(f"set {args.key} in {path}", file=sys.stderr)
        variable = config.env_name(args.key)
        source = config.lookup(args.key)[1]
        if source.startswith("env") or source == "devstack":
            print(
                f"note: {source} overrides it here (unset {variable} or `relaunch devstack down`)",
                file=sys.stderr,
            )
        return view.EXIT_OK

    return _checked(run)


def _get(args) -> int:
    from controller import userconfig as config

    def run() -> int:
        value, _ = config.lookup(args.key)
        if value is None:
            return view.fail(config.missing(args.key), view.EXIT_ERROR)
        print(value)
        return view.EXIT_OK

    return _checked(run)


def _unset(args) -> int:
    from controller import userconfig as config

    def run() -> int:
        config.env_name(args.key)
        if config.unset_value(args.key):
            print(f"unset {args.key}", file=sys.stderr)
        else:
            print(f"{args.key} was not set in {config.config_dir() / config.CONFIG_FILE}", file=sys.stderr)
        return view.EXIT_OK

    return _checked(run)


def _list(args) -> int:
    from controller import userconfig as config

    def run() -> int:
        rows = config.all_values()
        if args.json:
            view.print_json({key: {"value": value, "source": source} for key, value, source in rows})
            return view.EXIT_OK
        print(view.table(["KEY", "VALUE", "SOURCE"], [[k, view.dash(v), s] for k, v, s in rows]))
        print(f"\nconfig file: {config.config_dir() / config.CONFIG_FILE}", file=sys.stderr)
        return view.EXIT_OK

    return _checked(run)
