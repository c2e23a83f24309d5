"""Classify how a Vertex AI attempt ended.

Google documents few of the signals a reclaim leaves (devstack/README.md lists the
pages): a reclaimed Spot job "fails with a STOCKOUT error" after up to six in-place
restarts, but neither its `error.code` nor its message is documented, nothing says the word
"preempt" appears, and `error` is set only about a minute after the job ends. So no rule below
depends on undocumented wording; each one reads evidence whose meaning is documented or is our
own (the trainer's exit record, the trainer's exit codes):

  1. what Vertex says happened to the job as a whole (succeeded, cancelled);
  2. a replica that Vertex says exited on its own with an error status: a user error, even when
     the chief's exit record says `preempted` (the chief got SIGTERM only because Vertex tore the
     gang down after that replica failed);
  3. `scheduling.timeout`: a timeout, never a preemption (the teardown SIGTERMs the chief too);
  4. the trainer's `preempted` record or exit code;
  5. a Spot attempt that had started and then ended FAILED with a capacity, stockout,
     unavailable or internal code or text, or with no error at all, or with a replica killed by
     SIGTERM/SIGKILL: a reclaim, whatever the exact wording. A wrong guess here costs no failure
     budget, and the crash-loop rule (no checkpoint progress) still stops a job that keeps
     ending this way;
  6. capacity endings before the attempt ran: waiting for capacity, no budget spent;
  7. everything else by code.

The rules are checked in order and the first match wins (like a JobSet failure policy). Every rule
is a row in `RULES`; the corpus in tests/support/vertex_endings.py drives a test per row.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

# The trainer's exit codes and reasons have one definition, in the trainer's layout contract (a
# standard-library-only module; the only import the core makes outside itself).
from trainer.layout import (
    EXIT_CONFIG,
    EXIT_NO_USABLE_CHECKPOINT,
    EXIT_PREEMPTED_SAVED,
    EXIT_PREEMPTED_UNSAVED,
    EXIT_RENDEZVOUS_TIMEOUT,
    REASON_COMPLETED,
    REASON_CONFIG_ERROR,
    REASON_NO_USABLE_CHECKPOINT,
    REASON_PREEMPTED,
    REASON_RENDEZVOUS_TIMEOUT,
    REASON_RUNTIME_ERROR,
    REASON_STOPPED_BY_PEER,
    SIGNAL_OOM_KILL,
)


class Ending(str, Enum):
    SUCCEEDED = "succeeded"
    PREEMPTED = "preempted"
    CAPACITY = "capacity"  # no capacity or quota before the attempt ran: waiting helps, no budget
    INFRASTRUCTURE = "infrastructure"
    USER_ERROR = "user_error"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"
    # The trainer found no checkpoint it could load where one was expected: data loss, which the
    # restart policy's `onNoUsableCheckpoint` answers (restart from scratch, or fail).
    NO_USABLE_CHECKPOINT = "no_usable_checkpoint"


# google.rpc.Code values (google/rpc/code.proto). The core is stdlib only, so they are named here;
# tests/controller/core/test_classify.py checks each against google.rpc.code_pb2.
CODE_CANCELLED = 1
CODE_INVALID_ARGUMENT = 3
CODE_DEADLINE_EXCEEDED = 4
CODE_NOT_FOUND = 5
CODE_PERMISSION_DENIED = 7
CODE_RESOURCE_EXHAUSTED = 8
CODE_INTERNAL = 13
CODE_UNAVAILABLE = 14
CODE_UNAUTHENTICATED = 16

# Trainer exit codes (docs/contracts.md) that Vertex quotes in its "non-zero status" message.
_PREEMPTED_EXIT_CODES = frozenset({EXIT_PREEMPTED_SAVED, EXIT_PREEMPTED_UNSAVED})
# A replica killed by a signal reads as 128 + N: SIGTERM (15) or SIGKILL (9) from a teardown.
_KILLED_EXIT_CODES = frozenset({128 + 15, 128 + 9})
# Statuses that say "this replica was stopped", not "this replica failed on its own".
_STOPPED_EXIT_CODES = _PREEMPTED_EXIT_CODES | _KILLED_EXIT_CODES

# Exit-record reasons the trainer writes that decide an ending without waiting for Vertex's error.
DECISIVE_EXIT_REASONS = frozenset(
    {
        REASON_COMPLETED,
        REASON_CONFIG_ERROR,
        REASON_RUNTIME_ERROR,
        REASON_RENDEZVOUS_TIMEOUT,
        REASON_NO_USABLE_CHECKPOINT,
    }
)


@dataclass(frozen=True)
class ReplicaExit:
    """One replica's own account of how it stopped (`trainer.layout.ReplicaExit`, as facts)."""

    replica: str  # workerpool{i}-{j}
    reason: str  # an exit-record reason, e.g. "preempted", or "stopped_by_peer"
    exit_code: int | None = None
    signal: str | None = None
    step: int | None = None
    detail: str | None = None  # bounded, control characters escaped by the adapter
    # The failed worker's own exit status and signal (exit_code is the launcher's contract code).
    worker_exit_code: int | None = None
    worker_signal: str | None = None

    @property
    def failed_on_its_own(self) -> bool:
        """The replica's own program failed (not stopped by a signal or by its peers)."""
        return self.reason not in _NOT_OWN_FAILURE or self.out_of_memory

    @property
    def out_of_memory(self) -> bool:
        return self.signal == SIGNAL_OOM_KILL


