"""Shrink to fit on devstack, end to end (issue 16): a 4-replica Spot job meets a stockout that
leaves room for 2, runs on 2 rather than wait, grows back to 4, and ends close to a run that was
never shrunk.

    PYTHONPATH=. .venv/bin/python bench/shrink_to_fit.py [--steps 150] [--keep] [--out bench/out]

What it runs: devstack (Pub/Sub, GCS, Vertex stand-ins) and the controller as a real process
(`relaunch controller`, via `controller.cli.demo.Demo`), and one job of the real trainer (the
built-in tiny GPT on CPU, DDP) in two worker pools: the chief (1 replica) and 3 workers with
`minReplicaCount: 1`, so 4 replicas at full size and 2 when shrunk, with `--global-batch-size 16
--batch-size 4` (1 micro-step per optimizer step on 4 ranks, 2 on 2) and
`elastic: {shrinkAfter: 20s, growBack: everyAttempt}`.

The story, driven from the chief's own log (steps, not seconds, so that it completes however
loaded the machine is):
1. Attempt 1 runs at 4 replicas. Once it has trained past step --reclaim-at, devstack's capacity
   for its machine type is cut to 2 replicas (`DevStack.capacity`, queue mode: a gang that does
   not fit waits QUEUED) and attempt 1 is reclaimed (SIGTERM, 20 s grace: the emergency
   checkpoint commits).
2. Attempt 2 asks for 4 replicas and waits QUEUED. After `shrinkAfter` the controller replaces it
   with attempt 3 at 2 replicas, which starts at once and resumes from attempt 1's checkpoint.
3. Once attempt 3 has trained past step --grow-at, the capacity limit is lifted and attempt 3 is
   reclaimed; attempt 4 asks for the full size again (growBack: everyAttempt), gets it, and runs
   to the end.
Then the same request runs twice more without reclaims or limits: with the same seed (the
unshrunk reference) and with another seed (the run-to-run spread that a shrink should stay well
inside). Prints the job's timeline, the attempts' sizes, the time from the first reclaim to
training on 2 replicas, and the final-loss and parameter differences; writes the three loss
curves to a PNG. Exit status 0 only when the job ran at 4, then 2, then 4 replicas, succeeded,
and its parameters ended closer to the reference's than the other seed's did (relative L2; the
final loss is one batch's loss, too noisy with dropout to decide on its own).
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import time
from pathlib import Path

from elastic_resume import parameter_difference  # bench/ is this script's directory
from trainer_logs import chief_records

from controller.cli.demo import Demo, DemoFailed, DemoOptions, Narrator
from controller.core.model import TERMINAL_PHASE_NAMES

BUCKET = "relaunch-demo"  # Demo.start creates it
MACHINE = "n1-standard-4"
SHRINK_AFTER_SECONDS = 20
GRACE_SECONDS = 20.0
FULL, SHRUNK = [1, 3], [1, 1]


def job_request(job_id: str, steps: int, seed: int) -> dict:
    container = {
        "imageUri": "us-docker.pkg.dev/relaunch-dev/relaunch/trainer:latest",
        "command": ["python", "-m", "trainer"],
        "args": [
            "--model",
            "trainer.examples.gpt:build_model",
            "--data",
            "trainer.examples.gpt:build_dataset",
            "--engine",
            "ddp",
            "--nproc-per-node",
            "1",
            "--steps",
            str(steps),
            "--batch-size",
            "4",
            "--global-batch-size",
            "16",
            "--lr",
            "3e-3",
            "--warmup-steps",
            "8",
            "--seed",
            str(seed),
            "--checkpoint-every-steps",
            "10",
            "--keep-last",
            "2",
            "--log-every",
            "5",
            "--grace-seconds",
            "15",
        ],  # fmt: skip
        # One thread per process: four ranks share this machine's two cores.
        "env": [{"name": "OMP_NUM_THREADS", "value": "1"}],
    }
    pool = {"machineSpec": {"machineType": MACHINE}, "containerSpec": container}
    return {
        "jobId": job_id,
        "jobSpec": {
            "workerPoolSpecs": [
                {**pool, "replicaCount": 1},
                {**pool, "replicaCount": 3, "minReplicaCount": 1},
            ],
            "scheduling": {"strategy": "SPOT", "timeout": "3600s"},
        },
        "checkpoint": {"uri": f"gs://{BUCKET}/checkpoints/{job_id}"},
        "elastic": {"shrinkAfter": f"{SHRINK_AFTER_SECONDS}s", "growBack": "everyAttempt"},
        "restartPolicy": {"maxFailures": 1, "backoff": {"initialSeconds": 1, "maxSeconds": 2}},
    }


def chief_log(demo: Demo, vertex_job: str) -> list[dict]:
    """The JSON lines the chief of one attempt wrote (devstack keeps each replica's log)."""
    return chief_records(demo.dir / "devstack", vertex_job)


def step_reached(demo: Demo, vertex_job: str) -> int:
    steps = [r["step"] for r in chief_log(demo, vertex_job) if r.get("message") == "train"]
    return max(steps, default=-1)


class Story:
    """Follows the job and plays the capacity cuts and reclaims at the right steps."""

    def __init__(self, demo: Demo, job_id: str, reclaim_at: int, grow_at: int, say):
        self.demo, self.job_id, self.say = demo, job_id, say
        self.reclaim_at, self.grow_at = reclaim_at, grow_at
        self.shown = 0
        self.first_reclaim_at: float | None = None  # controller clock (timeline time)
        self.shrunk_running_at: float | None = None
        self.waiting_since: float | None = None
        self.done: list[str] = []

    def __call__(self) -> dict | None:
        doc = self.demo._job(self.job_id)
        if doc is None:
            return None
        for entry in doc.get("timeline", [])[self.shown :]:
            if "checkpoint at step" not in entry["what"]:
                self.say(f"  {entry['what']}")
                if self.first_reclaim_at is None and self.done and "ended" in entry["what"]:
                    self.first_reclaim_at = entry["time"]
                if self.waiting_since is None and self.first_reclaim_at and "submitted as" in entry["what"]:
                    self.waiting_since = entry["time"]  # the full-size attempt that will wait
                if self.shrunk_running_at is None and "running shrunk" in entry["what"]:
                    self.shrunk_running_at = entry["time"]
        self.shown = len(doc.get("timeline", []))
        current = doc["attempts"][-1] if doc["attempts"] else None
        running = (
            current is not None
            and doc["phase"] == "running"
            and current["vertexJob"]
            and current["ending"] is None
            and current.get("replicas") is not None
        )
        if running and not self.done and current["replicas"] == FULL:
            if step_reached(self.demo, current["vertexJob"]) >= self.reclaim_at:
                self.say(f"STOCKOUT: room for 2 replicas of {MACHINE} from now on")
                self.demo.stack.capacity(2, MACHINE)
                self.say(f"RECLAIM of attempt {current['number']} (SIGTERM, {GRACE_SECONDS:.0f} s grace)")
                self._reclaim(current)
                self.done.append("stockout and reclaim at full size")
        elif running and len(self.done) == 1 and current["replicas"] == SHRUNK:
            if step_reached(self.demo, current["vertexJob"]) >= self.grow_at:
                self.say("CAPACITY BACK: the limit is lifted")
                self.demo.stack.capacity(None)
                self.say(f"RECLAIM of attempt {current['number']} (SIGTERM, {GRACE_SECONDS:.0f} s grace)")
                self._reclaim(current)
                self.done.append("reclaim while shrunk")
        return doc if doc["phase"] in TERMINAL_PHASE_NAMES else None

    def _reclaim(self, attempt: dict) -> None:
        if not self.demo.stack.preempt(attempt["vertexJob"], grace_seconds=GRACE_SECONDS, end_job=True):
            raise DemoFailed(f"attempt {attempt['number']} had ended before its reclaim")


def run_plain(demo: Demo, job_id: str, say) -> dict:
    shown = 0

    def finished() -> dict | None:
        nonlocal shown
        doc = demo._job(job_id)
        if doc is None:
            return None
        for entry in doc.get("timeline", [])[shown:]:
            if "checkpoint at step" not in entry["what"]:
                say(f"  {job_id}: {entry['what']}")
        shown = len(doc.get("timeline", []))
        return doc if doc["phase"] in TERMINAL_PHASE_NAMES else None

    doc = demo._wait(finished, demo.options.timeout, f"job {job_id} to finish")
    if doc["phase"] != "succeeded":
        raise DemoFailed(f"{job_id} ended {doc['phase']}: {doc['terminalReason']}")
    return doc


def loss_curve(demo: Demo, doc: dict) -> dict[int, float]:
    """Step -> loss the chief logged; a step trained again after a resume keeps its newest loss."""
    curve: dict[int, float] = {}
    for attempt in doc["attempts"]:
        if attempt["vertexJob"]:
            for record in chief_log(demo, attempt["vertexJob"]):
                if record.get("message") == "train":
                    curve[int(record["step"])] = float(record["loss"])
    return curve


def final_loss(demo: Demo, doc: dict) -> float:
    for record in reversed(chief_log(demo, doc["attempts"][-1]["vertexJob"])):
        if "final_loss" in record:
            return float(record["final_loss"])
    raise DemoFailed(f"no final loss in the log of {doc['jobId']}'s last attempt")


def final_parameters(job_id: str, steps: int) -> dict:
    """The model of the checkpoint the trainer committed at the last step (DDP: rank 0's model.pt)."""
    import torch
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    client = storage.Client(project=os.environ["GOOGLE_CLOUD_PROJECT"], credentials=AnonymousCredentials())
    blob = client.bucket(BUCKET).blob(f"checkpoints/{job_id}/step-{steps:010d}/model.pt")
    payload = torch.load(
        io.BytesIO(blob.download_as_bytes(timeout=60)), map_location="cpu", weights_only=True
    )
    return payload["model"]


def draw(curves: dict[str, dict[int, float]], path: Path, sizes: list[tuple[int, int, str]]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(8, 4.5))
    for (label, curve), style in zip(curves.items(), ("-", "--", ":")):
        steps = sorted(curve)
        axis.plot(steps, [curve[s] for s in steps], style, label=label)
    for first, last, what in sizes:  # shade the steps trained shrunk
        if what == "2":
            axis.axvspan(first, last, color="tab:orange", alpha=0.12, label="trained on 2 replicas")
    axis.set_xlabel("optimizer step")
    axis.set_ylabel("training loss (mean over ranks)")
    axis.set_title("shrink to fit on devstack: 4 -> 2 -> 4 replicas, global batch 16")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=150, help="training steps of the job (default 150)")
    parser.add_argument("--reclaim-at", type=int, default=40, help="reclaim attempt 1 past this step")
    parser.add_argument("--grow-at", type=int, default=90, help="reclaim the shrunk attempt past this step")
    parser.add_argument("--keep", action="store_true", help="keep devstack's directory and logs")
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds each run may take")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "out"))
    args = parser.parse_args(argv)
    if not 0 < args.reclaim_at < args.grow_at < args.steps:
        parser.error("need 0 < --reclaim-at < --grow-at < --steps")

    narrator = Narrator()
    say = narrator.say
    saved_env = dict(os.environ)
    os.environ["RELAUNCH_ERROR_RECHECK_SECONDS"] = "1"
    demo = Demo(DemoOptions(keep=args.keep, timeout=args.timeout), narrator)
    started = time.monotonic()
    try:
        demo.start()
        # Every reclaim ends the attempt (Vertex may also restart in place; not what this shows).
        demo.stack.configure(disable_retries_stops_reclaim_restarts=True, failed_error_delay_seconds=2.0)
        demo.publish(job_request("shrink", args.steps, seed=1234))
        story = Story(demo, "shrink", args.reclaim_at, args.grow_at, say)
        doc = demo._wait(story, args.timeout, "job shrink to finish")
        if doc["phase"] != "succeeded":
            raise DemoFailed(f"the job ended {doc['phase']}: {doc['terminalReason']}")
        if len(story.done) < 2:
            raise DemoFailed(f"the job finished before the story was played out: {story.done}")

        say("the same request without reclaims or stockout (same seed), for comparison")
        demo.publish(job_request("unshrunk", args.steps, seed=1234))
        reference = run_plain(demo, "unshrunk", say)
        say("and once more with another seed: the run-to-run spread")
        demo.publish(job_request("other-seed", args.steps, seed=4321))
        other = run_plain(demo, "other-seed", say)

        doc = demo._job("shrink") or doc
        print()
        print("timeline of job shrink:")
        for entry in doc["timeline"]:
            if "checkpoint at step" not in entry["what"]:
                print(f"  {time.strftime('%H:%M:%S', time.gmtime(entry['time']))}  {entry['what']}")
        print()
        print("attempts:")
        for attempt in doc["attempts"]:
            replicas = attempt.get("replicas")
            print(
                f"  attempt {attempt['number']}: replicas {replicas} ({sum(replicas or [])}), "
                f"resumed from step {attempt['resumeFromStep']}, ended {attempt['ending']} ({attempt['rule']})"
            )
        sizes_run = [sum(a["replicas"]) for a in doc["attempts"] if a.get("replicas") and _trained(demo, a)]
        if story.first_reclaim_at is not None and story.shrunk_running_at is not None:
            waited = story.shrunk_running_at - story.first_reclaim_at
            queued = story.shrunk_running_at - (story.waiting_since or story.first_reclaim_at)
            print(
                f"from the reclaim at full size to training on 2 replicas: {waited:.1f} s; from the "
                f"full-size attempt's create (then QUEUED) to it: {queued:.1f} s (shrinkAfter "
                f"{SHRINK_AFTER_SECONDS} s)"
            )
        losses = {
            "shrunk and grown back (seed 1234)": loss_curve(demo, doc),
            "never shrunk (seed 1234)": loss_curve(demo, reference),
            "never shrunk, other seed (4321)": loss_curve(demo, other),
        }
        final = {name: final_loss(demo, d) for name, d in (("b", doc), ("a", reference), ("c", other))}
        params = {
            name: final_parameters(job, args.steps)
            for name, job in (("a", "unshrunk"), ("b", "shrink"), ("c", "other-seed"))
        }
        b_max, b_rel = parameter_difference(params["a"], params["b"])
        c_max, c_rel = parameter_difference(params["a"], params["c"])
        b_loss, c_loss = abs(final["b"] - final["a"]), abs(final["c"] - final["a"])
        print()
        print(
            f"final losses: shrunk {final['b']:.6f}, unshrunk {final['a']:.6f}, other seed {final['c']:.6f}"
        )
        print(
            f"{'compared with the unshrunk run':34} {'|d final loss|':>15} {'max |d param|':>14} {'rel L2 d param':>15}"
        )
        print(f"{'shrunk and grown back':34} {b_loss:15.3e} {b_max:14.3e} {b_rel:15.3e}")
        print(f"{'other seed':34} {c_loss:15.3e} {c_max:14.3e} {c_rel:15.3e}")
        # The final loss is one batch's loss, noisy with dropout: the mean of the last logged
        # losses says more, and the parameters most (they are what the verdict uses).
        tail = {name: _tail_mean(curve) for name, curve in losses.items()}
        print("mean of the last 5 logged losses: " + ", ".join(f"{n} {v:.4f}" for n, v in tail.items()))
        shaded = _shrunk_steps(demo, doc)
        Path(args.out).mkdir(parents=True, exist_ok=True)
        png = draw(losses, Path(args.out) / "shrink_to_fit_losses.png", shaded)
        print(f"loss curves: {png}")
        print(f"sizes the job trained at, by attempt: {sizes_run}; wall {time.monotonic() - started:.0f} s")
        ok = sizes_run == [4, 2, 4] and b_rel < c_rel
        print("RESULT:", "ok" if ok else "NOT as expected")
        return 0 if ok else 1
    except DemoFailed as error:
        say(f"FAILED: {error}")
        return 1
    finally:
        demo.stop()
        os.environ.clear()
        os.environ.update(saved_env)


def _tail_mean(curve: dict[int, float], count: int = 5) -> float:
    last = sorted(curve)[-count:]
    return sum(curve[step] for step in last) / len(last)


def _trained(demo: Demo, attempt: dict) -> bool:
    return bool(attempt["vertexJob"]) and step_reached(demo, attempt["vertexJob"]) >= 0


def _shrunk_steps(demo: Demo, doc: dict) -> list[tuple[int, int, str]]:
    """(first step, last step, replicas) each attempt that trained logged."""
    spans = []
    for attempt in doc["attempts"]:
        if attempt["vertexJob"] and attempt.get("replicas"):
            steps = [r["step"] for r in chief_log(demo, attempt["vertexJob"]) if r.get("message") == "train"]
            if steps:
                first = attempt["resumeFromStep"] if attempt["resumeFromStep"] is not None else min(steps)
                spans.append((first, max(steps), str(sum(attempt["replicas"]))))
    return spans


if __name__ == "__main__":
    sys.exit(main())
