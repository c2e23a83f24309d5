"""A pipeline step that trains with Relaunch: submit a job request, fail fast if the controller
rejects it, wait for the job (through any number of preemptions), and fail the step unless the
job succeeded. Re-running the step with the same run id is safe: the same request under the
same jobId is accepted again as a no-op and the wait picks the job up where it is.

    python examples/pipeline_step.py examples/demo.yaml --run-id nightly-2026-11-23

Settings come from the environment or `relaunch config` (state_store, project, ...), as for
the CLI; see docs/client.md.
"""

from __future__ import annotations

import argparse
import json
import sys

import yaml

from controller.client import Client, WaitTimeout
from controller.request import RequestInvalid


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("request", help="job request file (YAML or JSON)")
    parser.add_argument("--run-id", help="suffix for the jobId, e.g. the pipeline run's id")
    parser.add_argument("--timeout", type=float, default=None, help="seconds to wait for the job")
    args = parser.parse_args()

    with open(args.request) as handle:
        request = yaml.safe_load(handle)
    if args.run_id:  # one job, and one checkpoint folder, per pipeline run
        request["jobId"] = f"{request['jobId']}-{args.run_id}"[:63]
        # A sibling of the request's folder, never one inside it: the controller gives each job
        # a checkpoint root no other job's nests in or contains.
        request["checkpoint"]["uri"] = f"{request['checkpoint']['uri'].rstrip('/')}-{args.run_id}"

    client = Client.from_config()
    try:
        verdict = client.submit(request)
    except RequestInvalid as invalid:
        for problem in invalid.problems:
            print(f"invalid request: {problem}", file=sys.stderr)
        return 2
    if not verdict.accepted:
        print(f"{verdict.job_id}: {verdict.outcome}: {'; '.join(verdict.reasons)}", file=sys.stderr)
        return 1
    print(f"{verdict.job_id}: {verdict.outcome}", flush=True)

    def progress(status: dict) -> None:
        print(
            f"{status['jobId']}: {status['phase']}, attempt {status['attempt']}, "
            f"checkpoint step {status['latestCheckpointStep']}",
            flush=True,
        )

    try:
        final = client.wait(verdict.job_id, timeout=args.timeout, on_change=progress)
    except WaitTimeout as stopped:
        print(str(stopped), file=sys.stderr)
        return 1
    summary = {
        "jobId": final["jobId"],
        "phase": final["phase"],
        "attempts": final["attempt"],
        "preemptions": final["preemptions"],
        "checkpoint": final["latestCheckpointUri"],
        "goodput": final["goodput"]["ratio"],
    }
    print(json.dumps(summary), flush=True)  # the step's output, for the next step to read
    return 0 if final["phase"] == "succeeded" else 1


if __name__ == "__main__":
    sys.exit(main())
