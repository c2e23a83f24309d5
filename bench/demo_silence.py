"""The longest silent stretches of `make demo`: every output line is stamped as it arrives, and
the gaps between lines are reported, longest first (a measurement, not a test).

    .venv/bin/python bench/demo_silence.py [--top 5] [-- command ...]   # default: make demo
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--top", type=int, default=5)
    parser.add_argument("command", nargs="*", default=["make", "demo"])
    args = parser.parse_args()
    started = time.monotonic()
    stamped: list[tuple[float, str]] = [(0.0, "(start)")]
    proc = subprocess.Popen(
        args.command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        stamped.append((time.monotonic() - started, line.rstrip("\n")))
        print(f"{stamped[-1][0]:7.1f} | {stamped[-1][1]}", flush=True)
    code = proc.wait()
    stamped.append((time.monotonic() - started, "(exit)"))
    gaps = sorted(
        ((after[0] - before[0], before, after) for before, after in zip(stamped, stamped[1:])),
        key=lambda gap: gap[0],
        reverse=True,
    )
    print(f"\n{' '.join(args.command)}: exit {code}, {stamped[-1][0]:.0f} s, {len(stamped) - 2} lines")
    print(f"longest silent stretches (top {args.top}):")
    for seconds, before, after in gaps[: args.top]:
        print(f"  {seconds:5.1f} s after {before[0]:6.1f} s: {before[1][:90]!r}")
        print(f"  {'':5}   until {after[0]:6.1f} s: {after[1][:90]!r}")
    # The teardown after the last line is silent by nature: shown on its own, whether or not it
    # is among the longest.
    print(f"last line to exit: {stamped[-1][0] - stamped[-2][0]:.1f} s after {stamped[-2][1][:70]!r}")
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, {os.cpu_count()} cores")
    return code


if __name__ == "__main__":
    sys.exit(main())
