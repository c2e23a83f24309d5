"""`relaunch report JOB_ID [--svg FILE] [--png FILE] [--json]`: the job's goodput, and a picture
of its attempts."""

from __future__ import annotations

import argparse
import time

from controller.cli import common as view

EXAMPLE = """\
Prints the goodput estimate of the job (productive time, time lost to recomputed steps, time
waiting for capacity and restarting; see controller/readmodel/goodput.py for how it is
estimated). --svg draws one bar per attempt on a time axis (the picture the controller's status
page shows): grey while waiting for capacity, then coloured by how the attempt ended (preempted
orange, user error red, infrastructure purple, timeout brown, succeeded green, cancelled black),
lost work hatched, checkpoints as markers. --png draws the same with matplotlib, if installed.
Exit status 1 if there is no such job.

Example:
  relaunch report demo-gpt --svg demo-gpt.svg
  relaunch report demo-gpt --json | jq .goodput.ratio
"""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "report",
        help="goodput of one job, and a picture of its attempts (SVG, or PNG with matplotlib)",
        description="Report how much of a job's wall time went into kept training.",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("job_id", metavar="JOB_ID", help="the job's jobId")
    parser.add_argument("--svg", metavar="FILE", help="write the timeline picture to FILE as SVG")
    parser.add_argument("--png", metavar="FILE", help="write the timeline picture to FILE (needs matplotlib)")
    parser.add_argument("--json", action="store_true", help="print the goodput figures as JSON")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    return view.guarded("report on the job", lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    from controller.readmodel.goodput import compute, duration
    from controller.readmodel.printable import printable

    status = view.client().status(args.job_id, timeline=True)
    now = time.time()
    result = compute(status, now)
    if args.json:
        view.print_json(
            {
                "jobId": status["jobId"],
                "goodput": status["goodput"],
                "attempts": [
                    {
                        "number": a.number,
                        "running": a.running,
                        "productive": a.productive,
                        "lost": a.lost,
                        "waiting": a.waiting,
                        "checkpointInterval": interval,
                        "figures": a.source,
                        "replicas": a.nodes,
                        "nodeSeconds": a.running * a.nodes,
                    }
                    for a, interval in zip(
                        result.attempts, [s.get("checkpointInterval") for s in status["attempts"]]
                    )
                ],
            }
        )
    else:
        print(f"{status['jobId']}: {result.summary()}")
        for row, attempt in zip(result.attempts, status["attempts"]):
            chosen = attempt.get("checkpointInterval")
            interval = (
                "" if not chosen else f"; checkpoint every {chosen['seconds']:.1f} s ({chosen['mode']})"
            )
            print(
                f"  attempt {row.number}: running {duration(row.running)}, productive "
                f"{duration(row.productive)}, lost {duration(row.lost)} ({row.source}), "
                f"{row.nodes} replicas{' (shrunk)' if attempt.get('shrunk') else ''}{interval}"
            )
            if chosen and chosen.get("mode") == "auto":
                print(f"    {printable(chosen.get('explanation', ''))}")
    written = []
    if args.svg:
        from controller.readmodel.picture import attempts_svg

        with open(args.svg, "w", encoding="utf-8") as out:
            out.write(attempts_svg(status, status.get("timeline", []), result, now))
        written.append(args.svg)
    if args.png:
        try:
            from controller.cli.report_png import draw
        except ImportError:
            raise view.CommandError(
                "--png needs matplotlib (pip install matplotlib); --svg does not"
            ) from None
        try:
            draw(status, status.get("timeline", []), result, args.png, now)
        except ImportError:
            raise view.CommandError(
                "--png needs matplotlib (pip install matplotlib); --svg does not"
            ) from None
        written.append(args.png)
    if not args.json:
        for path in written:
            print(f"wrote {path}")
    return 0