_NOT_OWN_FAILURE = frozenset({REASON_PREEMPTED, REASON_STOPPED_BY_PEER, REASON_COMPLETED})


@dataclass(frozen=True)
class Observation:
    """Everything known about one finished attempt."""

    vertex_state: str  # JobState name without prefix: SUCCEEDED, FAILED, CANCELLED, EXPIRED, ...
    error_code: int = 0
    error_message: str = ""
    exit_reason: str | None = None  # from the chief's exit record, when one was found
    spot: bool = False  # the attempt ran on Spot VMs (only those are reclaimed)
    ran: bool = False  # the attempt reached RUNNING (Vertex set start_time)
    replica_exits: tuple[ReplicaExit, ...] = ()  # every replica's own record that was found
    # The newest committed step (checkpoint root or the chief's record) and the step training
    # ends at (the chief's record), when known.
    committed_step: int | None = None
    final_step: int | None = None

    @property
    def final_committed(self) -> bool:
        return (
            self.final_step is not None
            and self.committed_step is not None
            and (self.committed_step >= self.final_step)
        )

    def own_failure(self) -> ReplicaExit | None:
        """The first replica whose own record says its program failed (OOM first)."""
        failed = [r for r in self.replica_exits if r.failed_on_its_own]
        failed.sort(key=lambda r: (not r.out_of_memory, r.replica))
        return failed[0] if failed else None


@dataclass(frozen=True)
class Classification:
    ending: Ending
    rule: str  # name of the rule that matched, for logs and the attempt history
    permanent: bool = False  # retrying cannot help (e.g. a configuration error)
    inferred: bool = False  # concluded without the trainer's word: still subject to crash-loop checks


@dataclass(frozen=True)
class Rule:
    name: str
    matches: Callable[[Observation], bool]
    ending: Ending
    permanent: bool = False
    why: str = ""
    inferred: bool = False


_NONZERO_STATUS = re.compile(r"non-zero status of (\d+)")
_OUT_OF_MEMORY = re.compile(r"ran out of memory", re.IGNORECASE)
_TIMEOUT_TEXT = re.compile(r"timeout|timed out", re.IGNORECASE)
_CAPACITY_TEXT = re.compile(r"insufficient|stockout|quota|capacity|unavailable", re.IGNORECASE)
_RECLAIM_TEXT = re.compile(
    r"insufficient|stockout|capacity|unavailable|internal error|preempt|reclaim|spot", re.IGNORECASE
)
_INTERNAL_TEXT = re.compile(r"internal error", re.IGNORECASE)
_CAPACITY_CODES = frozenset({CODE_RESOURCE_EXHAUSTED, CODE_UNAVAILABLE})
# Codes that say the job's access or identity was wrong: never what a reclaim leaves. (Vertex
# reports a replica's non-zero exit as 3 INVALID_ARGUMENT, so 3 is judged by its exit status.)
_REQUEST_CODES = frozenset({CODE_NOT_FOUND, CODE_PERMISSION_DENIED, CODE_UNAUTHENTICATED})


def _exit_status(obs: Observation) -> int | None:
    found = _NONZERO_STATUS.search(obs.error_message)
    return int(found.group(1)) if found else None


