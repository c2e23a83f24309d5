"""A failure reason names the step even when the failed replica died before it could say."""

from controller.core.classify import ReplicaExit
from controller.core.confirm import describe


def test_a_replica_killed_before_reporting_is_named_at_the_step_its_gang_reached():
    killed = ReplicaExit("workerpool1-0", "runtime_error", exit_code=70, detail="worker exit codes [None]")
    chief = ReplicaExit("workerpool0-0", "stopped_by_peer", exit_code=70, step=12)
    text = describe((chief, killed), killed, "job-1", 3)
    assert text.startswith("workerpool1-0 exit 70 at step 12: worker exit codes [None]")
    assert text.endswith("(relaunch logs job-1 --attempt 3 --replica workerpool1-0)")


def test_the_failed_replica_s_own_step_wins():
    failed = ReplicaExit("workerpool1-0", "runtime_error", exit_code=70, step=4, detail="RuntimeError: boom")
    chief = ReplicaExit("workerpool0-0", "stopped_by_peer", exit_code=70, step=5)
    assert describe((chief, failed), failed, "job-1", 1).startswith(
        "workerpool1-0 exit 70 at step 4: RuntimeError"
    )
