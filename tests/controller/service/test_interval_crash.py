"""The checkpoint interval's ledger loses no ending to a crash, with `relaunch controller` as a real
process: killed (-9) right after a job's terminal write and before the ledger write, the job's
final ending is counted exactly once by the controller that takes over."""

from __future__ import annotations

import json

from controller.core.adaptive_interval import Ledger
from controller.core.model import JobState
from controller.store.keys import INTERVAL_LEDGER_KEY, JOBS_PREFIX, LEDGER_PENDING_FIELD, job_key
from controller.store.sqlite import SqliteStateStore
from tests.support.daemon import publish, wait_for
from tests.support.engine import PROJECT, request


def fixed_interval_request(job_id: str, bucket: str) -> bytes:
    """A job whose endings teach the ledger (a fixed interval needs no ledger read to start)."""
    body = json.loads(request(job_id, bucket, args=["--steps", "6", "--every", "2"]))
    body["checkpoint"]["interval"] = 60
    return json.dumps(body).encode()


def ledger_of(store: SqliteStateStore) -> Ledger:
    record = store.get(INTERVAL_LEDGER_KEY)
    return Ledger() if record is None else Ledger.from_dict(record.document)


def test_a_final_ending_lost_to_a_crash_before_the_ledger_write_is_counted_once_by_the_next_leader(
    devstack, bucket, tmp_path, settings, controllers
):
    job_id = "ledger-crash-1"
    doomed = controllers(
        devstack.env(), tmp_path / "first.log", **settings, RELAUNCH_FAULT_CRASH_POINT="after-terminal-write"
    )
    doomed.wait_ready("leader")
    publish(PROJECT, settings["RELAUNCH_REQUESTS_TOPIC"], fixed_interval_request(job_id, bucket))
    doomed.proc.wait(timeout=120)
    assert doomed.proc.returncode == -9, doomed.logs()[-2000:]
    doomed.stop()

    store = SqliteStateStore(str(settings["RELAUNCH_STATE_STORE"]).removeprefix("sqlite:///"))
    stored = store.get(job_key(job_id))
    assert stored is not None
    assert JobState.from_dict(stored.document["state"]).phase.value == "succeeded"
    # The crash fell between the two writes: the job is finished, the ledger knows nothing of it,
    # and the mark written with the terminal state keeps the job in the live index.
    assert not ledger_of(store).has_counted(job_id, 1)
    assert stored.document[LEDGER_PENDING_FIELD] is True
    assert [r.key for r in store.list_live(JOBS_PREFIX)] == [job_key(job_id)]

    survivor = controllers(devstack.env(), tmp_path / "second.log", **settings)
    survivor.wait_ready("leader")
    wait_for(
        lambda: LEDGER_PENDING_FIELD not in store.get(job_key(job_id)).document,
        timeout=60,
        what="the new leader counted the ending and cleared the mark",
    )
    ledger = ledger_of(store)
    assert ledger.has_counted(job_id, 1)
    [(_, estimate)] = ledger.book.estimates
    # Counted once: one lifetime, a succeeded one, whose exposure is the whole book's.
    assert [kind.value for _, kind in estimate.lifetimes] == ["succeeded"]
    assert estimate.exposure_seconds == estimate.lifetimes[0][0] > 0
    # Finished and counted: the job left the live index, so passes read nothing of it any more.
    assert list(store.list_live(JOBS_PREFIX)) == []
    observed = [
        line for line in survivor.log_lines() if line.get("message") == "checkpoint interval: ending observed"
    ]
    assert [(line["job_id"], line["attempt"]) for line in observed] == [(job_id, 1)]
