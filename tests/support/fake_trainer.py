"""A stand-in for the trainer, for controller tests: fast, torch-free, same contracts.

It counts steps, commits a checkpoint every `--every` steps through `trainer.storage` (shards
first, then the commit marker), resumes from the newest committed checkpoint at or above
RELAUNCH_RESUME_FROM (a floor: after Vertex restarts an attempt in place with the same
environment, it goes on from what that attempt committed), and on SIGTERM writes the exit
record `preempted` and exits 75, exactly as the real trainer does. With `--fail-with N` it exits
N at step `--fail-at` without any record (a user error); `--fail-rank R` makes only the replica
of RANK R fail, the others run on until Vertex tears the gang down.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

from trainer import layout, storage

stop = False


def on_sigterm(signum, frame):
    global stop
    stop = True


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--every", type=int, default=5)
    parser.add_argument("--step-seconds", type=float, default=0.05)
    parser.add_argument("--fail-with", type=int, default=0)
    parser.add_argument("--fail-at", type=int, default=1)
    parser.add_argument("--fail-rank", type=int, default=-1, help="-1: every replica fails")
    parser.add_argument(
        "--checkpoint-stall", type=float, default=None, help="blockingSeconds to record in commit markers"
    )
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, on_sigterm)

    root = os.environ["RELAUNCH_CHECKPOINT_URI"]
    job_id = os.environ["RELAUNCH_JOB_ID"]
    attempt = int(os.environ["RELAUNCH_ATTEMPT"])
    resume = os.environ.get("RELAUNCH_RESUME_FROM") or ""
    store = storage.open_storage(root)
    step = 0
    if resume:
        _, step = layout.split_checkpoint_dir(resume)
    newest = storage.latest_committed(store)
    if newest is not None and newest.step > step:
        step = newest.step  # committed by an earlier run of this same attempt
    fails = args.fail_with and args.fail_rank in (-1, int(os.environ.get("RANK", "0")))
    # Tell the test where this attempt started (only pool 0 replica 0 writes).
    chief = (
        json.loads(os.environ.get("CLUSTER_SPEC", "{}")).get("task", {}).get("type", "workerpool0")
        == "workerpool0"
    )
    vertex_job_id = layout.vertex_job_id_from_env(os.environ)
    run = None
    if chief and vertex_job_id:
        # As the real trainer's launcher does: a second run of one CustomJob is a restart in place.
        run = storage.record_run_start(
            store, job_id, attempt, vertex_job_id, newest.step if newest else None
        ).run
    if chief:
        store.write_bytes(
            f"starts/attempt-{attempt:04d}.json",
            json.dumps({"attempt": attempt, "resume": resume, "step": step}).encode(),
        )
    last_committed = step if step else None
    while step < args.steps:
        if stop:
            if chief:
                storage.write_exit_record(
                    store,
                    layout.ExitRecord(
                        job_id=job_id,
                        attempt=attempt,
                        reason="preempted",
                        signal="SIGTERM",
                        step=step,
                        last_committed_step=last_committed,
                        checkpoint_saved=last_committed == step,
                        exit_code=75,
                        vertex_job_id=vertex_job_id,
                        run=run,
                    ),
                )
            return 75
        time.sleep(args.step_seconds)
        step += 1
        if fails and step >= args.fail_at:
            return args.fail_with
        if chief and step % args.every == 0:
            key = f"{layout.step_dir_name(step)}/shard-0.bin"
            payload = json.dumps({"step": step}).encode()
            store.write_bytes(key, payload)
            marker = layout.CommitMarker(
                step=step,
                world_size=1,
                engine="fake",
                job_id=job_id,
                attempt=attempt,
                wall_time=layout.utc_now(),
                files=(layout.FileEntry(path="shard-0.bin", size=len(payload), sha256="0" * 64),),
                blocking_seconds=args.checkpoint_stall,
                write_seconds=None if args.checkpoint_stall is None else 2 * args.checkpoint_stall,
            )
            store.create_only(
                f"{layout.step_dir_name(step)}/{layout.COMMIT_MARKER_NAME}", marker.to_json().encode()
            )
            last_committed = step
    return 0


if __name__ == "__main__":
    sys.exit(main())
