"""Capacity that follows the job, end to end on devstack (issue 27): a 2-node job of the real
trainer with three placements moves between regions and strategies as capacity comes and goes,
and ends bitwise equal to a run that never moved.

    PYTHONPATH=. .venv/bin/python bench/region_failover.py [--steps 100] [--keep]

What it runs: devstack with two regions (us-central1 = A, europe-west4 = B; one Vertex stand-in
and endpoint each), the controller as a real process (`relaunch controller`, via
`controller.cli.demo.Demo`, which watches both regions), and one job of the real trainer (the
built-in tiny GPT on CPU, DDP, a chief and one worker) whose request lists:

    spot-a  us-central1   2 x g2-standard-4  SPOT        $1.00 a node-hour
    spot-b  europe-west4  2 x g2-standard-4  SPOT        $1.05
    flex-b  europe-west4  2 x g2-standard-8  FLEX_START  $1.09, maxWait 10m

so under the objective lowest-cost the controller prefers spot-a, then spot-b, then flex-b
(within the 10 % a refused attempt may move for). The story, played at steps of the chief's log
(not at seconds, so it completes however loaded the machine is):
1. the attempt on spot-a trains past --first; A's Spot machines are cut to none (a stockout that
   fails jobs, `DevStack.capacity(0, ..., "fail", region=A)`) and the attempt is reclaimed
   (SIGTERM, emergency checkpoint). The next attempt asks spot-a (nothing says A is out), is
   refused with Vertex's stockout error, and the one after it is decided at once, on spot-b, in
   the same decision as the refusal, resuming from the reclaimed attempt's checkpoint;
2. it trains past --second; A's capacity returns and B's attempt is reclaimed: the next attempt
   goes back to spot-a, the cheaper;
3. it trains past --third; Spot is cut in both regions and the attempt reclaimed: spot-a and then
   spot-b refuse, and flex-b (FLEX_START, the cheapest that has capacity) runs to the end.
Then the same request runs again with nothing disturbed (the unmoved run). Prints the timeline
(with every choice's reason and figures), the attempts, and the two runs' final parameter
digests. Exit status 0 only when the story played out as above and the digests are equal.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from trainer_logs import chief_records

from controller.cli.demo import Demo, DemoFailed, DemoOptions, Narrator
from controller.core.model import TERMINAL_PHASE_NAMES

A, B = "us-central1", "europe-west4"
BUCKET = "relaunch-demo"  # Demo.start creates it
# FLEX_START takes GPUs only (docs/requests.md): the job asks for one L4 a replica, which devstack
# records and does not emulate, so its replicas train on the CPU.
SPOT_MACHINE, FLEX_MACHINE = "g2-standard-4", "g2-standard-8"
GPU = {"acceleratorType": "NVIDIA_L4", "acceleratorCount": 1}
GRACE_SECONDS = 20.0


def placement(name: str, region: str, machine: str, strategy: str, price: float, **extra) -> dict:
    pool = {"machineType": machine, **GPU, "replicaCount": 1}
    return {
        "name": name,
        "region": region,
        "workerPools": [pool, pool],
        "strategy": strategy,
        "pricePerNodeHour": price,
        **extra,
    }


def job_request(job_id: str, steps: int) -> dict:
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
            "--lr",
            "3e-3",
            "--warmup-steps",
            "8",
            "--seed",
            "1234",
            "--checkpoint-every-steps",
            "10",
            "--keep-last",
            "2",
            "--log-every",
            "5",
            "--grace-seconds",
            "15",
        ],  # fmt: skip
        "env": [{"name": "OMP_NUM_THREADS", "value": "1"}],  # two ranks share two cores
    }
    pool = {
        "machineSpec": {"machineType": SPOT_MACHINE, **GPU},
        "containerSpec": container,
        "replicaCount": 1,
    }
    return {
        "jobId": job_id,
        "jobSpec": {"workerPoolSpecs": [pool, pool], "scheduling": {"strategy": "SPOT", "timeout": "3600s"}},
        "checkpoint": {"uri": f"gs://{BUCKET}/checkpoints/{job_id}"},
        "restartPolicy": {"maxFailures": 1, "backoff": {"initialSeconds": 1, "maxSeconds": 2}},
        "placements": [
            placement("spot-a", A, SPOT_MACHINE, "SPOT", 1.00),
            placement("spot-b", B, SPOT_MACHINE, "SPOT", 1.05),
            placement("flex-b", B, FLEX_MACHINE, "FLEX_START", 1.09, maxWait="10m"),
        ],
        "objective": "lowest-cost",
    }


def step_reached(demo: Demo, vertex_job: str) -> int:
    records = chief_records(demo.dir / "devstack", vertex_job)
    return max((r["step"] for r in records if r.get("message") == "train"), default=-1)


def chief_record(demo: Demo, vertex_job: str, message: str) -> dict | None:
    return next(
        (r for r in chief_records(demo.dir / "devstack", vertex_job) if r.get("message") == message), None
    )


def placed(attempt: dict) -> str | None:
    return attempt["placement"]["chosen"] if attempt.get("placement") else None


class Story:
    """Follows the job; cuts and restores capacity and reclaims at the steps given."""

    def __init__(self, demo: Demo, job_id: str, at: tuple[int, int, int], say):
        self.demo, self.job_id, self.at, self.say = demo, job_id, at, say
        self.shown = 0
        self.done: list[str] = []

    def __call__(self) -> dict | None:
        doc = self.demo._job(self.job_id)
        if doc is None:
            return None
        for entry in doc.get("timeline", [])[self.shown :]:
            if "checkpoint at step" not in entry["what"]:
                self.say(f"  {entry['what']}")
        self.shown = len(doc.get("timeline", []))
        current = doc["attempts"][-1] if doc["attempts"] else None
        if current is None or doc["phase"] != "running" or current["ending"] or not current["vertexJob"]:
            return doc if doc["phase"] in TERMINAL_PHASE_NAMES else None
        stage, where = len(self.done), placed(current)
        stack = self.demo.stack
        if stage < 3 and where == ("spot-a", "spot-b", "spot-a")[stage]:
            if step_reached(self.demo, current["vertexJob"]) >= self.at[stage]:
                if stage == 0:
                    self.say(f"STOCKOUT of {SPOT_MACHINE} in {A}")
                    stack.capacity(0, SPOT_MACHINE, "fail", region=A)
                elif stage == 1:
                    self.say(f"CAPACITY BACK in {A}")
                    stack.capacity(None, SPOT_MACHINE, region=A)
                else:
                    self.say(f"STOCKOUT of {SPOT_MACHINE} in {A} and {B}")
                    stack.capacity(0, SPOT_MACHINE, "fail", region=A)
                    stack.capacity(0, SPOT_MACHINE, "fail", region=B)
                self.say(f"RECLAIM of attempt {current['number']} on {where}")
                if not stack.preempt(current["vertexJob"], grace_seconds=GRACE_SECONDS, end_job=True):
                    raise DemoFailed(f"attempt {current['number']} had ended before its reclaim")
                self.done.append(f"stage {stage + 1} at attempt {current['number']}")
        return None


def wait_done(demo: Demo, job_id: str, timeout: float, say) -> dict:
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

    return demo._wait(finished, timeout, f"job {job_id} to finish")


def verdict(demo: Demo, doc: dict) -> list[str]:
    """What did not go as the story says (empty: all did)."""
    wrong = []
    attempts = doc["attempts"]
    names = [placed(a) for a in attempts]
    ran = [placed(a) for a in attempts if a["startedAt"] is not None]
    if ran != ["spot-a", "spot-b", "spot-a", "flex-b"]:
        wrong.append(f"attempts that ran were on {ran}, not spot-a, spot-b, spot-a, flex-b")
    for i, attempt in enumerate(attempts[:-1]):
        after = attempts[i + 1]
        if attempt["ending"] == "capacity" and attempt["startedAt"] is None:
            # Moved in the decision that recorded the refusal: no backoff between them.
            gap = after["requestedAt"] - attempt["endedAt"]
            if placed(after) == placed(attempt) or gap > 5.0:
                wrong.append(
                    f"attempt {after['number']} ({placed(after)}) followed the refusal after {gap:.1f} s"
                )
    for attempt in attempts:
        if attempt["startedAt"] is None or attempt["resumeFromStep"] is None:
            continue
        resumed = chief_record(demo, attempt["vertexJob"], "resumed")
        if resumed is None or resumed.get("from_step") != attempt["resumeFromStep"]:
            wrong.append(f"attempt {attempt['number']} did not resume from step {attempt['resumeFromStep']}")
        elif resumed.get("steps_recomputed") not in (0, None):
            wrong.append(f"attempt {attempt['number']} recomputed {resumed['steps_recomputed']} steps")
    if doc["phase"] != "succeeded":
        wrong.append(f"the job ended {doc['phase']}: {doc['terminalReason']}")
    if names.count("flex-b") != 1:
        wrong.append(f"placements asked: {names}")
    return wrong


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=100, help="training steps (default 100)")
    parser.add_argument("--first", type=int, default=20, help="stage 1 past this step")
    parser.add_argument("--second", type=int, default=45, help="stage 2 past this step")
    parser.add_argument("--third", type=int, default=70, help="stage 3 past this step")
    parser.add_argument("--keep", action="store_true", help="keep devstack's directory and logs")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds each run may take")
    args = parser.parse_args(argv)
    if not 0 < args.first < args.second < args.third < args.steps:
        parser.error("need 0 < --first < --second < --third < --steps")

    narrator = Narrator()
    say = narrator.say
    saved_env = dict(os.environ)
    os.environ["RELAUNCH_ERROR_RECHECK_SECONDS"] = "1"
    os.environ["RELAUNCH_CAPACITY_RETRY_SECONDS"] = "5"
    demo = Demo(DemoOptions(keep=args.keep, timeout=args.timeout, regions=(B,)), narrator)
    started = time.monotonic()
    try:
        demo.start()
        for region in demo.stack.vertices.values():
            # Every reclaim ends the attempt (Vertex may also restart in place; not shown here).
            region.configure(disable_retries_stops_reclaim_restarts=True, failed_error_delay_seconds=2.0)
        demo.publish(job_request("moved", args.steps))
        story = Story(demo, "moved", (args.first, args.second, args.third), say)
        demo._wait(story, args.timeout, "the story to play out")
        doc = wait_done(demo, "moved", args.timeout, say)
        for region in (A, B):
            demo.stack.capacity(None, None, region=region)
        say("the same request with nothing disturbed: the unmoved run")
        demo.publish(job_request("unmoved", args.steps))
        reference = wait_done(demo, "unmoved", args.timeout, say)

        print()
        print("timeline of job moved:")
        for entry in doc["timeline"]:
            if "checkpoint at step" not in entry["what"]:
                print(f"  {time.strftime('%H:%M:%S', time.gmtime(entry['time']))}  {entry['what']}")
        print()
        print("attempts:")
        for a in doc["attempts"]:
            print(
                f"  attempt {a['number']}: {placed(a)} ({a['vertexJob']}), resumed from step "
                f"{a['resumeFromStep']}, ended {a['ending']} ({a['rule']}), ran: {a['startedAt'] is not None}"
            )
        digests = {}
        for name, d in (("moved", doc), ("unmoved", reference)):
            last = d["attempts"][-1]["vertexJob"]
            record = chief_record(demo, last, "training completed") or {}
            digests[name] = record.get("params_sha256")
            print(f"{name}: final loss {record.get('final_loss')}, parameters sha256 {digests[name]}")
        wrong = verdict(demo, doc)
        if digests["moved"] is None or digests["moved"] != digests["unmoved"]:
            wrong.append("the moved run's parameters differ from the unmoved run's")
        print(f"wall {time.monotonic() - started:.0f} s; load average {os.getloadavg()}")
        for line in wrong:
            print(f"NOT AS EXPECTED: {line}")
        print("RESULT:", "ok" if not wrong else "NOT as expected")
        return 0 if not wrong else 1
    except DemoFailed as error:
        say(f"FAILED: {error}")
        return 1
    finally:
        demo.stop()
        os.environ.clear()
        os.environ.update(saved_env)


if __name__ == "__main__":
    sys.exit(main())
