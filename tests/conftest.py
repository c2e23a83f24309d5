"""Fixtures shared by the whole test suite: one devstack for the session, and what tests make in it."""

from __future__ import annotations

import os
import uuid

import pytest
from hypothesis import settings

# `pubsub_backend`: Pub/Sub tests run against devstack and Google's own emulator.
pytest_plugins = ["pytester", "tests.support.pubsub_backends"]

PROJECT = "relaunch-dev"

# Property tests assert what holds for every input, never how fast: Hypothesis's default 200 ms
# deadline per example turns a loaded machine (CI, or several suites at once) into failures of
# tests that are right, so the suite runs without it.
settings.register_profile("relaunch", deadline=None)
settings.load_profile("relaunch")

# The fast lane (`make test-fast`) leaves out every test marked `integration`: those that use
# devstack (or its GCS stand-in) or start processes (controllers, trainers, a browser, shell
# scripts, the demo).
INTEGRATION_FIXTURES = frozenset({"devstack", "controllers", "run_controller", "pubsub_backend"})
INTEGRATION_DIRS = ("tests/devstack/", "tests/trainer/", "tests/deploy/", "tests/bench/")
PROCESS_MODULES = frozenset(
    {
        "tests/controller/cli/test_readme_flow.py",
        "tests/controller/cli/test_cli_truth.py",
        "tests/controller/cli/test_read_verbs_stay_light.py",
        "tests/controller/cli/test_cli_validate_render.py",
        "tests/controller/store/test_sqlite_store.py",
        "tests/controller/cli/test_demo.py",  # runs `relaunch demo`: devstack and a trainer
        "tests/controller/service/test_startup_imports.py",  # a fresh interpreter, to time imports
        # A GCS stand-in (devstack's) behind the real storage client:
        "tests/controller/store/test_gcs_store.py",
        "tests/controller/store/test_interval_ledger_store.py",
        "tests/controller/adapters/test_checkpoints.py",
    }
)


def pytest_collection_modifyitems(config, items):
    root = str(config.rootpath) + os.sep
    for item in items:
        path = str(item.path).replace(root, "", 1).replace(os.sep, "/")
        if (
            INTEGRATION_FIXTURES.intersection(getattr(item, "fixturenames", ()))
            or path.startswith(INTEGRATION_DIRS)
            or path in PROCESS_MODULES
        ):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session", autouse=True)
def private_cli_config(tmp_path_factory):
    """`relaunch` reads and writes a config directory (`relaunch config`, `devstack up`): the
    tests, and the commands they run, use one of their own, never the developer's."""
    saved = os.environ.get("RELAUNCH_CONFIG_DIR")
    os.environ["RELAUNCH_CONFIG_DIR"] = str(tmp_path_factory.mktemp("relaunch-config"))
    yield
    if saved is None:
        os.environ.pop("RELAUNCH_CONFIG_DIR", None)
    else:
        os.environ["RELAUNCH_CONFIG_DIR"] = saved


@pytest.fixture(scope="session")
def devstack(tmp_path_factory):
    """A fresh DevStack (Pub/Sub, GCS, Vertex AI stand-ins and the control server) for the
    session, with its environment (docs/contracts.md) in os.environ until the session ends.

    Vertex behaves as documented (devstack.vertex.behaviour) with shorter durations, so that job
    lifecycles take seconds, not minutes: it provisions in 0.2 s, kills replicas 2 s after SIGTERM
    (5 s on a reclaim) and sets a FAILED job's error 1 s after the end (a minute on Vertex). Lazy:
    only sessions with a test that asks for it start it.
    """
    from devstack.stack import DevStack  # imported here: tests that never ask pay nothing
    from devstack.vertex.behaviour import VertexBehaviour

    behaviour = VertexBehaviour(reclaim_grace_seconds=5.0, failed_error_delay_seconds=1.0)
    stack = DevStack(
        str(tmp_path_factory.mktemp("devstack")),
        provisioning_seconds=0.2,
        kill_grace_seconds=2.0,
        behaviour=behaviour,
    ).start()
    env = stack.env()
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        yield stack
    finally:
        stack.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture
def bucket(devstack):
    """A new, empty bucket in devstack's GCS."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    client = storage.Client(project=PROJECT, credentials=AnonymousCredentials())
    name = f"ckpt-{uuid.uuid4().hex[:12]}"
    client.create_bucket(name)
    return name


@pytest.fixture
def alerts_topic(devstack):
    """(topic, subscription) for one test's alerts, read back with the real subscriber."""
    from google.cloud import pubsub_v1

    publisher = pubsub_v1.PublisherClient()
    subscriber = pubsub_v1.SubscriberClient()
    topic = f"projects/{PROJECT}/topics/alerts-{uuid.uuid4().hex[:8]}"
    subscription = f"projects/{PROJECT}/subscriptions/alerts-{uuid.uuid4().hex[:8]}"
    publisher.create_topic(name=topic)
    subscriber.create_subscription(name=subscription, topic=topic)
    return topic, subscription


@pytest.fixture(autouse=True)
def _devstack_environment(request):
    """A test that uses `devstack` sees devstack's environment, even after a session-scoped
    `pubsub_backend` (Pub/Sub conformance) pointed PUBSUB_EMULATOR_HOST elsewhere."""
    if "devstack" not in request.fixturenames or "pubsub_backend" in request.fixturenames:
        yield
        return
    stack = request.getfixturevalue("devstack")
    with pytest.MonkeyPatch.context() as patch:
        for key, value in stack.env().items():
            patch.setenv(key, value)
        yield
