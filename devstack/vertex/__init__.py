"""Local stand-in for Vertex AI's JobService (CustomJobs), spoken over real gRPC.

Production code reaches it unchanged through ``google.cloud.aiplatform_v1.JobServiceClient``
on an insecure channel to ``RELAUNCH_VERTEX_ENDPOINT``.

Covered
  * RPCs: CreateCustomJob, GetCustomJob, ListCustomJobs (filters on ``labels.k=v``,
    ``labels.k:*``, ``state``, ``display_name``, ``create_time``, joined with AND; ``read_mask``;
    paging),
    CancelCustomJob, DeleteCustomJob (an Operation that is already done) and
    ``google.longrunning.Operations/GetOperation``. Every other method: UNIMPLEMENTED.
  * Lifecycle QUEUED -> PENDING -> RUNNING -> SUCCEEDED / FAILED / CANCELLING -> CANCELLED with
    create/start/end/update times and ``error`` as in docs/contracts.md.
  * Each replica is a local process running the container's ``command + args`` in its own
    process group, with Vertex's environment: the pool's ``env``, ``CLUSTER_SPEC`` (loopback
    addresses on distinct free ports), ``MASTER_ADDR``/``MASTER_PORT``/``WORLD_SIZE``/``RANK``,
    ``AIP_*_DIR`` from ``base_output_directory``, ``CLOUD_ML_JOB_ID``, and the devstack's Python
    first on ``PATH``. Output goes to ``workdir/<job id>/workerpool<i>-<j>.log``.
  * Vertex's documented behaviour, as the default, with knobs (``devstack.vertex.behaviour``,
    which names each source and says documented / assumed / unknown): Spot reclaims (SIGTERM,
    grace, SIGKILL, in-place restarts, then a STOCKOUT-style FAILED), success on the primary
    replica's exit 0, 134/139 retried 3 times, user errors with the documented text and code 3,
    stockouts retried then failed with the documented text, ``error`` set a delay after FAILED,
    quota shortfalls (QUEUED or 429), a stockout that leaves room for N replicas of a machine
    type (``set_capacity``: bigger gangs wait QUEUED/PENDING or fail), Scheduling (STANDARD/SPOT/FLEX_START with
    ``max_wait_duration``, ``timeout``, ``disable_retries``), the documented service log lines.
  * Simulated replicas (``devstack.vertex.simulated``): the same lifecycle with no process, for
    thousands of jobs; finished jobs seeded in bulk (``seed_finished``); every RPC counted.
  * Faults: injected API errors, per-minute quotas, creates served with their reply lost.

NOT emulated
  * Container images (the image URI is only recorded), accelerators and machine types, disks,
    networks, service accounts, reservations, persistent resources, autoscaling.
  * Restarts of a single worker ("other errors": up to 5 worker restarts, then 3 job retries),
    internal-error retries, out-of-memory endings, partial reclaims (a reclaim takes every
    replica, so ``restart_job_on_worker_restart`` changes nothing here).
  * ``python_package_spec`` pools and pools without an explicit ``command``.
  * Authentication, IAM, and the REST transport; the job store is in memory only.
"""

from devstack.vertex.emulator import ApiError, VertexEmulator, start_vertex

__all__ = ["ApiError", "VertexEmulator", "start_vertex"]