def _replica_failed_on_its_own(obs: Observation) -> bool:
    """Vertex names a replica whose exit status is an error of its own, not a teardown's."""
    status = _exit_status(obs)
    if status is None or status in (EXIT_CONFIG, EXIT_RENDEZVOUS_TIMEOUT, EXIT_NO_USABLE_CHECKPOINT):
        return False
    return status not in _STOPPED_EXIT_CODES or bool(_OUT_OF_MEMORY.search(obs.error_message))


def _has_no_error(obs: Observation) -> bool:
    return obs.error_code == 0 and not obs.error_message.strip()


def _spot_reclaim(obs: Observation) -> bool:
    """Any code and any wording: Google documents neither for a Spot reclaim, so what decides is
    that the attempt was Spot, had started, and no evidence says its own program failed (the rows
    before this one took Vertex's named replica, out of memory, timeouts and the trainer's own
    failure records)."""
    if not (obs.spot and obs.ran and obs.vertex_state == "FAILED"):
        return False
    if obs.exit_reason not in (None, REASON_PREEMPTED, REASON_STOPPED_BY_PEER) and not _peer_vanished(obs):
        return False  # the trainer said how it ended
    status = _exit_status(obs)
    if status is not None and status not in _STOPPED_EXIT_CODES:
        return False  # Vertex quotes a trainer exit code of its own (rendezvous timeout, ...)
    return obs.error_code not in _REQUEST_CODES


def _peer_vanished(obs: Observation) -> bool:
    """The chief's `runtime_error` was the gang breaking, not its code: the replicas that left a
    record say they were stopped by a peer, none failed on its own (a reclaimed node, gone at
    once, leaves none)."""
    return (
        obs.exit_reason == REASON_RUNTIME_ERROR
        and obs.own_failure() is None
        and any(r.reason == REASON_STOPPED_BY_PEER for r in obs.replica_exits)
    )


def _out_of_memory(obs: Observation) -> bool:
    if bool(_OUT_OF_MEMORY.search(obs.error_message)):
        return True
    failed = obs.own_failure()
    return failed is not None and failed.out_of_memory


def _replica_record_error(obs: Observation) -> bool:
    return obs.own_failure() is not None


def _capacity_before_start(obs: Observation) -> bool:
    """Vertex ended it before it ran: with a capacity code or text, or (its error not set yet)
    with no word from the trainer, whose program never started."""
    if obs.ran or obs.vertex_state != "FAILED":
        return False
    if obs.error_code in _CAPACITY_CODES or bool(_CAPACITY_TEXT.search(obs.error_message)):
        return True
    return _has_no_error(obs) and obs.exit_reason is None and not obs.replica_exits


