"""Every gcloud command the deploy scripts print is one the installed gcloud CLI accepts: each is
run through gcloud with no credentials, where parsing (command names, flags, flag values, the
files flags read) completes before the credential check stops it. A flag that does not exist, a
misspelt command group or a malformed value fails this test here, not in an operator's project.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.deploy.deploy_scripts import REPO, dry_run

GCLOUD = shutil.which("gcloud")
NO_CREDENTIALS = "You do not currently have an active account selected"
SETTINGS = {
    "RELAUNCH_CHECKPOINT_BUCKETS": "acme-ckpt,acme-ckpt-eu",
    "RELAUNCH_SUBMITTERS": "group:ml-team@example.com,user:ann@example.com",
    "RELAUNCH_SUBMITTERS_READ_LOGS": "true",
    "RELAUNCH_TRAINER_SERVICE_ACCOUNTS": "llama-trainer@acme-ml.iam.gserviceaccount.com",
    "RELAUNCH_ALERT_EMAIL": "ops@example.com",
    "RELAUNCH_ALERT_WEBHOOK_URL": "https://hooks.example.com/relaunch",
}


def sdk_python_and_lib() -> tuple[str, str]:
    """The Python the `gcloud` wrapper would use (CLOUDSDK_PYTHON, else the bundled one), and the
    SDK's lib directory."""
    assert GCLOUD, "the Google Cloud CLI (gcloud) is installed on every machine that runs the tests"
    root = Path(GCLOUD).resolve().parents[1]
    bundled = root / "platform" / "bundledpythonunix" / "bin" / "python3"
    python = os.environ.get("CLOUDSDK_PYTHON") or (str(bundled) if bundled.exists() else "python3")
    return python, str(root / "lib")


