"""Pub/Sub conformance: every test that asks for `pubsub_backend` runs against devstack's Pub/Sub
and against Google's own emulator (`gcloud beta emulators pubsub start`).

- `pubsub_backend` (session scope, parametrised here): a `PubSubBackend` with `host_port` and
  `project`; while it is active, PUBSUB_EMULATOR_HOST points at it, so the real clients reach it.
  Each server starts at most once per session (`devstack_pubsub_server`,
  `official_pubsub_server`); tests are grouped by backend.
- `@pytest.mark.pubsub_devstack_only("why")` keeps a test to devstack (e.g. a feature Google's
  emulator lacks); the reason is required and shows in the test id list below the summary.
- Where Google's emulator cannot run (no gcloud, no java, no component, or
  RELAUNCH_SKIP_OFFICIAL_PUBSUB=1) only devstack params are generated and the terminal summary
  says "Pub/Sub conformance against Google's emulator: NOT RUN (<why>)"; otherwise it says how
  many tests ran against it and how they ended. Nothing is skipped.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass

import pytest

from devstack.pubsub.official import OfficialEmulator, official_emulator_missing

DEVSTACK = "devstack"
OFFICIAL = "official"
PROJECT = "relaunch-dev"
SKIP_VARIABLE = "RELAUNCH_SKIP_OFFICIAL_PUBSUB"
_MARKER = "pubsub_devstack_only"


@dataclass
class PubSubBackend:
    """A Pub/Sub server the real clients can reach at PUBSUB_EMULATOR_HOST=`host_port`."""

    name: str
    host_port: str
    project: str = PROJECT
    devstack: object | None = None  # the PubSubEmulator when name == "devstack", for its extras

    @property
    def is_official(self) -> bool:
        return self.name == OFFICIAL


def official_unavailable_reason() -> str | None:
    """Why this session does not run the official emulator, or None when it does."""
    if os.environ.get(SKIP_VARIABLE) == "1":
        return f"{SKIP_VARIABLE}=1"
    return official_emulator_missing()


def pubsub_backend_names(devstack_only: bool = False) -> list[str]:
    """The backends a test runs against in this session."""
    if devstack_only or official_unavailable_reason():
        return [DEVSTACK]
    return [DEVSTACK, OFFICIAL]


class _ConformanceReport:
    def __init__(self) -> None:
        self.backend_of: dict[str, str] = {}
        self.marked_devstack_only: set[str] = set()
        self.ran: set[str] = set()  # every backend test that reached its call phase or failed
        self.outcomes: dict[str, str] = {}
        self.official_seconds = 0.0
        self.official_start_seconds: float | None = None


_REPORT = _ConformanceReport()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{_MARKER}(reason): run this Pub/Sub test against devstack only; the reason says what "
        "Google's emulator lacks",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "pubsub_backend" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker(_MARKER)
    if marker is not None and not (marker.args and str(marker.args[0]).strip()):
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: {_MARKER} needs a reason")
    names = pubsub_backend_names(devstack_only=marker is not None)
    ids = [f"{DEVSTACK}-only" if marker is not None else name for name in names]
    metafunc.parametrize("pubsub_backend", names, ids=ids, indirect=True, scope="session")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        callspec = getattr(item, "callspec", None)
        backend = callspec.params.get("pubsub_backend") if callspec else None
        if backend is None:
            continue
        _REPORT.backend_of[item.nodeid] = backend
        if item.get_closest_marker(_MARKER) is not None:
            _REPORT.marked_devstack_only.add(item.nodeid)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    backend = _REPORT.backend_of.get(report.nodeid)
    if backend is None:
        return
    if report.when == "call" or report.failed:
        _REPORT.ran.add(report.nodeid)
    if backend != OFFICIAL:
        return
    _REPORT.official_seconds += report.duration
    if report.failed:
        _REPORT.outcomes[report.nodeid] = "error" if report.when != "call" else "failed"
    elif report.when == "call" and report.nodeid not in _REPORT.outcomes:
        _REPORT.outcomes[report.nodeid] = "passed"


def pytest_terminal_summary(terminalreporter) -> None:
    if not _REPORT.ran:
        return  # no Pub/Sub backend test ran: nothing to say
    title = "Pub/Sub conformance against Google's emulator"
    reason = official_unavailable_reason()
    if reason:
        terminalreporter.write_line(f"{title}: NOT RUN ({reason})", yellow=True, bold=True)
        return
    counts = Counter(_REPORT.outcomes.values())
    ran = sum(counts.values())
    detail = ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items())) or "none finished"
    start = (
        f"emulator start {_REPORT.official_start_seconds:.1f} s, "
        if _REPORT.official_start_seconds is not None
        else ""
    )
    terminalreporter.write_line(
        f"{title}: ran {ran} tests ({detail}; {start}{_REPORT.official_seconds:.1f} s in its tests); "
        f"{len(_REPORT.ran & _REPORT.marked_devstack_only)} tests devstack-only",
        green=not (counts["failed"] or counts["error"]),
        red=bool(counts["failed"] or counts["error"]),
        bold=True,
    )


def _pointing_env_at(host_port: str):
    previous = os.environ.get("PUBSUB_EMULATOR_HOST")
    os.environ["PUBSUB_EMULATOR_HOST"] = host_port

    def restore() -> None:
        if previous is None:
            os.environ.pop("PUBSUB_EMULATOR_HOST", None)
        else:
            os.environ["PUBSUB_EMULATOR_HOST"] = previous

    return restore


@pytest.fixture(scope="session")
def devstack_pubsub_server():
    """devstack's Pub/Sub, started once for the session."""
    from devstack.pubsub import start_pubsub

    with start_pubsub() as server:
        yield server


@pytest.fixture(scope="session")
def official_pubsub_server(tmp_path_factory):
    """Google's Pub/Sub emulator, started once for the session with its own data dir."""
    started = time.monotonic()
    with OfficialEmulator(tmp_path_factory.mktemp("official-pubsub")) as server:
        _REPORT.official_start_seconds = time.monotonic() - started
        yield server


@pytest.fixture(scope="session")
def pubsub_backend(request):
    """The Pub/Sub server this test runs against (see the module docstring); PUBSUB_EMULATOR_HOST
    points at it while it is active."""
    if request.param == DEVSTACK:
        server = request.getfixturevalue("devstack_pubsub_server")
        backend = PubSubBackend(DEVSTACK, server.host_port, devstack=server)
    else:
        server = request.getfixturevalue("official_pubsub_server")
        backend = PubSubBackend(OFFICIAL, server.host_port)
    restore = _pointing_env_at(backend.host_port)
    try:
        yield backend
    finally:
        restore()
