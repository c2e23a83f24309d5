"""How the Vertex stand-in behaves where Vertex AI's behaviour is documented, assumed or unknown.

Every knob names its source. [training-service] = Vertex docs "Understand the training service";
[spot] = "Use Spot VMs with training"; [types] = the aiplatform_v1 API reference; [gke] = GKE /
Compute Engine termination docs; [issues] = public issue threads. *assumed* = our best reading,
*unknown* = nobody documents it: a knob, and the controller's tests run under more than one answer.
The defaults are the documented behaviour; tests shorten only the durations.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

from google.rpc import code_pb2

STOCKOUT_TEXT = (
    "Resources are insufficient in region: {region}. Try a different region or use a different accelerator."
)
INTERNAL_TEXT = "Internal error occurred for the current attempt."
# documented [training-service]: the common error of a replica that ran out of memory.
OUT_OF_MEMORY_TEXT = "The replica {replica} ran out of memory and exited with a non-zero status of {status}."
QUOTA_TEXT = "The following quota metrics exceed quota limits: {metric}"


@dataclass(frozen=True)
class VertexBehaviour:
    # --- Spot reclaim --------------------------------------------------------------------
    # unknown: the SIGTERM grace inside a Vertex container. Vertex nodes look like GKE Autopilot
    # nodes, whose user pods get 15 s by default [gke]; Compute Engine allows 30 s in all.
    reclaim_grace_seconds: float = 15.0
    # documented: "Compute Engine tries to restart the job up to six times" [spot]; each restart
    # reruns every replica with the unchanged environment.
    reclaim_restarts: int = 6
    # unknown: whether a reclaim is restarted in place at all in every case; True ends the job on
    # the first reclaim, as if the restarts were exhausted (or skipped).
    reclaim_ends_job: bool = False
    # unknown: whether `disableRetries` also stops the reclaim restarts (it is documented for
    # internal errors and overrides restartJobOnWorkerRestart [types]). Assumed: it does.
    disable_retries_stops_reclaim_restarts: bool = True
    # documented: "fails with a STOCKOUT error" [spot]; the code and text are unknown. Assumed: the
    # documented stockout text with RESOURCE_EXHAUSTED. Never "preempt" or "spot" in it.
    reclaim_error_code: int = code_pb2.RESOURCE_EXHAUSTED
    reclaim_error_text: str = STOCKOUT_TEXT
    # unknown: the state shown while the job restarts in place. Assumed: it stays RUNNING; True
    # shows PENDING until the replicas run again.
    pending_during_restart: bool = False
    # --- the error of a FAILED job ---------------------------------------------------------
    # documented: "About one minute after a job ends, Vertex AI sets the error code" [training-service].
    failed_error_delay_seconds: float = 60.0
    # --- restarts of crashes and stockouts [training-service] -----------------------------
    crash_restart_exit_codes: frozenset[int] = field(default_factory=lambda: frozenset({6, 11, 134, 139}))
    crash_restarts: int = 3  # documented: 134/139 "restarted up to 3 times"
    # documented: out of memory is a common error that shuts the whole job down, with
    # OUT_OF_MEMORY_TEXT [training-service]; the error code is unknown. Assumed: 3
    # (INVALID_ARGUMENT), the code a user-code failure carries.
    out_of_memory_error_code: int = code_pb2.INVALID_ARGUMENT
    stockout_restarts: int = 3  # documented: a stockout is "restarted up to 3 times"
    # --- quota shortfall [training-service] / [issues] ---------------------------------------
    quota_metric: str = "aiplatform.googleapis.com/custom_model_training_cpus"  # assumed suffix
    # --- a stockout that leaves room for fewer replicas (`set_capacity`) ---------------------
    # unknown: the state a job shows while it waits for machines. "Waiting for job to be
    # provisioned." is a documented service line [logs] and devstack writes it on PENDING;
    # [training-service] says a job short of quota "stays QUEUED". Assumed: QUEUED.
    capacity_wait_state: str = "QUEUED"
    # --- FLEX_START [types]: max_wait_duration defaults to 1 day; 0 waits for ever -------------
    flex_start_default_max_wait_seconds: float = 86400.0
    # --- log entries [gcloud ai custom-jobs stream-logs] ---------------------------------------
    # unknown: whether QUEUED, FAILED, CANCELLING and CANCELLED write a service line. Assumed: yes
    # (devstack's own texts); False writes only the documented texts, so a controller must
    # notice those transitions by reading the job.
    log_undocumented_transitions: bool = True

    def with_changes(self, **changes) -> VertexBehaviour:
        known = {f.name for f in fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise ValueError(f"unknown Vertex behaviour knob(s): {', '.join(unknown)}")
        if changes.get("capacity_wait_state", "QUEUED") not in ("QUEUED", "PENDING"):
            raise ValueError("capacity_wait_state must be QUEUED or PENDING")
        if "crash_restart_exit_codes" in changes:
            changes["crash_restart_exit_codes"] = frozenset(changes["crash_restart_exit_codes"])
        return replace(self, **changes)
