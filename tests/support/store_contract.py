"""Tests every StateStore implementation must pass.

Subclass `StateStoreContract` in a test module and provide a `store` fixture that yields a fresh,
empty store; pytest collects the inherited tests for it.
"""

from __future__ import annotations

import threading

import pytest

from controller.store import AlreadyExists, Fenced, VersionConflict
from controller.store.keys import LEDGER_PENDING_FIELD


class StateStoreContract:
    def test_missing_key_reads_as_none(self, store):
        assert store.get("nobody") is None

    def test_created_document_reads_back_with_version_1(self, store):
        version = store.create("job-a", {"phase": "accepted", "n": 1})
        found = store.get("job-a")
        assert (version, found.document, found.version) == (1, {"phase": "accepted", "n": 1}, 1)

    def test_create_refuses_an_existing_key(self, store):
        store.create("job-a", {"n": 1})
        with pytest.raises(AlreadyExists):
            store.create("job-a", {"n": 2})
        assert store.get("job-a").document == {"n": 1}

    def test_put_with_current_version_replaces_and_bumps_version(self, store):
        store.create("job-a", {"n": 1})
        new_version = store.put("job-a", {"n": 2}, expected_version=1)
        found = store.get("job-a")
        assert found.document == {"n": 2} and found.version == new_version and new_version > 1

    def test_put_with_stale_version_is_refused_and_changes_nothing(self, store):
        store.create("job-a", {"n": 1})
        store.put("job-a", {"n": 2}, expected_version=1)
        with pytest.raises(VersionConflict):
            store.put("job-a", {"n": 3}, expected_version=1)
        assert store.get("job-a").document == {"n": 2}

    def test_put_on_missing_key_is_a_conflict(self, store):
        with pytest.raises(VersionConflict):
            store.put("ghost", {"n": 1}, expected_version=1)

    def test_lower_fence_cannot_overwrite_a_higher_fence(self, store):
        store.create("job-a", {"by": "old leader"}, fence=1)
        version = store.put("job-a", {"by": "new leader"}, expected_version=1, fence=2)
        with pytest.raises(Fenced):
            store.put("job-a", {"by": "old leader again"}, expected_version=version, fence=1)
        assert store.get("job-a").document == {"by": "new leader"}

    def test_equal_fence_may_keep_writing(self, store):
        store.create("job-a", {"n": 1}, fence=5)
        assert store.put("job-a", {"n": 2}, expected_version=1, fence=5) > 1

    def test_a_raised_fence_floor_refuses_lower_fenced_creates_and_puts(self, store):
        store.create("jobs/a", {"by": "old leader"}, fence=3)
        store.raise_fence(4)  # a new leader takes over, before it has written anything
        with pytest.raises(Fenced):
            store.create("jobs/b", {"by": "old leader"}, fence=3)
        with pytest.raises(Fenced):
            store.put("jobs/a", {"by": "old leader"}, expected_version=1, fence=3)
        assert store.get("jobs/b") is None and store.get("jobs/a").document == {"by": "old leader"}
        assert store.create("jobs/c", {"by": "new leader"}, fence=4) == 1
        assert store.put("jobs/a", {"by": "new leader"}, expected_version=1, fence=4) == 2

    def test_the_fence_floor_never_goes_down(self, store):
        store.raise_fence(7)
        store.raise_fence(5)
        with pytest.raises(Fenced):
            store.create("jobs/a", {}, fence=6)

    def test_unfenced_creates_are_allowed_whoever_leads(self, store):
        """The intake records requests and cancels on any instance, leader or not."""
        store.raise_fence(9)
        assert store.create("requests/x", {"n": 1}) == 1
        assert store.create("requests/x-fenced-zero", {"n": 1}, fence=0) == 1
        assert [v.key for v in store.list("")] == ["requests/x", "requests/x-fenced-zero"]

    def test_concurrent_writers_from_one_version_exactly_one_wins(self, store):
        store.create("job-a", {"n": 0})
        outcomes = []
        barrier = threading.Barrier(8)

        def writer(i):
            barrier.wait()
            try:
                store.put("job-a", {"n": i}, expected_version=1)
                outcomes.append(("won", i))
            except VersionConflict:
                outcomes.append(("lost", i))

        threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        winners = [i for result, i in outcomes if result == "won"]
        assert len(outcomes) == 8 and len(winners) == 1
        assert store.get("job-a").document == {"n": winners[0]}

    def test_concurrent_creates_each_stand_alone_and_a_refused_one_undoes_only_itself(self, store):
        # Writes arriving together may share a commit (the SQLite store's group commit): each
        # create that returned must read back, and the refused duplicate or fenced ones must
        # neither land nor take anyone else's write with them.
        store.raise_fence(5)
        store.create("jobs/taken", {"n": "first"})
        barrier = threading.Barrier(12)
        outcomes: dict[str, str] = {}

        def writer(i: int) -> None:
            key = "jobs/taken" if i % 4 == 0 else f"jobs/w{i:02d}"
            fence = 1 if i % 4 == 1 else 0  # below the floor: refused
            barrier.wait()
            try:
                store.create(key, {"n": i}, fence=fence)
                outcomes[f"{i}"] = "created"
            except AlreadyExists:
                outcomes[f"{i}"] = "exists"
            except Fenced:
                outcomes[f"{i}"] = "fenced"

        threads = [threading.Thread(target=writer, args=(i,)) for i in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert len(outcomes) == 12
        for i in range(12):
            want = "exists" if i % 4 == 0 else "fenced" if i % 4 == 1 else "created"
            assert outcomes[f"{i}"] == want, (i, outcomes)
            if want == "created":
                assert store.get(f"jobs/w{i:02d}").document == {"n": i}
            elif want == "fenced":
                assert store.get(f"jobs/w{i:02d}") is None
        assert store.get("jobs/taken").document == {"n": "first"}

    def test_together_reads_its_own_writes_and_returns_what_its_work_returns(self, store):
        store.create("claims/a", {"owner": "x"})

        def work(view):
            view.create("claims/b", {"owner": "y"})
            with pytest.raises(AlreadyExists):
                view.create("claims/a", {"owner": "y"})  # refused; the work goes on
            view.delete("claims/a", expected_version=1)
            return [(v.key, v.document) for v in view.list("claims/")], view.get("claims/b").version

        listed, version = store.together(work)

        assert listed == [("claims/b", {"owner": "y"})] and version == 1
        assert store.get("claims/a") is None and store.get("claims/b").document == {"owner": "y"}

    def test_an_error_raised_by_togethers_work_reaches_the_caller(self, store):
        def work(view):
            view.create("claims/b", {"owner": "y"})
            raise LookupError("a bug in the work")

        with pytest.raises(LookupError, match="a bug in the work"):
            store.together(work)
        store.create("claims/c", {})  # the store goes on
        assert store.get("claims/c").document == {}

    def test_list_of_a_prefix_holds_only_that_prefix(self, store):
        for key in ("jobs", "jobs-x/a", "jobs/a", "jobs/a/b", "jobsz", "job/a"):
            store.create(key, {})
        assert [v.key for v in store.list("jobs/")] == ["jobs/a", "jobs/a/b"]
        assert [v.key for v in store.list("jobs/a/")] == ["jobs/a/b"]

    def test_list_by_prefix_in_key_order(self, store):
        for key in ("jobs/b", "jobs/a", "rejected/x", "jobs/c"):
            store.create(key, {"key": key})
        assert [v.key for v in store.list("jobs/")] == ["jobs/a", "jobs/b", "jobs/c"]
        assert [v.document["key"] for v in store.list("rejected/")] == ["rejected/x"]

    def test_delete_needs_the_current_version(self, store):
        store.create("job-a", {"n": 1})
        with pytest.raises(VersionConflict):
            store.delete("job-a", expected_version=7)
        store.delete("job-a", expected_version=1)
        assert store.get("job-a") is None

    def test_bad_keys_are_refused_with_a_reason(self, store):
        with pytest.raises(ValueError, match="invalid store key"):
            store.create("Bad Key!", {})

    # --- the live index (base.py): list_live returns jobs whose last write was not terminal ----

    def test_list_live_holds_unfinished_jobs_only_and_a_finished_job_leaves_it(self, store):
        store.create("jobs/b", {"state": {"phase": "running"}})
        store.create("jobs/a", {"state": {"phase": "accepted"}})
        store.create("jobs/c", {"state": {"phase": "succeeded"}})
        store.create("cancels/a", {"time": 1})
        assert [v.key for v in store.list_live("jobs/")] == ["jobs/a", "jobs/b"]

        store.put("jobs/b", {"state": {"phase": "cancelled"}}, expected_version=1)
        assert [v.key for v in store.list_live("jobs/")] == ["jobs/a"]
        assert [v.document for v in store.list_live("")] == [{"state": {"phase": "accepted"}}]
        assert [v.key for v in store.list("jobs/")] == ["jobs/a", "jobs/b", "jobs/c"]  # still stored

    def test_list_live_returns_the_latest_version_of_each_live_job(self, store):
        store.create("jobs/a", {"state": {"phase": "accepted"}})
        store.put("jobs/a", {"state": {"phase": "running"}, "n": 2}, expected_version=1)
        [found] = store.list_live("jobs/")
        assert (found.document, found.version) == ({"state": {"phase": "running"}, "n": 2}, 2)

    def test_a_job_whose_phase_cannot_be_read_stays_live(self, store):
        """Nothing unreadable may silently drop out of the reconcile pass."""
        store.create("jobs/odd", {"no": "state"})
        assert [v.key for v in store.list_live("jobs/")] == ["jobs/odd"]

    def test_a_finished_job_waiting_for_the_interval_ledger_stays_live_until_the_mark_goes(self, store):
        """A crash between a job's terminal write and the ledger's must not hide the job."""
        store.create("jobs/a", {"state": {"phase": "running"}})
        store.put("jobs/a", {"state": {"phase": "succeeded"}, LEDGER_PENDING_FIELD: True}, expected_version=1)
        assert [v.key for v in store.list_live("jobs/")] == ["jobs/a"]
        store.put("jobs/a", {"state": {"phase": "succeeded"}}, expected_version=2)
        assert list(store.list_live("jobs/")) == []

    def test_a_deleted_job_leaves_the_live_index(self, store):
        store.create("jobs/a", {"state": {"phase": "running"}})
        store.delete("jobs/a", expected_version=1)
        assert list(store.list_live("jobs/")) == []

    def test_many_documents_list_completely_and_in_key_order(self, store):
        keys = [f"jobs/j{i:04d}" for i in range(1205)] + ["jobs/j0001-x"]
        for i, key in enumerate(keys):
            phase = "running" if i % 100 == 0 else "succeeded"
            store.create(key, {"state": {"phase": phase}, "i": i})
        assert [v.key for v in store.list("jobs/")] == sorted(keys)
        assert [v.key for v in store.list_live("jobs/")] == [f"jobs/j{i:04d}" for i in range(0, 1205, 100)]
