"""A stockout before start that lasts: after the request's stated wait, the next attempt (or the
create refused for quota, tried again) asks for the fallback strategy, and later attempts keep
it. The rule is pure (controller/core/fallback.py); the request field is validated with the
field and the reason; the CustomJob gets the strategy."""

from __future__ import annotations

import pytest

from controller.core import events as ev
from controller.core import fallback
from controller.core.actions import SubmitAttempt
from controller.core.classify import Ending
from controller.core.model import Attempt
from controller.core.policy import RestartPolicy
from controller.request import RequestInvalid, parse_request
from controller.request.render import build_custom_job
from tests.support.core_driver import STOCKOUT, Run

WAIT = 600.0


def submits(actions) -> list[SubmitAttempt]:
    return [a for a in actions if isinstance(a, SubmitAttempt)]


def stocked_out(run: Run, n: int) -> None:
    """Attempt n is created, then Vertex ends it with its stockout error before it ran."""
    run.submitted(n)
    run.ended(n, "FAILED", 8, STOCKOUT)
    assert run.state.attempts[n - 1].ending is Ending.CAPACITY


def test_after_the_stated_wait_of_stockouts_the_next_attempt_falls_back_and_keeps_it():
    run = Run.start(fallback_strategy="STANDARD", fallback_after_seconds=WAIT)
    began = run.now
    tried = []
    for n in range(1, 20):
        stocked_out(run, n)
        # A wait for capacity never runs past the moment the fallback falls due.
        assert run.state.next_attempt_at <= max(run.now, began + WAIT) + 1e-6
        (submit,) = submits(run.wake())
        tried.append((run.now - began, submit.strategy))
        if submit.strategy is not None:
            break
    assert len(tried) > 2 and all(at < WAIT and strategy is None for at, strategy in tried[:-1])
    assert tried[-1] == (pytest.approx(WAIT), "STANDARD")
    third = submit
    # It runs, is reclaimed (STANDARD is not, but any ending will do), and the next keeps it.
    run.submitted(third.attempt)
    run.preempted(third.attempt)
    (fourth,) = submits(run.wake())
    assert fourth.strategy == "STANDARD"


def test_without_a_fallback_stockouts_never_change_the_strategy():
    run = Run.start()
    for n in range(1, 5):
        stocked_out(run, n)
        run.now += 3600
        (submit,) = submits(run.wake())
        assert submit.strategy is None


def test_creates_refused_for_quota_for_the_stated_wait_are_tried_again_with_the_fallback():
    run = Run.start(fallback_strategy="FLEX_START", fallback_after_seconds=WAIT)
    began = run.now
    tried = []
    for _ in range(20):
        run.feed(ev.SubmitFailed(1, "quota exceeded", permanent=False, capacity=True))
        (submit,) = submits(run.wake())
        tried.append((run.now - began, submit.strategy))
        if submit.strategy is not None:
            break
    assert tried[-1] == (pytest.approx(WAIT), "FLEX_START")
    assert all(strategy is None for _, strategy in tried[:-1])
    assert submit.attempt == 1 and len(run.state.attempts) == 1  # the same attempt, nothing created


def test_the_rule_itself():
    policy = RestartPolicy(fallback_strategy="FLEX_START", fallback_after_seconds=60)
    assert fallback.due_at(policy, None) is None
    assert fallback.due_at(policy, 100) == 160
    assert fallback.strategy(policy, (), 100, 159) is None
    assert fallback.strategy(policy, (), 100, 160) == "FLEX_START"
    earlier = Attempt(1, None, None, False, 0.0, strategy="STANDARD")
    assert fallback.strategy(policy, (earlier,), None, 0) == "STANDARD"  # kept
    assert fallback.strategy(RestartPolicy(), (), 100, 10_000) is None


def body(fallback_field) -> dict:
    return {
        "jobId": "fb",
        "jobSpec": {
            "workerPoolSpecs": [
                {
                    "replicaCount": 1,
                    "machineSpec": {
                        "machineType": "a3-highgpu-8g",
                        "acceleratorType": "NVIDIA_H100_80GB",
                        "acceleratorCount": 8,
                    },
                    "containerSpec": {"imageUri": "us-docker.pkg.dev/p/r/t:1"},
                }
            ]
        },
        "checkpoint": {"uri": "gs://acme-ckpt/fb"},
        "restartPolicy": {"fallbackAfterStockout": fallback_field},
    }


def problems(document: dict) -> dict[str, str]:
    with pytest.raises(RequestInvalid) as caught:
        parse_request(document)
    return {problem.field: problem.reason for problem in caught.value.problems}


def test_the_request_field_is_parsed_kept_in_the_canonical_form_and_rendered():
    parsed = parse_request(body({"strategy": "FLEX_START", "after": "30m"}))
    assert (parsed.restart_policy.fallback_strategy, parsed.restart_policy.fallback_after_seconds) == (
        "FLEX_START",
        1800.0,
    )
    assert parse_request(parsed.to_json()).fingerprint() == parsed.fingerprint()
    job = build_custom_job(parsed, 3, strategy="FLEX_START")
    assert job.job_spec.scheduling.strategy.name == "FLEX_START"
    standard = build_custom_job(parsed, 3, strategy="STANDARD")
    assert standard.job_spec.scheduling.strategy.name == "STANDARD"
    # Without the field the canonical form (and the fingerprint) is what it was.
    plain = body(None)
    del plain["restartPolicy"]
    assert "fallbackAfterStockout" not in parse_request(plain).to_json()["restartPolicy"]


@pytest.mark.parametrize(
    "value, field, says",
    [
        ({"strategy": "SPOT", "after": "1h"}, "restartPolicy.fallbackAfterStockout.strategy", "STANDARD"),
        ({"strategy": "STANDARD", "after": "soon"}, "restartPolicy.fallbackAfterStockout.after", "duration"),
        ({"strategy": "STANDARD", "after": 0}, "restartPolicy.fallbackAfterStockout.after", "between"),
        ({"strategy": "STANDARD"}, "restartPolicy.fallbackAfterStockout.after", ""),
        ({"strategy": "STANDARD", "after": 60, "to": 1}, "restartPolicy.fallbackAfterStockout.to", ""),
    ],
)
def test_mistakes_name_the_field_and_the_reason(value, field, says):
    found = problems(body(value))
    assert field in found, found
    assert says in found[field]