RULES: tuple[Rule, ...] = (
    Rule(
        "succeeded",
        lambda o: o.vertex_state == "SUCCEEDED",
        Ending.SUCCEEDED,
        why="Vertex says the primary replica exited 0.",
    ),
    Rule(
        "cancelled",
        lambda o: o.vertex_state in ("CANCELLED", "CANCELLING"),
        Ending.CANCELLED,
        why="Someone cancelled the job (Relaunch or a person).",
    ),
    Rule(
        "final-checkpoint-committed",
        lambda o: o.vertex_state == "FAILED" and o.final_committed,
        Ending.SUCCEEDED,
        why="The checkpoint of the step training ends at is committed (the chief's record names "
        "that step; the checkpoint root or the record shows it committed): the work is done, "
        "whatever ended the CustomJob afterwards (a reclaim as training finished).",
    ),
    Rule(
        "config-error",
        lambda o: o.exit_reason == REASON_CONFIG_ERROR or _exit_status(o) == EXIT_CONFIG,
        Ending.USER_ERROR,
        permanent=True,
        why="The trainer rejected its configuration: every retry would fail the same way.",
    ),
    Rule(
        "no-usable-checkpoint",
        lambda o: (
            o.exit_reason == REASON_NO_USABLE_CHECKPOINT or _exit_status(o) == EXIT_NO_USABLE_CHECKPOINT
        ),
        Ending.NO_USABLE_CHECKPOINT,
        why="The trainer was told to resume but no checkpoint under the job's root could be loaded: "
        "not the user's error, and never silent; the restart policy says what follows.",
    ),
    Rule(
        "out-of-memory",
        _out_of_memory,
        Ending.USER_ERROR,
        why="Vertex's documented text ('ran out of memory') or the trainer's launcher saw the "
        "kernel's OOM killer end a worker: a failure of the program's size, never a preemption.",
    ),
    Rule(
        "replica-exit-error",
        _replica_failed_on_its_own,
        Ending.USER_ERROR,
        why="Vertex names a replica that exited with an error status of its own; it beats the "
        "chief's SIGTERM record, which the gang teardown caused.",
    ),
    Rule(
        "replica-record-error",
        _replica_record_error,
        Ending.USER_ERROR,
        why="A replica's own exit record says its program failed (not a signal, not its peers).",
    ),
    Rule(
        "timeout",
        lambda o: (
            o.error_code == CODE_DEADLINE_EXCEEDED
            or bool(_TIMEOUT_TEXT.search(o.error_message))
            or o.vertex_state == "EXPIRED"
        ),
        Ending.TIMEOUT,
        why="The job ran past scheduling.timeout; the teardown's SIGTERM is no preemption.",
    ),
    Rule(
        "exit-record-preempted",
        lambda o: o.exit_reason == REASON_PREEMPTED,
        Ending.PREEMPTED,
        why="The trainer recorded that it stopped on SIGTERM and Vertex names no failed replica.",
    ),
    Rule(
        "preempted-exit-status",
        lambda o: _exit_status(o) in _PREEMPTED_EXIT_CODES,
        Ending.PREEMPTED,
        why="A replica exited with the trainer's 'preempted' code even if its record was lost.",
    ),
    Rule(
        "spot-reclaim",
        _spot_reclaim,
        Ending.PREEMPTED,
        inferred=True,
        why="A started Spot attempt ended FAILED, with any code but a request error (8, 10, 13, "
        "14 or none yet) and any wording, and no evidence that its own program failed: Google "
        "documents neither the code nor the text of a reclaim.",
    ),
    Rule(
        "capacity-before-start",
        _capacity_before_start,
        Ending.CAPACITY,
        why="No capacity or quota before the attempt ran (or an ending before start with no error "
        "yet and no word from the trainer): back off, spend no failure budget.",
    ),
    Rule(
        "rendezvous-timeout",
        lambda o: o.exit_reason == REASON_RENDEZVOUS_TIMEOUT or _exit_status(o) == EXIT_RENDEZVOUS_TIMEOUT,
        Ending.INFRASTRUCTURE,
        why="The gang never assembled: a node did not come up.",
    ),
    Rule(
        "capacity",
        lambda o: o.error_code == CODE_RESOURCE_EXHAUSTED or bool(_CAPACITY_TEXT.search(o.error_message)),
        Ending.INFRASTRUCTURE,
        why="Capacity lost while a non-Spot attempt ran.",
    ),
    Rule(
        "internal",
        lambda o: (
            o.error_code in (CODE_INTERNAL, CODE_UNAVAILABLE) or bool(_INTERNAL_TEXT.search(o.error_message))
        ),
        Ending.INFRASTRUCTURE,
        why="Vertex reported an internal or availability error.",
    ),
    Rule(
        "replica-error",
        lambda o: (
            o.exit_reason == REASON_RUNTIME_ERROR
            or _exit_status(o) is not None
            or o.error_code == CODE_INVALID_ARGUMENT
        ),
        Ending.USER_ERROR,
        why="A replica of the user's program exited non-zero.",
    ),
    Rule(
        "unknown-failure",
        lambda o: True,
        Ending.INFRASTRUCTURE,
        why="Anything else: assume infrastructure, which still spends the failure budget.",
    ),
)


def classify(obs: Observation) -> Classification:
    for rule in RULES:
        if rule.matches(obs):
            return Classification(rule.ending, rule.name, rule.permanent, rule.inferred)
    raise AssertionError("the last rule matches everything")  # pragma: no cover


def needs_vertex_error(obs: Observation) -> bool:
    """A FAILED ending the evidence cannot decide yet, so Vertex's `error` (set about a minute
    after the end) is waited for, up to a bound: an attempt that ran, not on Spot, with no error,
    and neither the chief nor any replica recorded a decisive reason. Every other ending is
    decided at once; Vertex's error, when it comes, confirms or corrects it (`provisional`)."""
    if obs.vertex_state != "FAILED" or not _has_no_error(obs):
        return False
    if obs.exit_reason in DECISIVE_EXIT_REASONS or obs.own_failure() is not None or obs.final_committed:
        return False
    return obs.ran and not obs.spot


def provisional(obs: Observation) -> bool:
    """Decided before Vertex said why the job failed: its error, read later, may correct it."""
    return obs.vertex_state == "FAILED" and _has_no_error(obs)
