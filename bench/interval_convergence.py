"""The adaptive checkpoint interval on devstack, end to end: does the estimate learn, does the
interval change between attempts, and does the job still end bitwise equal to an uninterrupted run?

    PYTHONPATH=. .venv/bin/python bench/interval_convergence.py [--steps 2400] [--keep]

What it runs: devstack (Pub/Sub, GCS, Vertex stand-ins) and the controller as a real process
(`relaunch controller`, via `controller.cli.demo.Demo`), and one job of the real trainer
(`python -m trainer`, the `relaunch-train` entry point; the built-in tiny GPT, one replica, CPU)
with `checkpoint.interval: {mode: auto, min: 1s, max: 30s}`. Checkpoints are synchronous here, so
their whole write is the stall C the controller reads from the commit markers.

The schedule reclaims each attempt once it has trained a given number of steps past the step it
resumed from (read from its trainer's log; steps rather than seconds so that the schedule
completes however loaded the machine is), the first attempt also not before a periodic
checkpoint committed (C is measured from periodic saves only: an emergency save's stall is no
measure of one, so without it C would stay the 30 s default and the interval at its max):
announced reclaims (SIGTERM, 20 s of grace: the
emergency checkpoint commits, nothing is lost) and SIGKILLs with no warning (no emergency save:
everything since the last periodic checkpoint is lost). Only the SIGKILLs are work-losing
endings; the controller counts them per capacity class, and before each attempt picks the
interval from its estimate.

The controller's prior is set to a mean of 120 s between work-losing endings
(RELAUNCH_INTERVAL_PRIOR_MTBF_SECONDS): the production prior (24 h of training, half an ending)
is meant to be outweighed after a few real endings of hours-long attempts, and a few minutes of
demo could not move it visibly. Time is compressed the same way elsewhere: Vertex sets a FAILED
job's error about a minute after the end (devstack's `failed_error_delay_seconds`, here 2 s) and
the controller reads such a job again every second instead of every ten.

Prints, per attempt: how it ended, the controller's estimate when the attempt was submitted
(work-losing rate per hour, its posterior sd, endings and exposure seen, C and where it came
from) and the interval chosen; then the final parameters' sha256 against an uninterrupted run
of the same request. Exit status 0 only when the interval changed between attempts, every
scheduled reclaim happened, and the parameters are bitwise equal.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from trainer_logs import chief_log_path  # bench/ is this script's directory

from controller.cli.demo import Demo, DemoFailed, DemoOptions, Narrator
from controller.core.model import TERMINAL_PHASE_NAMES

# (steps trained past the attempt's resume step, grace seconds): grace 0 is a SIGKILL.
SCHEDULE = ((300, 20.0), (350, 0.0), (250, 0.0), (300, 20.0), (325, 0.0), (275, 0.0))
PRIOR_MTBF_SECONDS = 120.0
BUCKET = "relaunch-demo"  # Demo.start creates it


def job_request(job_id: str, steps: int) -> dict:
    return {
        "jobId": job_id,
        "jobSpec": {
            "workerPoolSpecs": [
                {
                    "replicaCount": 1,
                    "machineSpec": {"machineType": "n1-standard-4"},
                    "containerSpec": {
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
                            "8",
                            "--log-every",
                            "25",
                            "--synchronous-checkpoints",
                            "--keep-last",
                            "2",
                            "--grace-seconds",
                            "15",
                        ],  # fmt: skip
                        # One thread: on a shared 2-core machine torch's default threads spin.
                        "env": [{"name": "OMP_NUM_THREADS", "value": "1"}],
                    },
                }
            ],
            "scheduling": {"strategy": "SPOT", "timeout": "3600s"},
        },
        "checkpoint": {
            "uri": f"gs://{BUCKET}/checkpoints/{job_id}",
            "interval": {"mode": "auto", "min": "1s", "max": "30s"},
        },
        "restartPolicy": {
            "maxFailures": 1,
            "crashLoopAttempts": 20,  # a SIGKILL before the first checkpoint is no crash loop here
            "backoff": {"initialSeconds": 1, "maxSeconds": 2},
        },
    }


def describe_interval(chosen: dict | None) -> str:
    if not chosen:
        return "interval: none recorded"
    return (
        f"interval {chosen['seconds']:6.2f} s{' (' + chosen['clampedBy'] + ')' if chosen.get('clampedBy') else ''}"
        f" | rate {chosen['ratePerHour']:7.1f}/h +- {chosen['rateSdPerHour']:6.1f}"
        f" from {chosen['endings']} work-losing, {chosen['savedReclaims']} saved in "
        f"{chosen['exposureSeconds']:5.1f} s | C {chosen['stallSeconds']:.3f} s ({chosen['costSource']})"
    )


def run_schedule(demo: Demo, job_id: str, say) -> tuple[dict, list[str]]:
    """Follow the job, reclaiming attempts by SCHEDULE; returns the final document and what was done."""
    shown = 0
    done: list[str] = []

    def step() -> dict | None:
        nonlocal shown
        doc = demo._job(job_id)
        if doc is None:
            return None
        for entry in doc.get("timeline", [])[shown:]:
            if "checkpoint at step" not in entry["what"]:
                say(f"  {entry['what']}")
        shown = len(doc.get("timeline", []))
        current = doc["attempts"][-1] if doc["attempts"] else None
        k = len(done)
        if (
            k < len(SCHEDULE)
            and current is not None
            and current["number"] == k + 1
            and doc["phase"] == "running"
            and current["vertexJob"]
            and current["ending"] is None
        ):
            after, grace = SCHEDULE[k]
            trained = _step_reached(demo, current["vertexJob"]) - (current["resumeFromStep"] or 0)
            if trained >= after and (k > 0 or _committed(demo, current["vertexJob"])):
                kind = "SIGKILL, no warning" if grace == 0 else f"SIGTERM, {grace:.0f} s grace"
                say(f"RECLAIM {k + 1} of attempt {current['number']} ({kind})")
                if not demo.stack.preempt(current["vertexJob"], grace_seconds=grace, end_job=True):
                    raise DemoFailed(f"attempt {current['number']} had ended before its reclaim")
                done.append(kind)
        return doc if doc["phase"] in TERMINAL_PHASE_NAMES else None

    doc = demo._wait(step, demo.options.timeout, f"job {job_id} to finish")
    return doc, done


def _step_reached(demo: Demo, vertex_job: str) -> int:
    """The newest step the attempt's chief logged (devstack keeps each replica's log); -1 if none."""
    log = chief_log_path(demo.dir / "devstack", vertex_job)
    try:
        lines = log.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return -1
    for line in reversed(lines):
        if '"message": "train"' in line:
            return int(json.loads(line)["step"])
    return -1


def _committed(demo: Demo, vertex_job: str) -> bool:
    """Whether the attempt's chief logged a committed checkpoint (before any reclaim: a periodic one)."""
    log = chief_log_path(demo.dir / "devstack", vertex_job)
    try:
        return '"message": "checkpoint committed"' in log.read_text(errors="replace")
    except FileNotFoundError:
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2400, help="training steps of the job (default 2400)")
    parser.add_argument("--keep", action="store_true", help="keep devstack's directory and logs")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds each run may take")
    args = parser.parse_args(argv)

    narrator = Narrator()
    say = narrator.say
    saved_env = dict(os.environ)
    os.environ["RELAUNCH_INTERVAL_PRIOR_MTBF_SECONDS"] = str(PRIOR_MTBF_SECONDS)
    os.environ["RELAUNCH_ERROR_RECHECK_SECONDS"] = "1"
    demo = Demo(DemoOptions(keep=args.keep, timeout=args.timeout), narrator)
    started = time.monotonic()
    try:
        demo.start()
        # Every reclaim ends the attempt (Vertex may also restart in place; not what this shows).
        demo.stack.configure(disable_retries_stops_reclaim_restarts=True, failed_error_delay_seconds=2.0)
        demo.publish(job_request("interval-auto", args.steps))
        doc, done = run_schedule(demo, "interval-auto", say)
        if doc["phase"] != "succeeded":
            raise DemoFailed(f"the job ended {doc['phase']}: {doc['terminalReason']}")
        _, params = demo.final_loss(doc)

        say("the same request without any reclaim, for comparison")
        reference = job_request("interval-reference", args.steps)
        reference["checkpoint"]["interval"] = 30  # fixed: it is never reclaimed, the interval is moot
        demo.publish(reference)
        ref_doc, _ = run_schedule_free(demo, "interval-reference")
        if ref_doc["phase"] != "succeeded":
            raise DemoFailed(f"the reference run ended {ref_doc['phase']}: {ref_doc['terminalReason']}")
        _, ref_params = demo.final_loss(ref_doc)

        # Read again: the trainer's figures of the last attempt are stored just after the job ended.
        doc = demo._job("interval-auto") or doc
        print()
        print(
            f"job interval-auto: {doc['phase']} after {doc['attempt']} attempts, {doc['preemptions']} preemptions"
        )
        for attempt in doc["attempts"]:
            figures = attempt.get("trainerFigures") or {}
            ending = f"{attempt['ending']} ({attempt['rule']})"
            if figures:
                saved = figures.get("checkpointSaved")
                ending += (
                    f", step {figures.get('stepAtEnd')}, last commit {figures.get('lastCommittedStep')}"
                    f"{', emergency save committed' if saved and figures.get('reason') == 'preempted' else ''}"
                )
            elif attempt["ending"] == "preempted":
                ending += ", no exit record (killed before any save)"
            print(f"  attempt {attempt['number']}: {describe_interval(attempt.get('checkpointInterval'))}")
            print(f"             ended {ending}")
        intervals = [
            round(a["checkpointInterval"]["seconds"], 3)
            for a in doc["attempts"]
            if a.get("checkpointInterval")
        ]
        changed = len(set(intervals)) > 1
        same = params == ref_params
        print(
            f"intervals by attempt (s): {intervals}; {'changed' if changed else 'DID NOT CHANGE'} between attempts"
        )
        print(f"reclaims done: {len(done)} of {len(SCHEDULE)} scheduled ({', '.join(done)})")
        print(f"final parameters sha256, reclaimed and resumed: {params}")
        print(f"final parameters sha256, never reclaimed:       {ref_params}")
        print("bitwise equal" if same else "MISMATCH: the resumed run diverged from the uninterrupted run")
        print(f"wall time: {time.monotonic() - started:.0f} s")
        return 0 if same and changed and len(done) == len(SCHEDULE) else 1
    except DemoFailed as error:
        print(f"interval_convergence: failed: {error}", file=sys.stderr)
        print(f"logs in {demo.dir}" if args.keep else "(rerun with --keep for the logs)", file=sys.stderr)
        return 1
    finally:
        say("cleaning up (controller, devstack, replica processes)")
        demo.stop()
        os.environ.clear()
        os.environ.update(saved_env)


def run_schedule_free(demo: Demo, job_id: str) -> tuple[dict, list[str]]:
    doc = demo._wait(
        lambda: (d := demo._job(job_id)) is not None and d["phase"] in TERMINAL_PHASE_NAMES and d,
        demo.options.timeout,
        f"job {job_id} to finish",
    )
    return doc, []


if __name__ == "__main__":
    sys.exit(main())
