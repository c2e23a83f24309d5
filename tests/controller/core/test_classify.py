"""One case per row of the classifier table, plus the ordering that matters."""

import pytest

from controller.core.classify import RULES, Ending, Observation, classify

PREEMPT_MSG = (
    "The replica workerpool0-0 was preempted: the Spot VM was reclaimed. Termination reason: Preempted."
)
EXIT_MSG = "The replica workerpool1-1 exited with a non-zero status of {}. Termination reason: Error."

CASES = {
    "succeeded": Observation("SUCCEEDED"),
    "cancelled": Observation("CANCELLED", 1, "CANCELED"),
    "exit-record-preempted": Observation("FAILED", 3, EXIT_MSG.format(1), exit_reason="preempted"),
    "preempted-exit-status": Observation("FAILED", 3, EXIT_MSG.format(75)),
    "preemption-message": Observation("FAILED", 14, PREEMPT_MSG),
    "exit-record-config-error": Observation("FAILED", 3, EXIT_MSG.format(64)),
    "timeout": Observation("FAILED", 4, "Job exceeded its timeout of 60s."),
    "capacity": Observation("FAILED", 8, "Resources are insufficient in region: us-central1."),
    "internal": Observation("FAILED", 13, "Internal error occurred for the current attempt."),
    "rendezvous-timeout": Observation("FAILED", 3, EXIT_MSG.format(69)),
    "replica-error": Observation("FAILED", 3, EXIT_MSG.format(1)),
    "unknown-failure": Observation("FAILED", 2, "something nobody has seen before"),
}

EXPECTED = {
    "succeeded": Ending.SUCCEEDED,
    "cancelled": Ending.CANCELLED,
    "exit-record-preempted": Ending.PREEMPTED,
    "preempted-exit-status": Ending.PREEMPTED,
    "preemption-message": Ending.PREEMPTED,
    "exit-record-config-error": Ending.USER_ERROR,
    "timeout": Ending.TIMEOUT,
    "capacity": Ending.INFRASTRUCTURE,
    "internal": Ending.INFRASTRUCTURE,
    "rendezvous-timeout": Ending.INFRASTRUCTURE,
    "replica-error": Ending.USER_ERROR,
    "unknown-failure": Ending.INFRASTRUCTURE,
}


def test_every_rule_has_a_case():
    assert [rule.name for rule in RULES] == list(CASES)


@pytest.mark.parametrize("rule_name", list(CASES))
def test_rule_matches_its_case(rule_name):
    verdict = classify(CASES[rule_name])
    assert (verdict.rule, verdict.ending) == (rule_name, EXPECTED[rule_name])


def test_config_error_is_permanent_and_other_user_errors_are_not():
    assert classify(CASES["exit-record-config-error"]).permanent
    assert not classify(CASES["replica-error"]).permanent


def test_exit_record_beats_a_generic_error_message():
    # The replica died with a plain error status, but the trainer wrote that SIGTERM stopped it.
    obs = Observation("FAILED", 13, "Internal error occurred.", exit_reason="preempted")
    assert classify(obs).ending is Ending.PREEMPTED


def test_config_error_record_without_status_in_message():
    obs = Observation("FAILED", 3, "The replica failed.", exit_reason="config_error")
    verdict = classify(obs)
    assert verdict.ending is Ending.USER_ERROR and verdict.permanent


def test_expired_job_is_a_timeout():
    assert classify(Observation("EXPIRED")).ending is Ending.TIMEOUT
