"""Alerts that clear on their own are resolved by the core: what is firing is part of the job's
state, so whichever controller leads when the condition clears resolves what another raised."""

from __future__ import annotations

from controller.core import events as ev
from controller.core.actions import RaiseAlert, ResolveAlert
from controller.core.model import JobState
from tests.support.core_driver import Run


def kinds(actions, cls):
    return [a.kind for a in actions if isinstance(a, cls)]


def test_a_capacity_wait_raised_before_a_failover_is_resolved_when_the_attempt_runs():
    run = Run.start()
    refused = run.feed(ev.SubmitFailed(1, "quota exceeded", permanent=False, capacity=True))
    assert kinds(refused, RaiseAlert) == ["capacity_wait"]
    assert run.state.firing == ("capacity_wait",)

    # A new leader: it knows only the stored state.
    run.state = JobState.from_dict(run.state.to_dict())
    run.wake()
    run.submitted(1)
    started = run.running(1)

    (resolved,) = [a for a in started if isinstance(a, ResolveAlert)]
    assert resolved.kind == "capacity_wait" and resolved.attempt == 1 and "running" in resolved.summary
    assert run.state.firing == ()
    assert kinds(run.running(1), ResolveAlert) == []  # once


def test_a_capacity_wait_is_resolved_when_the_job_ends_without_running():
    run = Run.start()
    run.feed(ev.SubmitFailed(1, "quota exceeded", permanent=False, capacity=True))
    run.feed(ev.CancelRequested())  # the look-up finds no CustomJob: cancelled before a create
    cancelled = run.feed(ev.AttemptNotFound(1))
    assert run.state.phase.terminal
    assert kinds(cancelled, ResolveAlert) == ["capacity_wait"]


def test_nothing_is_resolved_that_never_fired():
    run = Run.start()
    run.submitted(1)
    assert kinds(run.running(1), ResolveAlert) == []
    assert kinds(run.ended(1, "SUCCEEDED"), ResolveAlert) == []
