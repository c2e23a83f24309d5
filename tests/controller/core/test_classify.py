"""The classifier against the corpus of documented (and undocumented) Vertex endings, plus one
case per row of the rule table."""

import pytest

from controller.core.classify import RULES, Ending, Observation, ReplicaExit, classify, needs_vertex_error
from tests.support.vertex_endings import CORPUS, STOCKOUT, USER_EXCEPTION

EXIT_MSG = USER_EXCEPTION.replace("{replica}", "workerpool1-1").replace("{code}", "{}")


def observation(entry) -> Observation:
    return Observation(
        entry.vertex_state, entry.code, entry.message, entry.exit_reason, spot=entry.spot, ran=entry.ran
    )


@pytest.mark.parametrize("entry", CORPUS, ids=[e.name for e in CORPUS])
def test_every_documented_and_plausible_ending_is_classified_right(entry):
    assert classify(observation(entry)).ending is entry.expected


@pytest.mark.parametrize("entry", CORPUS, ids=[e.name for e in CORPUS])
def test_no_ending_depends_on_the_word_preempt(entry):
    """Whatever the text says, replacing "preempt" by something neutral changes nothing."""
    neutral = observation(entry)
    neutral = Observation(
        neutral.vertex_state,
        neutral.error_code,
        neutral.error_message.replace("preempted", "stopped").replace(
            "Spot VM was reclaimed", "VM went away"
        ),
        neutral.exit_reason,
        spot=neutral.spot,
        ran=neutral.ran,
    )
    assert classify(neutral).ending is entry.expected


CASES = {
    "succeeded": Observation("SUCCEEDED"),
    "cancelled": Observation("CANCELLED", 1, "CANCELED"),
    "final-checkpoint-committed": Observation(
        "FAILED",
        10,
        "Job was terminated by the system.",
        exit_reason="completed",
        committed_step=100,
        final_step=100,
    ),
    "config-error": Observation("FAILED", 3, "The replica failed.", exit_reason="config_error"),
    "no-usable-checkpoint": Observation("FAILED", 3, EXIT_MSG.format(65), exit_reason="no_usable_checkpoint"),
    "out-of-memory": Observation(
        "FAILED", 3, "The replica workerpool1-0 ran out of memory and exited with a non-zero status of 137."
    ),
    "replica-exit-error": Observation(
        "FAILED", 3, EXIT_MSG.format(1), exit_reason="preempted", spot=True, ran=True
    ),
    "replica-record-error": Observation(
        "FAILED",
        spot=True,
        ran=True,
        replica_exits=(ReplicaExit("workerpool1-0", "runtime_error", 1, step=25, detail="ValueError: boom"),),
    ),
    "timeout": Observation("FAILED", 4, "Job exceeded its timeout of 60s.", exit_reason="preempted"),
    "exit-record-preempted": Observation("FAILED", 3, "", exit_reason="preempted"),
    "preempted-exit-status": Observation("FAILED", 3, EXIT_MSG.format(75)),
    "spot-reclaim": Observation("FAILED", 8, STOCKOUT, spot=True, ran=True),
    "capacity-before-start": Observation("FAILED", 8, STOCKOUT, spot=True, ran=False),
    "rendezvous-timeout": Observation("FAILED", 3, EXIT_MSG.format(69)),
    "capacity": Observation("FAILED", 8, STOCKOUT, spot=False, ran=True),
    "internal": Observation("FAILED", 13, "Internal error occurred for the current attempt.", ran=True),
    "replica-error": Observation("FAILED", 3, "The replica failed.", exit_reason="runtime_error"),
    "unknown-failure": Observation("FAILED", 2, "something nobody has seen before"),
}


def test_every_rule_has_a_case():
    assert [rule.name for rule in RULES] == list(CASES)


@pytest.mark.parametrize("rule_name", list(CASES))
def test_rule_matches_its_case(rule_name):
    assert classify(CASES[rule_name]).rule == rule_name


def test_config_error_is_permanent_and_other_user_errors_are_not():
    assert classify(CASES["config-error"]).permanent
    assert not classify(CASES["replica-exit-error"]).permanent


def test_expired_job_is_a_timeout():
    assert classify(Observation("EXPIRED")).ending is Ending.TIMEOUT


@pytest.mark.parametrize(
    "obs, wait",
    [
        (Observation("FAILED", ran=True), True),  # not Spot, nothing known yet: bounded wait
        (Observation("FAILED", exit_reason="preempted", ran=True), True),  # may be a teardown victim
        (Observation("FAILED", spot=True, ran=True), False),  # a started Spot job: decided at once
        (Observation("FAILED"), False),  # ended before it ran, the trainer silent: capacity at once
        (Observation("FAILED", exit_reason="runtime_error"), False),  # the trainer says what happened
        (Observation("FAILED", exit_reason="config_error"), False),
        (Observation("FAILED", 8, STOCKOUT), False),
        (Observation("SUCCEEDED"), False),
        (Observation("CANCELLED"), False),
    ],
)
def test_a_failed_job_without_its_error_waits_unless_the_trainer_was_decisive(obs, wait):
    assert needs_vertex_error(obs) is wait


def test_the_cores_rpc_codes_are_google_rpc_codes():
    # The core is stdlib only, so it names the google.rpc codes it reads; they must be the real ones.
    from google.rpc import code_pb2

    from controller.core import classify as c

    named = {name: value for name, value in vars(c).items() if name.startswith("CODE_")}
    assert named and all(
        getattr(code_pb2, name.removeprefix("CODE_")) == value for name, value in named.items()
    )


def test_a_trainer_that_found_no_usable_checkpoint_is_neither_a_user_error_nor_silent():
    verdict = classify(Observation("FAILED", 3, EXIT_MSG.format(65), spot=True, ran=True))
    assert verdict.ending is Ending.NO_USABLE_CHECKPOINT and not verdict.permanent
