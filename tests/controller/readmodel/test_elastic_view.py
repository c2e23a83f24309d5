"""What a person reads about an elastic job: each attempt's replicas, and the timeline lines
when it runs shrunk and when it grows back."""

from __future__ import annotations

from controller.core import events as ev
from controller.core.decide import new_job
from controller.core.elastic import ElasticPolicy
from controller.readmodel.jobs import status_document, transition_entries
from tests.support.core_driver import PREEMPTED, Run, make_policy, vname


def test_sizes_and_the_shrink_and_grow_back_lines():
    run = Run(new_job("el", make_policy(), 1000.0, ElasticPolicy((1, 3), (1, 1), 60.0)))
    timeline: list[dict] = []

    def feed(event, at=None):
        before = run.state
        actions = run.feed(event, at=at)
        timeline.extend(transition_entries(before, run.state, event, actions, run.now))

    feed(ev.RequestAccepted())
    feed(ev.AttemptSubmitted(1, vname(1)))
    feed(ev.VertexObserved(1, vname(1), "QUEUED"), at=1060.0)  # waited shrinkAfter: replaced
    feed(ev.AttemptSubmitted(2, vname(2)))
    feed(ev.VertexObserved(2, vname(2), "RUNNING", start_time=1070.0))
    feed(
        ev.VertexObserved(2, vname(2), "FAILED", 8, PREEMPTED, start_time=1070.0, end_time=1200.0), at=1200.0
    )
    feed(ev.TimerFired(), at=1300.0)
    feed(ev.AttemptSubmitted(3, vname(3)))
    feed(ev.VertexObserved(3, vname(3), "RUNNING", start_time=1310.0))

    texts = [e["what"] for e in timeline]
    assert (
        "attempt 2 requested from scratch (spot) on 2 replicas (workerpool0: 1, workerpool1: 1), shrunk from 4"
        in texts
    )
    assert "attempt 2 running shrunk to 2 of 4 replicas" in texts
    assert "attempt 3 running grown back to 4 replicas" in texts

    document = {
        "request": {
            "jobId": "el",
            "checkpoint": {"uri": "gs://b/el"},
            "jobSpec": {"workerPoolSpecs": [{"replicaCount": 1}, {"replicaCount": 3, "minReplicaCount": 1}]},
        },
        "state": run.state.to_dict(),
        "timeline": timeline,
    }
    view = status_document(document)
    assert [(a["replicas"], a["shrunk"]) for a in view["attempts"]] == [
        ([1, 3], False),
        ([1, 1], True),
        ([1, 3], False),
    ]
    assert view["requestedReplicas"] == [1, 3]
    assert view["elastic"] == {
        "minReplicas": [1, 1],
        "shrinkAfterSeconds": 60.0,
        "growBack": "everyAttempt",
        "growBackAfterSeconds": None,
    }
