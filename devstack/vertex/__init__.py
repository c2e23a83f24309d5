"""Local stand-in for Vertex AI's JobService (CustomJobs), spoken over real gRPC.

Production code reaches it unchanged through ``google.cloud.aiplatform_v1.JobServiceClient``
on an insecure channel to ``RELAUNCH_VERTEX_ENDPOINT``.

Covered
  * RPCs: CreateCustomJob, GetCustomJob, ListCustomJobs (filters on ``labels.k=v``,
    ``labels.k:*``, ``state``, ``display_name``, ``create_time``, joined with AND; paging),
    CancelCustomJob, DeleteCustomJob (an Operation that is already done) and
    ``google.longrunning.Operations/GetOperation``. Every other method: UNIMPLEMENTED.
  * Lifecycle QUEUED -> PENDING -> RUNNING -> SUCCEEDED / FAILED / CANCELLING -> CANCELLED with
    create/start/end/update times and ``error`` as in docs/contracts.md.
  * Each replica is a local process running the container's ``command + args`` in its own
    process group, with Vertex's environment: the pool's ``env``, ``CLUSTER_SPEC`` (loopback
    addresses on distinct free ports), ``MASTER_ADDR``/``MASTER_PORT``/``WORLD_SIZE``/``RANK``,
    ``AIP_*_DIR`` from ``base_output_directory``, ``CLOUD_ML_JOB_ID``, and the devstack's Python
    first on ``PATH``. Output goes to ``workdir/<job id>/workerpool<i>-<j>.log``.
  * Gang semantics (one non-zero exit fails the job and tears the rest down),
    ``scheduling.timeout``, Spot preemption, stockouts, injected API errors, per-minute quotas,
    and a Cloud Logging LogEntry per state transition handed to ``event_sink``.

NOT emulated
  * Container images (the image URI is only recorded), accelerators and machine types, disks,
    networks, service accounts, reservations, persistent resources, autoscaling.
  * Vertex's own restarts: a failed worker is not restarted, a job is not retried on internal
    errors, and ``restart_job_on_worker_restart`` / ``disable_retries`` are ignored.
  * ``python_package_spec`` pools and pools without an explicit ``command``.
  * Authentication, IAM, and the REST transport; the job store is in memory only.
"""

from devstack.vertex.emulator import ApiError, VertexEmulator, start_vertex

__all__ = ["ApiError", "VertexEmulator", "start_vertex"]
