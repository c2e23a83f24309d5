"""Run deploy/setup.sh and deploy/teardown.sh as an operator would, in dry-run mode."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
PROJECT, REGION = "acme-prod", "us-central1"
# Settings an operator may have in their shell must not leak into the tests.
_OURS = ("RELAUNCH_SUBMITTERS", "RELAUNCH_CHECKPOINT", "RELAUNCH_TRAINER_SERVICE", "RELAUNCH_ALERT",
         "RELAUNCH_IMAGE_TAG", "RELAUNCH_INGRESS", "RELAUNCH_DEPLOY")  # fmt: skip


def script(name: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(_OURS)}
    return subprocess.run(
        ["bash", str(DEPLOY / name), *args],
        env={**clean, "RELAUNCH_IMAGE_TAG": "v1", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def dry_run(name: str, out: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    """A dry run writing into OUT (and its fake state OUT/fake-state); fails the test on an error."""
    result = script(name, "--dry-run", "--out", str(out), *args, PROJECT, REGION, **env)
    assert result.returncode == 0, result.stderr
    return result


def changes(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("+ ")]
