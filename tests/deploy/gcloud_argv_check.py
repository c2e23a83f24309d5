"""Run gcloud command lines through the real gcloud CLI, with no credentials, and report which of
them gcloud refused as malformed. Run by gcloud's own Python (see test_gcloud_parses.py), not by
pytest: it imports the installed Cloud SDK.

gcloud parses a command line completely (command group, flags, flag values, files that flags
read) before it looks for credentials. With none configured, a well-formed command stops at the
credential check; a malformed one stops earlier with exit status 2 ("unrecognized arguments",
"Invalid choice", "argument --x: ..."). One CLI object serves every command, so the SDK's
start-up (about a second) is paid once instead of once per command.

Usage: PYTHON gcloud_argv_check.py SDK_LIB_DIR RESULT_FILE < commands.json
stdin: a JSON list of argument lists (without the leading "gcloud").
RESULT_FILE: a JSON list of {"argv", "status", "stderr"}, one per command, in order (not stdout:
a command may print there). Status 3: a --format or --filter value gcloud cannot compile, or a Cloud Build config
or alert policy file it cannot load.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile


def load_cli(sdk_lib: str):
    sys.path[:0] = [sdk_lib, os.path.join(sdk_lib, "third_party")]
    from googlecloudsdk import gcloud_main

    return gcloud_main.CreateCLI([])


def expression_errors(argv: list[str]) -> str:
    """--format and --filter values are compiled only when there is a result to print; compile
    them here with gcloud's own parsers, so a malformed one is caught without a result."""
    from googlecloudsdk.core.resource import resource_filter, resource_printer

    for arg in argv:
        flag, _, value = arg.partition("=")
        try:
            if flag == "--format":
                resource_printer.Printer(value)
            elif flag == "--filter":
                resource_filter.Compile(value)
        except Exception as error:
            return f"{flag}: {type(error).__name__}: {error}"
    return ""


def build_config_errors(argv: list[str]) -> str:
    """`gcloud builds submit --config FILE` reads FILE only after the credential check: load it
    here with gcloud's own Cloud Build config loader (unknown fields, bad values) and the
    command's --substitutions."""
    if (
        argv[argv.index("builds") : argv.index("builds") + 2] != ["builds", "submit"]
        or "--config" not in argv
    ):
        return ""
    from googlecloudsdk.api_lib.cloudbuild import cloudbuild_util, config

    path = argv[argv.index("--config") + 1]
    substitutions = {}
    if "--substitutions" in argv:
        pairs = argv[argv.index("--substitutions") + 1].split(",")
        substitutions = dict(pair.split("=", 1) for pair in pairs)
    try:
        config.LoadCloudbuildConfigFromPath(path, cloudbuild_util.GetMessagesModule(), params=substitutions)
    except Exception as error:
        return f"--config {path}: {type(error).__name__}: {error}"
    return ""


def policy_file_errors(argv: list[str]) -> str:
    """`monitoring policies create --policy-from-file FILE` converts FILE only after the
    credential check: hold it to the AlertPolicy message of gcloud's bundled Monitoring API
    (unknown fields, wrong types), as `run services replace` does with its file."""
    if "--policy-from-file" not in argv:
        return ""
    from googlecloudsdk.api_lib.util import apis
    from googlecloudsdk.api_lib.util import messages as messages_util
    from googlecloudsdk.core import yaml

    path = argv[argv.index("--policy-from-file") + 1]
    try:
        policy_class = apis.GetMessagesModule("monitoring", "v3").AlertPolicy
        messages_util.DictToMessageWithErrorCheck(yaml.load_path(path), policy_class)
    except Exception as error:
        return f"--policy-from-file {path}: {type(error).__name__}: {error}"
    return ""


def run_one(cli, argv: list[str]) -> tuple[int, str]:
    """Execute one command, its stderr captured at the file-descriptor level (gcloud's log
    handlers hold the original stream)."""
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as captured:
        os.dup2(captured.fileno(), 2)
        try:
            cli.Execute(argv)
            status = 0
        except SystemExit as stop:
            status = stop.code if isinstance(stop.code, int) else 1
        except Exception as error:  # a crash inside gcloud: report it, go on with the rest
            print(f"gcloud raised {type(error).__name__}: {error}", file=sys.stderr)
            status = 99
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        captured.seek(0)
        return status, captured.read().decode(errors="replace")


def main() -> None:
    sdk_lib, result_file = sys.argv[1:3]
    commands = json.load(sys.stdin)
    cli = load_cli(sdk_lib)
    results = []
    for argv in commands:
        problem = (
            expression_errors(argv)
            or (build_config_errors(argv) if "builds" in argv else "")
            or policy_file_errors(argv)
        )
        status, stderr = (3, problem) if problem else run_one(cli, argv)
        results.append({"argv": argv, "status": status, "stderr": stderr})
    with open(result_file, "w") as out:
        json.dump(results, out)


if __name__ == "__main__":
    main()
