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


def test_the_reason_gives_the_failed_worker_s_own_status_beside_the_launcher_s_code():
    exited = ReplicaExit("workerpool1-0", "runtime_error", exit_code=70, step=2, worker_exit_code=1)
    assert describe((exited,), exited, "j", 1).startswith("workerpool1-0 exit 70 (worker exit 1) at step 2")
    killed = ReplicaExit(
        "workerpool1-0", "runtime_error", exit_code=70, step=2, worker_exit_code=-11, worker_signal="SIGSEGV"
    )
    assert describe((killed,), killed, "j", 1).startswith(
        "workerpool1-0 exit 70 (worker killed by SIGSEGV) at step 2"
    )
    raised = ReplicaExit("workerpool1-0", "runtime_error", exit_code=70, step=2, worker_exit_code=70)
    assert describe((raised,), raised, "j", 1).startswith("workerpool1-0 exit 70 at step 2")  # nothing to add
    oom = ReplicaExit(
        "workerpool1-0",
        "runtime_error",
        exit_code=70,
        signal="SIGKILL (out of memory)",
        worker_exit_code=-9,
        worker_signal="SIGKILL",
    )
    assert "worker killed" not in describe((oom,), oom, "j", 1)  # the replica's signal already says it
