"""A corpus of how Vertex AI ends a CustomJob, as documented, plus the answers nobody documents.

Each entry is one ending the controller may read: the job's state and `error`, what the attempt
was (Spot or not, started or not), the chief's exit record if any, and the ending Relaunch must
conclude. Sources (devstack/README.md gives their addresses):
  [training-service] Vertex docs, "Understand the training service" (restarts, common errors,
      success on the primary replica, error set about a minute after the end);
  [spot] Vertex docs, "Use Spot VMs with training" (a reclaim fails the job with a STOCKOUT error);
  [ci] error.code 3 for user-code failures, seen in public CI output;
  [unknown] nobody documents it: each plausible answer is an entry, and all must come out right.
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.core.classify import Ending

REGION = "us-central1"
USER_EXCEPTION = "The replica {replica} exited with a non-zero status of {code}. Termination reason: Error."
OUT_OF_MEMORY = "The replica {replica} ran out of memory and exited with a non-zero status of {code}."
STOCKOUT = (
    f"Resources are insufficient in region: {REGION}. Try a different region or use a different accelerator."
)
INTERNAL = "Internal error occurred for the current attempt."
TIMEOUT = "Job exceeded its timeout of 3600s."


@dataclass(frozen=True)
class Ending_:
    name: str
    source: str
    vertex_state: str
    code: int = 0
    message: str = ""
    spot: bool = True
    ran: bool = True
    exit_reason: str | None = None
    expected: Ending = Ending.INFRASTRUCTURE
    counts_as_failure: bool = True


def _user(code: int, replica: str = "workerpool1-1") -> str:
    return USER_EXCEPTION.format(replica=replica, code=code)


CORPUS: tuple[Ending_, ...] = (
    # --- documented ----------------------------------------------------------------------
    Ending_(
        "primary-exit-0", "training-service", "SUCCEEDED", expected=Ending.SUCCEEDED, counts_as_failure=False
    ),
    Ending_(
        "cancelled",
        "aiplatform_v1 types",
        "CANCELLED",
        1,
        "CANCELED",
        expected=Ending.CANCELLED,
        counts_as_failure=False,
    ),
    Ending_("user-exception", "training-service + ci", "FAILED", 3, _user(1), expected=Ending.USER_ERROR),
    Ending_("sigabrt-after-retries", "training-service", "FAILED", 3, _user(134), expected=Ending.USER_ERROR),
    Ending_("sigsegv-after-retries", "training-service", "FAILED", 3, _user(139), expected=Ending.USER_ERROR),
    Ending_(
        "out-of-memory",
        "training-service",
        "FAILED",
        3,
        OUT_OF_MEMORY.format(replica="workerpool0-0", code=137),
        expected=Ending.USER_ERROR,
    ),
    Ending_(
        "stockout-before-running",
        "training-service",
        "FAILED",
        8,
        STOCKOUT,
        ran=False,
        expected=Ending.CAPACITY,
        counts_as_failure=False,
    ),
    Ending_("internal-error-after-retries", "training-service", "FAILED", 13, INTERNAL, spot=False),
    Ending_("timeout", "aiplatform_v1 Scheduling.timeout", "FAILED", 4, TIMEOUT, expected=Ending.TIMEOUT),
    Ending_(
        "timeout-chief-sigtermed",
        "aiplatform_v1 Scheduling.timeout",
        "FAILED",
        4,
        TIMEOUT,
        exit_reason="preempted",
        expected=Ending.TIMEOUT,
    ),
    Ending_(
        "worker-crash-tears-down-gang",
        "training-service (issue 11)",
        "FAILED",
        3,
        _user(1, "workerpool1-0"),
        exit_reason="preempted",
        expected=Ending.USER_ERROR,
    ),
    Ending_(
        "reclaim-stockout-documented-text",
        "spot",
        "FAILED",
        8,
        STOCKOUT,
        expected=Ending.PREEMPTED,
        counts_as_failure=False,
    ),
    # --- unknown: the code and text of a reclaim after the in-place restarts -------------
    Ending_(
        "reclaim-code-14",
        "unknown",
        "FAILED",
        14,
        "The service is currently unavailable.",
        expected=Ending.PREEMPTED,
        counts_as_failure=False,
    ),
    Ending_(
        "reclaim-code-8-no-text",
        "unknown",
        "FAILED",
        8,
        "",
        expected=Ending.PREEMPTED,
        counts_as_failure=False,
    ),
    Ending_(
        "reclaim-code-13",
        "unknown",
        "FAILED",
        13,
        INTERNAL,
        expected=Ending.PREEMPTED,
        counts_as_failure=False,
    ),
    Ending_(
        "reclaim-empty-error-after-settling",
        "unknown",
        "FAILED",
        expected=Ending.PREEMPTED,
        counts_as_failure=False,
    ),
    Ending_(
        "reclaim-reported-as-sigterm-exit",
        "unknown",
        "FAILED",
        3,
        _user(143, "workerpool0-0"),
        expected=Ending.PREEMPTED,
        counts_as_failure=False,
    ),
    Ending_(
        "reclaim-reported-as-sigkill-exit",
        "unknown",
        "FAILED",
        3,
        _user(137, "workerpool1-0"),
        expected=Ending.PREEMPTED,
        counts_as_failure=False,
    ),
    Ending_(
        "reclaim-with-preempt-wording",
        "unknown",
        "FAILED",
        14,
        "The replica workerpool0-0 was preempted: the Spot VM was reclaimed.",
        expected=Ending.PREEMPTED,
        counts_as_failure=False,
    ),
    Ending_(
        "reclaim-with-exit-record",
        "unknown",
        "FAILED",
        14,
        "",
        exit_reason="preempted",
        expected=Ending.PREEMPTED,
        counts_as_failure=False,
    ),
    Ending_(
        "reclaim-while-queued-code-14",
        "unknown",
        "FAILED",
        14,
        "",
        ran=False,
        expected=Ending.CAPACITY,
        counts_as_failure=False,
    ),
    # --- the same texts on an on-demand (STANDARD) attempt: no reclaim is possible --------
    Ending_("standard-stockout-after-running", "training-service", "FAILED", 8, STOCKOUT, spot=False),
    Ending_("standard-empty-error-after-settling", "unknown", "FAILED", spot=False),
    # --- the trainer's own exit codes in Vertex's message --------------------------------
    Ending_(
        "trainer-config-error",
        "docs/contracts.md",
        "FAILED",
        3,
        _user(64, "workerpool0-0"),
        expected=Ending.USER_ERROR,
    ),
    Ending_(
        "trainer-preempted-code",
        "docs/contracts.md",
        "FAILED",
        3,
        _user(75, "workerpool0-0"),
        spot=False,
        expected=Ending.PREEMPTED,
        counts_as_failure=False,
    ),
    Ending_("trainer-rendezvous-timeout", "docs/contracts.md", "FAILED", 3, _user(69, "workerpool1-0")),
    Ending_(
        "trainer-no-usable-checkpoint",
        "docs/contracts.md",
        "FAILED",
        3,
        _user(65, "workerpool0-0"),
        expected=Ending.NO_USABLE_CHECKPOINT,
        counts_as_failure=False,
    ),
)
