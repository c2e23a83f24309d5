"""Usage errors that help, as gcloud and kubectl do: a mistyped verb, sub-verb, choice or flag
gets "did you mean" the closest known one, and the usage shown is the verb's own, not the
top-level one."""

from __future__ import annotations

import argparse
import difflib
import re
import sys

_INVALID_CHOICE = re.compile(r"argument (?P<what>[^:]+): invalid choice: '(?P<given>[^']*)'")


def closest(given: str, known: list[str]) -> str | None:
    found = difflib.get_close_matches(given, known, n=1, cutoff=0.6)
    return found[0] if found else None


def _hint(given: str, known: list[str]) -> str:
    match = closest(given, known)
    return f"; did you mean {match!r}?" if match else ""


class Parser(argparse.ArgumentParser):
    """argparse with suggestions. Every sub-parser is one too (add_subparsers uses the class of
    the parser it is called on), so a verb's errors show that verb's usage."""

    def error(self, message: str):  # type: ignore[override]
        found = _INVALID_CHOICE.search(message)
        if found:
            message = self._invalid_choice(found.group("what"), found.group("given"))
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")

    def _invalid_choice(self, what: str, given: str) -> str:
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                verbs = list(action.choices)
                kind = "sub-verb" if " " in self.prog else "verb"
                listed = ", ".join(verbs)
                return f"unknown {kind} {given!r}{_hint(given, verbs)} (the {kind}s: {listed})"
        for action in self._actions:
            if what in (action.dest, action.metavar, *action.option_strings) and action.choices:
                choices = [str(choice) for choice in action.choices]
                return f"{what}: {given!r} is not one of {', '.join(choices)}{_hint(given, choices)}"
        return f"argument {what}: invalid choice {given!r}"

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        namespace, extras = super().parse_known_args(args, namespace)
        if extras and not hasattr(namespace, "_parser_with_extras"):
            # The deepest parser returns first: it is the one whose options were mistyped.
            namespace._parser_with_extras = self
        return namespace, extras

    def unrecognized(self, extras: list[str]) -> None:
        """A usage error for arguments no option took, naming the closest option."""
        options = [o for action in self._actions for o in action.option_strings if o.startswith("--")]
        first = extras[0]
        if first.startswith("-"):
            flag = first.split("=", 1)[0]
            self.error(f"unknown option {flag}{_hint(flag, options)} (see `{self.prog} --help`)")
        self.error(f"unexpected argument {first!r} (see `{self.prog} --help`)")
