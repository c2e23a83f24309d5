"""`relaunch report JOB_ID --png FILE`: the job's goodput, and a picture of its attempts."""

from __future__ import annotations

import argparse
import time

from controller.cli import common as view

EXAMPLE = """\
Prints the goodput estimate of the job (productive time, time lost to recomputed steps, time
waiting for capacity and restarting; see controller/goodput.py for how it is estimated). With
--png, also draws one bar per attempt on a time axis: grey while waiting for capacity, then
coloured by how the attempt ended (preempted orange, user error red, infrastructure purple,
timeout brown, succeeded green, cancelled black), lost work hatched, checkpoints as markers.

Example:
  relaunch report demo-gpt --png demo-gpt.png
"""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "report",
        help="goodput of one job, and a PNG timeline of its attempts",
        description="Report how much of a job's wall time went into kept training.",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("job_id", metavar="JOB_ID", help="the job's jobId")
    parser.add_argument("--png", metavar="FILE", help="write the timeline picture to FILE")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    return view.guarded("report on the job", lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    from controller.readmodel.goodput import compute
    from controller.readmodel.jobs import status_document

    document = view.require_document(view.open_job_store(view.settings()), args.job_id)
    now = time.time()
    result = compute(document, now)
    print(f"{args.job_id}: {result.summary()}")
    if args.png:
        try:
            from controller.cli.report_png import draw
        except ModuleNotFoundError as error:  # matplotlib is an optional extra
            raise view.CommandError(
                f"--png needs matplotlib ({error}); install it with: pip install 'relaunch[report]'", 1
            ) from error

        draw(
            status_document(document, with_timeline=False),
            document.get("timeline", []),
            result,
            args.png,
            now,
        )
        print(f"wrote {args.png}")
    return 0
