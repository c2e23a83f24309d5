"""The controller's heartbeat in the state store: written at most once a period, believed for
about three periods, and readable by anyone who can read the store."""

from __future__ import annotations

from controller.store.heartbeat import Heartbeat, is_fresh, last_beat
from controller.store.sqlite import SqliteStateStore


def test_a_beat_is_stored_and_read_back_with_its_holder(tmp_path):
    store = SqliteStateStore(str(tmp_path / "state.db"))
    assert last_beat(store) is None
    Heartbeat(store, "host-1", every_seconds=10).beat(1000.0)
    beat = last_beat(store)
    assert beat == {"holder": "host-1", "time": 1000.0, "everySeconds": 10}
    assert is_fresh(beat, 1020.0)
    assert not is_fresh(beat, 1000.0 + 3 * 10 + 6)
    assert not is_fresh(None, 1000.0)


def test_beats_are_written_once_per_period_however_often_it_is_called(tmp_path):
    store = SqliteStateStore(str(tmp_path / "state.db"))
    heart = Heartbeat(store, "host-1", every_seconds=10)
    heart.beat(1000.0)
    version = store.get("controller/heartbeat").version
    heart.beat(1005.0)
    assert store.get("controller/heartbeat").version == version
    heart.beat(1010.0)
    assert last_beat(store)["time"] == 1010.0


def test_a_new_controller_takes_the_beat_over(tmp_path):
    store = SqliteStateStore(str(tmp_path / "state.db"))
    Heartbeat(store, "old", every_seconds=10).beat(1000.0)
    Heartbeat(store, "new", every_seconds=10).beat(2000.0)
    assert last_beat(store)["holder"] == "new"