def no_credentials_env(config_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLOUDSDK_", "GOOGLE_"))}
    env.update(
        CLOUDSDK_CONFIG=str(config_dir),  # empty: no account, no credentials
        CLOUDSDK_CORE_PROJECT="acme-prod",  # as a user's gcloud has one; the docs' commands rely on it
        CLOUDSDK_CORE_CHECK_GCE_METADATA="false",  # not a GCE VM: do not wait for a metadata server
        CLOUDSDK_CORE_DISABLE_USAGE_REPORTING="true",
        CLOUDSDK_COMPONENT_MANAGER_DISABLE_UPDATE_CHECK="true",
    )
    return env


def gcloud_commands(output: str) -> list[list[str]]:
    """The gcloud argument lists in a script's printed commands: `+ gcloud ...` (a change),
    `? [id] gcloud ...` (a lookup) and `$(gcloud ...)` inside a printed command."""
    commands = []
    for line in output.splitlines():
        match = re.match(r"^(?:\+|\? \[[^\]]*\]) (gcloud .*)$", line)
        if match:
            commands.append(shlex.split(match.group(1))[1:])
        for inner in re.findall(r"\$\((gcloud [^)]*)\)", line):
            commands.append(shlex.split(inner)[1:])
    return commands


def parse_with_gcloud(commands: list[list[str]], tmp_path: Path) -> list[dict]:
    python, lib = sdk_python_and_lib()
    config = tmp_path / "gcloud-config"
    config.mkdir()
    result_file = tmp_path / "results.json"
    run = subprocess.run(
        [python, str(Path(__file__).with_name("gcloud_argv_check.py")), lib, str(result_file)],
        input=json.dumps(commands),
        env=no_credentials_env(config),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(result_file.read_text())


def refusals(results: list[dict]) -> list[str]:
    """Each command gcloud did not get to the credential check with, and what it said."""
    bad = []
    for result in results:
        if result["status"] == 1 and NO_CREDENTIALS in result["stderr"]:
            continue
        bad.append(
            f"gcloud {shlex.join(result['argv'])}\n  -> exit {result['status']}: {result['stderr'][:600]}"
        )
    return bad


@pytest.fixture(scope="module")
def every_printed_command(tmp_path_factory) -> list[list[str]]:
    """Setup on a fresh project, then teardown keeping and deleting the buckets: every command
    the scripts print, once each."""
    out = tmp_path_factory.mktemp("deploy-out")
    printed = []
    first = dry_run("setup.sh", out, **SETTINGS)
    printed.append(first.stdout)
    # A re-run with --update-service replaces the existing service.
    printed.append(dry_run("setup.sh", out, "--update-service", **SETTINGS).stdout)
    state = (out / "fake-state").read_text()
    printed.append(dry_run("teardown.sh", out, **SETTINGS).stdout)
    (out / "fake-state").write_text(state)
    printed.append(dry_run("teardown.sh", out, "--delete-buckets", **SETTINGS).stdout)
    unique: dict[str, list[str]] = {}
    for output in printed:
        for argv in gcloud_commands(output):
            unique.setdefault(shlex.join(argv), argv)
    return list(unique.values())


def test_the_scripts_print_commands_for_every_kind_of_step(every_printed_command):
    lines = [" ".join(argv) for argv in every_printed_command]
    for expected in (
        "services enable",
        "artifacts repositories create",
        "builds submit",
        "run services replace",
        "run services delete",
        "auth print-access-token",
    ):
        assert any(expected in line for line in lines), expected


def test_gcloud_accepts_every_command_the_deploy_scripts_print(every_printed_command, tmp_path):
    results = parse_with_gcloud(every_printed_command, tmp_path)
    assert len(results) == len(every_printed_command)
    assert refusals(results) == []


def test_the_check_tells_a_malformed_command_from_a_missing_credential(tmp_path):
    """The check can fail: a flag gcloud lacks, a value it cannot parse and a command group that
    does not exist are each refused, while the well-formed command passes."""
    good = ["--project", "acme-prod", "pubsub", "topics", "describe", "relaunch-requests"]
    bad_build = tmp_path / "cloudbuild.yaml"
    bad_build.write_text("steps:\n  - name: gcr.io/cloud-builders/docker\n    argz: [build, .]\n")
    bad_policy = tmp_path / "policy.yaml"
    bad_policy.write_text('displayName: "x"\ncombinerz: OR\n')
    bad_service = tmp_path / "service.yaml"
    bad_service.write_text(
        "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata: {name: s}\nspec: {templatez: {}}\n"
    )
    results = parse_with_gcloud(
        [
            good,
            [*good, "--no-such-flag"],
            [
                "--project",
                "acme-prod",
                "pubsub",
                "subscriptions",
                "create",
                "s",
                "--topic",
                "t",
                "--min-retry-delay",
                "10 minutes",
            ],
            ["--project", "acme-prod", "pubsub", "topicz", "describe", "relaunch-requests"],
            # The old setup.sh passed --condition to get-iam-policy, and --filter to the bucket
            # one, neither of which has it.
            ["--project", "acme-prod", "projects", "get-iam-policy", "acme-prod", "--condition=None"],
            [
                "--project",
                "acme-prod",
                "storage",
                "buckets",
                "get-iam-policy",
                "gs://b",
                "--filter=bindings.role=x",
            ],
            # Output formats are compiled only when there is something to print: checked apart.
            [*good, "--format=value(name"],
            # So is a build config (read after the credential check): a misspelt field.
            ["--project", "acme-prod", "builds", "submit", ".", "--config", str(bad_build)],
            # And an alert policy file: a field AlertPolicy does not have.
            ["--project", "acme-prod", "alpha", "monitoring", "policies", "create", "--policy-from-file", str(bad_policy)],
            # gcloud itself converts a service file before it needs credentials (exit 1).
            ["--project", "acme-prod", "run", "services", "replace", str(bad_service), "--region", "us-central1"],
        ],
        tmp_path,
    )  # fmt: skip
    assert [len(refusals([result])) for result in results] == [0, 1, 1, 1, 1, 1, 1, 1, 1, 1]
    assert [result["status"] for result in results[1:]] == [2, 2, 2, 2, 2, 3, 3, 3, 1]


def test_the_gcloud_command_itself_agrees(tmp_path):
    """The in-process check reads gcloud's exit statuses as the `gcloud` command reports them."""
    env = no_credentials_env(tmp_path)
    good = subprocess.run(
        [GCLOUD, "--project", "acme-prod", "pubsub", "topics", "describe", "t"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    bad = subprocess.run(
        [GCLOUD, "--project", "acme-prod", "pubsub", "topics", "describe", "t", "--no-such-flag"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert (good.returncode, NO_CREDENTIALS in good.stderr) == (1, True)
    assert (bad.returncode, "unrecognized arguments" in bad.stderr) == (2, True)


def documented_commands() -> list[list[str]]:
    """The gcloud commands in the bash blocks of the READMEs an operator or user follows."""
    commands = []
    for doc in ("README.md", "deploy/README.md", "trainer/README.md"):
        text = (REPO / doc).read_text()
        for block in re.findall(r"```bash\n(.*?)```", text, re.S):
            for line in block.replace("\\\n", " ").splitlines():
                if line.strip().startswith("gcloud "):
                    commands.append(shlex.split(line, comments=True)[1:])
    return commands


def test_gcloud_accepts_the_commands_the_docs_tell_people_to_run(tmp_path):
    commands = documented_commands()
    assert any(argv[:3] == ["run", "services", "proxy"] for argv in commands)
    assert any(argv[:2] == ["builds", "submit"] for argv in commands)
    assert refusals(parse_with_gcloud(commands, tmp_path)) == []
