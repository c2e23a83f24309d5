"""The packaged artifacts work, not only the source tree: the wheel, installed as the Dockerfile's
stages install it (controller: no extras; trainer: torch, then the `trainer` extra, both held to
constraints.txt), runs the controller with the production settings (GCS state store, requests
arriving at the authenticated push endpoint, topics and subscriptions made beforehand as
deploy/setup.sh makes them) against devstack, and one job runs to success on the packaged trainer.

Every command runs from a scratch directory, so nothing of the checkout is importable. The two
environments' dependencies are installed once per (pyproject.toml, constraints.txt) and kept under
.venv/packaged/, as the Dockerfile's dependency layer is cached; the wheel itself is built and
installed afresh on every run.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.deploy.deploy_scripts import REPO
from tests.support.daemon import free_port, wait_for

# Builds a wheel and installs it twice (and, once per dependency change, two environments).
pytestmark = pytest.mark.slow

PROJECT = "relaunch-dev"
PUSHER = "relaunch-push@relaunch-dev.iam.gserviceaccount.com"
AUDIENCE = "https://relaunch-controller-abc123-uc.a.run.app"
PUSHED_TOPIC = "relaunch-requests-pushed"


@dataclass
class Packaged:
    controller: Path  # a venv: the wheel, no extras
    trainer: Path  # a venv: torch, the wheel with the trainer extra


def pip(venv: Path, *args: str) -> None:
    subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "--quiet", *args],
        check=True,
        cwd=venv,
        timeout=900,
    )


def dependency_layers(wheel: Path) -> tuple[Path, Path]:
    """The two venvs with every dependency and without relaunch itself, built once per
    pyproject.toml and constraints.txt (the Dockerfile's `pip install ... && pip uninstall`)."""
    key = hashlib.sha256((REPO / "pyproject.toml").read_bytes() + (REPO / "constraints.txt").read_bytes())
    home = REPO / ".venv" / "packaged" / key.hexdigest()[:16]
    controller, trainer = home / "controller", home / "trainer"
    if not (home / "complete").exists():
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir(parents=True)
        constraints = str(REPO / "constraints.txt")
        for venv in (controller, trainer):
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
        pip(controller, "install", "--constraint", constraints, str(wheel))
        pip(trainer, "install", "torch==2.13.0")
        pip(trainer, "install", "--constraint", constraints, f"{wheel}[trainer]")
        for venv in (controller, trainer):
            pip(venv, "uninstall", "-y", "relaunch")
        (home / "complete").touch()
    return controller, trainer


@pytest.fixture(scope="module")
def packaged(tmp_path_factory) -> Packaged:
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(dist),
            str(REPO),
        ],
        check=True,
        timeout=600,
    )
    (wheel,) = dist.glob("relaunch-*.whl")
    controller, trainer = dependency_layers(wheel)
    for venv in (controller, trainer):
        pip(venv, "install", "--no-deps", "--force-reinstall", str(wheel))
    return Packaged(controller, trainer)


