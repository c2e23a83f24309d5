"""What a person reads about a job with placements: each choice and its figures on the timeline,
a line per attempt in `relaunch status JOB`, and the placement on the status page."""

from __future__ import annotations

from controller.cli.commands.status import describe_job
from controller.core import events as ev
from controller.readmodel.jobs import status_document, transition_entries
from controller.service.status_page import _job_detail
from tests.controller.core.test_placement_choice import A, B, placed_run
from tests.support.core_driver import STOCKOUT, vname


def test_every_choice_is_explained_with_the_figures_it_compared():
    run = placed_run(A, B)
    timeline: list[dict] = []

    def feed(event):
        before = run.state
        actions = run.feed(event)
        timeline.extend(transition_entries(before, run.state, event, actions, run.now))

    feed(ev.AttemptSubmitted(1, vname(1)))
    feed(ev.VertexObserved(1, vname(1), "FAILED", 8, STOCKOUT, end_time=run.now))
    feed(ev.TimerFired())  # due at once: the next attempt
    placed = [e for e in timeline if "placed on" in e["what"]]
    assert [e["placement"] for e in placed] == ["spot-b"]  # attempt 1's came with the request
    assert placed[0]["what"].startswith("attempt 2 placed on spot-b: spot-b: lowest cost per unit")
    assert "spot-a" in placed[0]["what"] and "refused this attempt" in placed[0]["what"]
    assert {f["name"] for f in placed[0]["figures"]} == {"spot-a", "spot-b"}
    assert all("costPerUnit" in f and "lostPerHour" in f for f in placed[0]["figures"])
    assert "attempt 2 requested from scratch" in [e["what"] for e in timeline]  # no "(spot)"

    document = {
        "request": {
            "jobId": "job-1",
            "checkpoint": {"uri": "gs://b/job-1"},
            "jobSpec": {"workerPoolSpecs": [{"replicaCount": 1}, {"replicaCount": 1}]},
        },
        "state": run.state.to_dict(),
        "timeline": timeline,
    }
    view = status_document(document, with_timeline=True)
    assert [a["placement"]["chosen"] for a in view["attempts"]] == ["spot-a", "spot-b"]
    page = describe_job(view, run.now)
    assert "attempt 2 placed on spot-b: spot-b: lowest cost per unit" in page
    html = _job_detail(view, run.now)
    assert "spot-b" in html and "refused this attempt" in html
