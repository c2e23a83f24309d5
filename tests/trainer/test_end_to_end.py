"""Multi-process runs of `python -m trainer` on CPU (gloo): training, exact resume, failures."""

import random

import pytest

from tests.support.gang import TINY
from trainer import layout, storage

pytestmark = pytest.mark.slow


def final(gang) -> dict:
    return gang.chief.wait_for("training completed")


def run_to_completion(start_gang, args, **kw) -> dict:
    gang = start_gang(args, **kw)
    codes = gang.wait()
    assert codes == [0] * len(gang.nodes), gang.chief.output()
    return final(gang)


def preempt_at(start_gang, args, step: int, root: str, attempt: int, **kw) -> None:
    """Run an attempt until `step`, SIGTERM every launcher there, check the contract outcome."""
    gang = start_gang(
        args, attempt=attempt, checkpoint_uri=root, env={"RELAUNCH_TEST_HOLD_AT_STEP": str(step)}, **kw
    )
    gang.chief.wait_for("test hook: holding for SIGTERM", step=step)
    gang.terminate()
    assert gang.wait() == [layout.EXIT_PREEMPTED_SAVED] * len(gang.nodes), gang.chief.output()
    exit_record = storage.read_exit_record(root, attempt)
    assert (exit_record.reason, exit_record.step, exit_record.checkpoint_saved) == ("preempted", step, True)
    assert exit_record.last_committed_step == step and exit_record.signal == "SIGTERM"
    assert storage.latest_committed(root).step == step
    # Every replica (node) left its own final record, saying it was signalled itself.
    replicas = storage.read_replica_exits(root, attempt)
    assert sorted(r.replica for r in replicas) == [f"node-{i}" for i in range(len(gang.nodes))]
    assert all((r.reason, r.exit_code, r.final) == ("preempted", 75, True) for r in replicas)


def check_exact_resume(start_gang, tmp_path, args, steps, **kw):
    baseline = run_to_completion(start_gang, args, checkpoint_uri=f"file://{tmp_path}/baseline", **kw)

    rng = random.Random()
    first = rng.randrange(2, steps // 2)
    second = rng.randrange(first + 1, steps - 1)
    print(f"preempting at steps {first} and {second}")
    root = f"file://{tmp_path}/preempted"
    preempt_at(start_gang, args, first, root, attempt=1, **kw)
    preempt_at(start_gang, args, second, root, attempt=2, **kw)
    gang = start_gang(args, attempt=3, checkpoint_uri=root, **kw)
    assert gang.wait() == [0] * len(gang.nodes), gang.chief.output()
    resumed = gang.chief.wait_for("resumed")
    assert (resumed["from_step"], resumed["steps_recomputed"]) == (second, 0)

    result = final(gang)
    assert result["final_loss"] == baseline["final_loss"]
    assert result["params_sha256"] == baseline["params_sha256"]
    done = storage.read_exit_record(root, 3)
    assert (done.reason, done.exit_code, done.step, done.checkpoint_saved) == ("completed", 0, steps, True)


def test_ddp_two_nodes_resume_after_two_preemptions_is_bitwise_exact(start_gang, tmp_path):
    steps = 14
    args = ["--engine", "ddp", "--steps", str(steps), "--checkpoint-every-steps", "4", *TINY]
    check_exact_resume(start_gang, tmp_path, args, steps, nodes=2, nproc=2)


def test_deepspeed_zero2_resume_after_two_preemptions_is_bitwise_exact(start_gang, tmp_path):
    steps = 12
    args = [
        "--engine",
        "deepspeed",
        "--zero-stage",
        "2",
        "--steps",
        str(steps),
        "--checkpoint-every-steps",
        "4",
        "--grad-accum",
        "2",
        *TINY,
    ]
    check_exact_resume(start_gang, tmp_path, args, steps, nodes=1, nproc=2)
