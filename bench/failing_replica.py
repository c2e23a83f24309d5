"""A replica that fails as the trainer does when the user's model raises (exit 70), for
bench/reclaim_decision.py: it writes what the real trainer writes on that path, the chief's
exit record and its own replica record (replica, code, step, the exception's last line), then
exits. No torch: the benchmark measures the controller's decision, not the training.

    python bench/failing_replica.py SECONDS   # fail after SECONDS (workers run until stopped)
"""

from __future__ import annotations

import os
import signal
import sys
import threading

from trainer import layout, storage
from trainer.cluster import from_environment
from trainer.config import JobIdentity

STEP = 7  # the step the user's model raised at


def main() -> int:
    identity = JobIdentity.from_env()
    topology = from_environment(dict(os.environ))
    root = os.environ["RELAUNCH_CHECKPOINT_URI"]
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stopped.set())
    if topology.node_rank != 0:
        stopped.wait()  # a worker: torn down with the gang
        return 128 + signal.SIGTERM
    stopped.wait(float(sys.argv[1]))  # training, until the user's model raises
    detail = "RuntimeError: shapes do not match"
    storage.write_exit_record(
        root,
        layout.ExitRecord(
            job_id=identity.job_id,
            attempt=identity.attempt,
            reason=layout.REASON_RUNTIME_ERROR,
            exit_code=layout.EXIT_RUNTIME,
            step=STEP,
            vertex_job_id=identity.vertex_job_id,
        ),
    )
    storage.write_replica_exit(
        root,
        layout.ReplicaExit(
            job_id=identity.job_id,
            attempt=identity.attempt,
            replica=topology.replica,
            node_rank=topology.node_rank,
            reason=layout.REASON_RUNTIME_ERROR,
            exit_code=layout.EXIT_RUNTIME,
            vertex_job_id=identity.vertex_job_id,
            step=STEP,
            detail=detail,
        ),
    )
    return layout.EXIT_RUNTIME


if __name__ == "__main__":
    sys.exit(main())
