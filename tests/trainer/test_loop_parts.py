"""Fast checks of the pieces the loop relies on: sampler position, exit-code merging, grace budget."""

import pytest

from trainer import layout
from trainer.config import ConfigError, parse_config
from trainer.data import ResumableSampler
from trainer.launch import (
    HARD_KILL_MARGIN_SECONDS,
    combine_exit_codes,
    failed_worker,
    hard_kill_after,
    replica_reason,
    signal_name,
    worker_statuses,
)
from trainer.node_status import WorkerOutcome
from trainer.preemption import PreemptionFlag, emergency_save_fits
from trainer.worker import looks_like_peer_loss


def test_sampler_resumed_from_its_state_continues_with_exactly_the_next_batches():
    def stream(sampler, n):
        return [sampler.next_indices() for _ in range(n)]

    uninterrupted = stream(ResumableSampler(50, 4, rank=1, world_size=3, seed=7), 12)  # crosses epochs
    first = ResumableSampler(50, 4, rank=1, world_size=3, seed=7)
    head = stream(first, 5)
    second = ResumableSampler(50, 4, rank=1, world_size=3, seed=7)
    second.load_state_dict(first.state_dict())
    assert head + stream(second, 7) == uninterrupted


def test_sampler_ranks_split_each_global_batch_without_overlap():
    ranks = [ResumableSampler(40, 5, rank=r, world_size=4, seed=1) for r in range(4)]
    for _ in range(4):  # two epochs of two global batches each
        batch = [i for s in ranks for i in s.next_indices()]
        assert len(batch) == len(set(batch)) == 20


def _outcome(code):
    return WorkerOutcome(0, code, False)


@pytest.mark.parametrize(
    "codes,signalled,expected",
    [
        ([0, 0], False, 0),
        ([75, 75], True, 75),
        ([75, None], True, 76),  # a worker SIGKILLed before reporting: not everything was saved
        ([75, 70], True, 70),
        ([64, 70], False, 64),
        ([0, None], False, 70),
        ([0, 1], False, 70),  # unknown codes are runtime errors
    ],
)
def test_node_exit_code_is_the_most_telling_worker_outcome(codes, signalled, expected):
    outcomes = [None if c is None else _outcome(c) for c in codes]
    assert combine_exit_codes(outcomes, signalled) == expected


def test_emergency_save_is_attempted_only_when_it_fits_the_grace_budget():
    assert emergency_save_fits(seconds_left=20, estimated_save_seconds=None)  # unknown cost: try
    assert emergency_save_fits(seconds_left=20, estimated_save_seconds=10)
    assert not emergency_save_fits(seconds_left=20, estimated_save_seconds=15)
    assert not emergency_save_fits(seconds_left=0, estimated_save_seconds=None)
    assert layout.EXIT_PREEMPTED_UNSAVED == 76


def test_node_exit_code_puts_no_usable_checkpoint_right_after_config_errors():
    assert combine_exit_codes([_outcome(65), _outcome(70)], False) == 65
    assert combine_exit_codes([_outcome(64), _outcome(65)], False) == 64


@pytest.mark.parametrize(
    "code,outcomes,signalled,reason",
    [
        (75, [WorkerOutcome(0, 75, True, "preempted", True)], True, "preempted"),
        (75, [WorkerOutcome(0, 75, True, "stopped_by_peer", False)], False, "stopped_by_peer"),
        (70, [WorkerOutcome(0, 70, False, "stopped_by_peer")], False, "stopped_by_peer"),
        (70, [WorkerOutcome(0, 70, False, "runtime_error"), None], False, "runtime_error"),
        (70, [None], False, "runtime_error"),  # a worker killed before it could say
        (65, [WorkerOutcome(0, 65, False, "no_usable_checkpoint")], False, "no_usable_checkpoint"),
        (0, [WorkerOutcome(0, 0, True, "completed")], False, "completed"),
    ],
)
def test_replica_reason_tells_its_own_ending_from_its_peers(code, outcomes, signalled, reason):
    assert replica_reason(code, outcomes, signalled) == reason