def imported_from(venv: Path, module: str, cwd: Path) -> str:
    run = subprocess.run(
        [str(venv / "bin" / "python"), "-c", f"import {module}; print({module}.__file__)"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if run.returncode != 0:
        return f"not importable: {run.stderr.strip()[-300:]}"
    return run.stdout.strip().splitlines()[-1]  # importing deepspeed prints a warning first


def test_the_packages_hold_what_each_image_needs_and_no_more(packaged, tmp_path):
    assert imported_from(packaged.controller, "controller.service.daemon", tmp_path).startswith(
        str(packaged.controller)
    )
    assert imported_from(packaged.controller, "torch", tmp_path).startswith("not importable")
    assert imported_from(packaged.trainer, "trainer.worker", tmp_path).startswith(str(packaged.trainer))
    assert imported_from(packaged.trainer, "deepspeed", tmp_path).startswith(str(packaged.trainer))


def make_cloud(stack, bucket_names: list[str], push_endpoint: str) -> None:
    """Buckets, topics and subscriptions as deploy/setup.sh leaves them, plus a push subscription
    that delivers requests to the controller's endpoint with an OIDC token."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import pubsub_v1, storage

    gcs = storage.Client(project=PROJECT, credentials=AnonymousCredentials())
    for name in bucket_names:
        gcs.create_bucket(name)
    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    topic = f"projects/{PROJECT}/topics/"
    sub = f"projects/{PROJECT}/subscriptions/"
    for name in ("relaunch-requests", "relaunch-alerts", "relaunch-dead-letter", PUSHED_TOPIC):
        publisher.create_topic(name=topic + name)
    subscriber.create_subscription(
        name=sub + "relaunch-requests-controller", topic=topic + "relaunch-requests"
    )
    subscriber.create_subscription(name=sub + "vertex-job-events-controller", topic=stack.events_topic)
    subscriber.create_subscription(
        request={
            "name": sub + "relaunch-requests-push",
            "topic": topic + PUSHED_TOPIC,
            "push_config": {
                "push_endpoint": push_endpoint,
                "oidc_token": {"service_account_email": PUSHER, "audience": AUDIENCE},
            },
        }
    )


JOB = """
jobId: {job_id}
jobSpec:
  workerPoolSpecs:
    - replicaCount: 1
      machineSpec: {{machineType: n1-standard-4}}
      containerSpec:
        imageUri: us-central1-docker.pkg.dev/relaunch-dev/relaunch/trainer:v1
        command: [python, -m, trainer]
        args: [--nproc-per-node, "1", --steps, "4", --batch-size, "2", --checkpoint-every-steps, "2"]
  scheduling: {{strategy: SPOT, timeout: 3600s}}
checkpoint:
  uri: gs://{bucket}/checkpoints/{job_id}
"""


def test_the_packaged_controller_runs_a_job_on_the_packaged_trainer(packaged, tmp_path, monkeypatch):
    from devstack.stack import DevStack

    monkeypatch.chdir(tmp_path)  # replicas and commands start here: the checkout is not importable
    tag = uuid.uuid4().hex[:8]
    state_bucket, checkpoint_bucket, job_id = f"state-{tag}", f"ckpt-{tag}", f"pkg-{tag}"
    port = free_port()
    stack = DevStack(
        str(tmp_path / "devstack"),
        python_bin_dir=str(packaged.trainer / "bin"),
        provisioning_seconds=0.2,
        kill_grace_seconds=2.0,
    ).start()
    controller = None
    try:
        for key, value in stack.env().items():
            monkeypatch.setenv(key, value)  # the replicas inherit the stand-ins' addresses
        make_cloud(stack, [state_bucket, checkpoint_bucket], f"http://127.0.0.1:{port}/pubsub/push")
        production = {
            **{k: v for k, v in os.environ.items() if not k.startswith("RELAUNCH_")},
            **stack.env(),
            "PORT": str(port),
            "RELAUNCH_STATE_STORE": f"gs://{state_bucket}/controller",
            "RELAUNCH_CHECKPOINT_BUCKETS": checkpoint_bucket,
            "RELAUNCH_PUSH_AUDIENCE": AUDIENCE,
            "RELAUNCH_PUSH_SERVICE_ACCOUNT": PUSHER,
            "RELAUNCH_PUSH_CERTS_URL": stack.pubsub.certs_url,
            "RELAUNCH_CONFIG_DIR": str(tmp_path / "config"),
            "PYTHONUNBUFFERED": "1",
        }
        log = open(tmp_path / "controller.log", "wb")
        controller = subprocess.Popen(
            [str(packaged.controller / "bin" / "relaunch"), "controller"],
            env=production,
            stdout=log,
            stderr=log,
        )

        def ready() -> bool:
            assert controller.poll() is None, (tmp_path / "controller.log").read_text()[-3000:]
            try:
                import urllib.request

                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as reply:
                    return reply.status == 200
            except OSError:
                return False

        wait_for(ready, 120, "the packaged controller ready")

        cli = {**production, "RELAUNCH_REQUESTS_TOPIC": PUSHED_TOPIC}  # reaches it by push only
        request = tmp_path / "job.yaml"
        request.write_text(JOB.format(job_id=job_id, bucket=checkpoint_bucket))
        relaunch = str(packaged.controller / "bin" / "relaunch")
        submitted = subprocess.run(
            [relaunch, "submit", str(request)], env=cli, capture_output=True, text=True, timeout=180
        )
        assert submitted.returncode == 0 and f"accepted {job_id}" in submitted.stdout, submitted
        waited = subprocess.run(
            [relaunch, "wait", job_id, "--timeout", "400"],
            env=cli,
            capture_output=True,
            text=True,
            timeout=450,
        )
        logs = (tmp_path / "controller.log").read_text()
        assert waited.returncode == 0, (waited.stdout, waited.stderr, logs[-3000:])
        status = subprocess.run(
            [relaunch, "status", job_id, "--json"], env=cli, capture_output=True, text=True, timeout=120
        )
        story = json.loads(status.stdout)
        assert story["phase"] == "succeeded" and story["latestCheckpointStep"] == 4, story
        lines = [json.loads(line) for line in logs.splitlines() if line.startswith("{")]
        pushed = [line for line in lines if line.get("message") == "push request handled"]
        assert [(line["job_id"], line["outcome"]) for line in pushed][:1] == [(job_id, "accepted")]
    finally:
        if controller is not None and controller.poll() is None:
            controller.terminate()
            controller.wait(timeout=60)
        stack.stop()
