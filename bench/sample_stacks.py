"""A sampling profiler for a Python module run as a program, without py-spy (not installable here).

Runs `python -m MODULE ARGS...` in this process with a thread that records every thread's stack
every `--every` seconds (wall clock: waiting shows as much as working, which is the point when
the question is "what does a request wait on"). At exit the samples go to OUT as folded stacks
(`thread;frame;frame count`, the input of flamegraph tools), and `--top` prints the frames seen
in the most samples of the threads whose stacks contain `--within`.

As the intake bench's profiler (`BENCH_PROFILER` is put before `python -m controller.cli ...`):

    BENCH_PROFILER=".venv/bin/python bench/sample_stacks.py --out /tmp/intake.folded --" \\
        .venv/bin/python bench/intake_rate.py --counts 2000 --stores sqlite
    .venv/bin/python bench/sample_stacks.py --top /tmp/intake.folded --within intake.py:accept
"""

from __future__ import annotations

import argparse
import atexit
import collections
import runpy
import sys
import threading


def _frames(frame) -> list[str]:
    names = []
    while frame is not None:
        code = frame.f_code
        names.append(f"{code.co_filename.rsplit('/', 1)[-1]}:{code.co_name}")
        frame = frame.f_back
    return names[::-1]


def record(out: str, every: float, argv: list[str]) -> None:
    if len(argv) < 3 or argv[1] != "-m":
        raise SystemExit("after --: PYTHON -m MODULE [ARGS...]")
    counts: collections.Counter[str] = collections.Counter()
    stopped = threading.Event()

    def sample() -> None:
        me = threading.get_ident()
        while not stopped.wait(every):
            names = {thread.ident: thread.name.split("-")[0] for thread in threading.enumerate()}
            for ident, frame in sys._current_frames().items():
                if ident != me:
                    counts[";".join([names.get(ident, "?"), *_frames(frame)])] += 1

    def dump() -> None:
        stopped.set()
        with open(out, "w") as folded:
            folded.writelines(f"{stack} {n}\n" for stack, n in counts.items())

    atexit.register(dump)
    threading.Thread(target=sample, daemon=True, name="sampler").start()
    sys.argv = [argv[2], *argv[3:]]
    runpy.run_module(argv[2], run_name="__main__", alter_sys=True)


def top(path: str, within: str | None, lines: int) -> None:
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    with open(path) as folded:
        for line in folded:
            stack, n = line.rsplit(" ", 1)
            if within and within not in stack:
                continue
            total += int(n)
            for frame in set(stack.split(";")[1:]):
                inclusive[frame] += int(n)
    print(f"{total} samples" + (f" within {within}" if within else ""))
    for frame, n in inclusive.most_common(lines):
        print(f"{n:8d} {100 * n / max(total, 1):5.1f}%  {frame}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", help="record: folded stacks written here at exit")
    parser.add_argument("--every", type=float, default=0.01, help="seconds between samples")
    parser.add_argument("--top", metavar="FOLDED", help="report: the busiest frames of a recording")
    parser.add_argument("--within", help="report: only stacks containing this frame")
    parser.add_argument("--lines", type=int, default=40)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    if args.top:
        top(args.top, args.within, args.lines)
    elif args.out:
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        record(args.out, args.every, command)
    else:
        parser.error("either --out (record) or --top (report)")


if __name__ == "__main__":
    main()
