"""The project's own fault-injection run, one short seed (bench/fault_run.py runs it long)."""

from __future__ import annotations

from tests.support.faults import FaultConfig, FaultRun, plan


def test_the_schedule_is_a_function_of_its_seed():
    config = FaultConfig(seed=3, duration_seconds=120)
    schedule = plan(config)
    assert schedule == plan(FaultConfig(seed=3, duration_seconds=120))
    assert schedule != plan(FaultConfig(seed=4, duration_seconds=120))
    kinds = {step.kind for step in schedule}
    assert {"publish", "kill", "pause", "preempt"} <= kinds
    assert all(step.seconds > config.lease_seconds for step in schedule if step.kind == "pause")


def test_a_short_seeded_fault_run_keeps_every_promise(devstack, bucket, tmp_path):
    # Seed 7's 30 s on 8 jobs: 10 kills, 7 pauses past the lease, 3 preemptions, a GCS outage, a
    # Vertex outage, Vertex API faults, 4 duplicate publishes, 3 cancels (one before its request).
    # A kill or pause that finds its controller still starting is skipped, so how many land
    # depends on the machine; the promises may not.
    config = FaultConfig(seed=7, duration_seconds=30, jobs_per_minute=16)
    report = FaultRun(devstack, tmp_path, config, bucket=bucket).run()
    print(report.summary())
    assert report.counts["kills"] + report.counts["pauses past the lease"] >= 2, report.summary()
    assert report.violations == [], report.violations
