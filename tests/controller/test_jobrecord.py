"""The typed job document: what today's releases stored still loads, and round-trips."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controller.core.model import JobState, Phase
from controller.jobrecord import FORMAT, JobRecord, is_live_document

# Written by commit aea2d43's intake and engine (a request with `checkpoint.interval: auto`,
# cancelled before its first attempt), read back from its SQLite store.
WRITTEN_BY_AEA2D43 = Path(__file__).with_name("data") / "job-document-aea2d43.json"


def test_a_document_written_before_the_format_field_loads():
    document = json.loads(WRITTEN_BY_AEA2D43.read_text())
    record = JobRecord.from_dict(document)

    assert record.job_id == "written-by-aea2d43"
    assert record.state.phase is Phase.CANCELLED and record.state.cancel_requested
    assert record.request["checkpoint"]["interval"] == "auto"
    assert record.fingerprint == document["fingerprint"]
    assert [entry["what"] for entry in record.timeline][0] == "request accepted"
    assert record.ledger_pending  # its endings wait for the interval ledger: still live
    assert is_live_document(document)


def test_writing_it_back_keeps_every_field_and_adds_the_format():
    document = json.loads(WRITTEN_BY_AEA2D43.read_text())
    written = JobRecord.from_dict(document).to_dict()
    assert {k: v for k, v in written.items() if k != "state"} == {
        **{k: v for k, v in document.items() if k != "state"},
        "format": FORMAT,
    }
    assert JobState.from_dict(written["state"]) == JobState.from_dict(document["state"])
    assert JobRecord.from_dict(written) == JobRecord.from_dict(document)


def test_keys_a_newer_release_added_survive_a_rewrite():
    document = {**json.loads(WRITTEN_BY_AEA2D43.read_text()), "placement": {"zone": "us-central1-a"}}
    assert JobRecord.from_dict(document).to_dict()["placement"] == {"zone": "us-central1-a"}


def test_a_document_of_a_later_format_is_refused_not_misread():
    document = {**json.loads(WRITTEN_BY_AEA2D43.read_text()), "format": FORMAT + 1}
    with pytest.raises(ValueError, match="format"):
        JobRecord.from_dict(document)


def test_the_timeline_keeps_its_newest_entries():
    record = JobRecord.from_dict(json.loads(WRITTEN_BY_AEA2D43.read_text()))
    entries = [{"time": float(n), "attempt": 0, "what": f"entry {n}"} for n in range(10)]
    after = record.with_state(record.state, entries, timeline_limit=4)
    assert [e["what"] for e in after.timeline] == ["entry 6", "entry 7", "entry 8", "entry 9"]


def test_an_interval_an_older_release_kept_beside_the_state_is_the_attempts_own():
    """Before the core chose the interval, it was stored under `checkpointIntervals`; an attempt
    of such a job keeps it, so a retried submission renders the same value and status shows it."""
    from controller.core.classify import Ending
    from controller.core.model import Attempt
    from controller.readmodel.jobs import status_document

    document = json.loads(WRITTEN_BY_AEA2D43.read_text())
    state = JobState.from_dict(document["state"])
    attempt = Attempt(1, None, None, False, intent_at=1.0, ended_at=2.0, ending=Ending.CANCELLED)
    chosen = {"seconds": 120.0, "mode": "auto", "explanation": "from an older release"}
    document["state"] = JobState(state.job_id, state.policy, state.phase, attempts=(attempt,)).to_dict()
    del document["state"]["attempts"][0]["checkpoint_interval"]  # as an older release wrote it
    document["checkpointIntervals"] = {"1": chosen}

    record = JobRecord.from_dict(document)
    assert record.state.attempts[0].checkpoint_interval == chosen
    assert record.interval_choices == {"1": chosen}
    assert status_document(document)["attempts"][0]["checkpointInterval"] == chosen
    assert JobRecord.from_dict(record.to_dict()) == record


def test_the_pass_reads_a_summary_of_a_job_without_parsing_its_state():
    from controller.jobrecord import JobSummary

    summary = JobSummary.of(json.loads(WRITTEN_BY_AEA2D43.read_text()))
    assert (summary.job_id, summary.phase, summary.terminal) == ("written-by-aea2d43", "cancelled", True)
    assert summary.vertex_names == () and not summary.has_outbox