def test_hard_kill_comes_a_fixed_margin_after_the_grace_budget():
    assert hard_kill_after(10) == 15 and hard_kill_after(2.5) == 8
    assert HARD_KILL_MARGIN_SECONDS == 5


def test_checkpoint_interval_defaults_to_the_controllers_environment_variable():
    argv = ["--steps", "5"]
    assert parse_config(argv, env={}).checkpoint_every_seconds == 0
    assert parse_config(argv, env={layout.CHECKPOINT_INTERVAL_ENV: "90"}).checkpoint_every_seconds == 90
    flag = ["--checkpoint-every-seconds", "0"]
    assert parse_config(argv + flag, env={layout.CHECKPOINT_INTERVAL_ENV: "90"}).checkpoint_every_seconds == 0
    with pytest.raises(ConfigError):
        parse_config(argv, env={layout.CHECKPOINT_INTERVAL_ENV: "soon"})
    assert parse_config(argv, env={}).grace_seconds <= 10  # fits a 15 s platform window with the margin


def test_grace_clock_adopts_the_earliest_signal_of_the_gang():
    flag = PreemptionFlag()
    assert flag.seconds_since_signal() == -1
    assert 9.9 < flag.seconds_left(10) <= 10  # no signal anywhere: the whole budget
    flag.adopt_gang_elapsed(7.0)  # another rank was signalled 7 s ago
    assert flag.seconds_left(10) <= 3.0


def test_peer_loss_errors_are_told_apart_from_own_errors():
    assert looks_like_peer_loss(RuntimeError("[../gloo/transport/tcp/pair.cc:598] Connection closed by peer"))
    assert not looks_like_peer_loss(RuntimeError("synthetic failure in the model"))


def test_the_launcher_tells_an_oom_kill_from_other_signals(tmp_path):
    from trainer.launch import oom_killed, oom_kills
    from trainer.node_status import WorkerOutcome

    events = tmp_path / "memory.events"
    events.write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    assert oom_kills(str(events)) == 1
    assert oom_kills(str(tmp_path / "absent")) is None  # no cgroup v2: no OOM inferred
    killed = [WorkerOutcome(0, 0, False), None]  # one worker died without reporting
    assert oom_killed(1, 2, killed)
    assert not oom_killed(2, 2, killed)  # the counter did not grow: some other SIGKILL
    assert not oom_killed(None, None, killed)
    assert not oom_killed(1, 2, [WorkerOutcome(0, 70, False, "runtime_error")])  # failed on its own


def test_a_worker_records_its_exception_type_and_last_line():
    from trainer.worker import exception_line

    assert exception_line(ValueError("first\n\nthe last line\n")) == "ValueError: the last line"
    assert exception_line(KeyError()) == "KeyError"


@pytest.mark.parametrize(
    "outcomes,statuses,failed",
    [
        ([WorkerOutcome(0, 70, True, "runtime_error"), None], {1: 1}, 1),  # died without a word: the cause
        (
            [WorkerOutcome(0, 70, True, "runtime_error"), WorkerOutcome(1, 70, False, "stopped_by_peer")],
            {},
            0,
        ),
        ([WorkerOutcome(0, 75, True, "preempted", True)], {}, None),  # its own SIGTERM: no worker failed
        ([WorkerOutcome(0, 0, True, "completed")], {}, None),
        ([None], {}, None),  # the agent was signalled and forgot the status
    ],
)
def test_the_failed_worker_is_the_one_that_ended_on_its_own(outcomes, statuses, failed):
    assert failed_worker(outcomes, statuses) == failed


def test_a_worker_s_own_status_prefers_what_its_process_ended_with_and_names_its_signal():
    outcomes = [WorkerOutcome(0, 70, True, "runtime_error"), None, None]
    assert worker_statuses(outcomes, {1: -9}) == [70, -9, None]
    assert (signal_name(-9), signal_name(-15), signal_name(1), signal_name(None)) == (
        "SIGKILL",
        "SIGTERM",
        None,
        None,
    )
