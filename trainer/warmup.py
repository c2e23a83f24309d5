"""Build the DeepSpeed ops the trainer needs ahead of a job, and clear stale build locks.

    python -m trainer.warmup [--timeout 1200] [--stale-after 600]

DeepSpeed compiles some of its C++ ops the first time they are used (torch's JIT extension
builder, g++ and ninja): on CPU the shared-memory communication op `deepspeed_shm_comm`, which
took 7.5 minutes on a loaded 2-core machine. In a paid job that would be minutes of a whole gang
waiting at its first step, so the image build runs this command once (the ops land in torch's
extension directory, `$TORCH_EXTENSIONS_DIR` or `~/.cache/torch_extensions`), and the launcher
only checks for stale locks before its workers start.

A build holds a `lock` file in the op's directory; torch waits for that file to disappear with no
timeout, so a build killed half-way (a preempted replica, Ctrl-C) leaves every later run of the
same user waiting for ever. A lock counts as stale when nothing in its directory changed for
`--stale-after` seconds (a live build keeps writing its objects); stale locks are removed.

On a GPU the trainer uses no DeepSpeed op that needs compiling (the optimizer is torch's fused
AdamW), so there is nothing to build there; the command says so and only checks the locks.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Iterable

# Op builders the trainer's DeepSpeed path loads, by accelerator.
OPS_BY_ACCELERATOR = {"cpu": ("ShareMemCommBuilder",), "cuda": ()}
LOCK_NAME = "lock"
STALE_LOCK_SECONDS = 600.0  # no file of a build changed for this long: the builder is gone


def extensions_root() -> str:
    return os.environ.get("TORCH_EXTENSIONS_DIR") or os.path.expanduser("~/.cache/torch_extensions")


def newest_change(directory: str) -> float:
    """The newest modification time of the directory or anything in it."""
    newest = os.stat(directory).st_mtime
    for folder, _, files in os.walk(directory):
        for name in files:
            try:
                newest = max(newest, os.stat(os.path.join(folder, name)).st_mtime)
            except OSError:  # removed while we looked
                pass
    return newest


def stale_locks(root: str, stale_after: float, now: float) -> list[str]:
    """Lock files whose op directory saw no change for `stale_after` seconds."""
    found = []
    for folder, _, files in os.walk(root):
        if LOCK_NAME in files and now - newest_change(folder) >= stale_after:
            found.append(os.path.join(folder, LOCK_NAME))
    return sorted(found)


def remove_stale_locks(root: str, stale_after: float, log=None) -> list[str]:
    removed = []
    for path in stale_locks(root, stale_after, time.time()):
        try:
            os.remove(path)
        except FileNotFoundError:
            continue
        removed.append(path)
        if log is not None:
            log.warning("removed a stale extension build lock", path=path, stale_after_seconds=stale_after)
    return removed


def build_ops(ops: Iterable[str], timeout: float, root: str) -> list[str]:
    """Load (building if needed) each op in a child process killed after `timeout` seconds.
    Meant for an image build or a node where nothing else builds extensions meanwhile: the lock
    of a build killed at its timeout is removed."""
    problems = []
    for op in ops:
        code = (
            "from deepspeed.accelerator import get_accelerator\n"
            f"builder = get_accelerator().create_op_builder({op!r})\n"
            "builder.load()\n"
            "print('built', builder.absolute_name())\n"
        )
        started = time.monotonic()
        try:
            done = subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            problems.append(f"{op}: not built within {timeout:.0f}s")
            remove_stale_locks(root, 0.0)  # the killed build's own lock
            continue
        if done.returncode != 0:
            tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
            problems.append(f"{op}: build failed: {tail}")
        else:
            print(f"{op}: ready in {time.monotonic() - started:.1f}s")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.warmup", description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds allowed per op build")
    parser.add_argument(
        "--stale-after", type=float, default=STALE_LOCK_SECONDS, help="seconds without change = stale lock"
    )
    opts = parser.parse_args(argv)
    import torch

    accelerator = "cuda" if torch.cuda.is_available() else "cpu"
    if accelerator == "cpu":
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    root = extensions_root()
    for path in remove_stale_locks(root, opts.stale_after):
        print(f"removed stale lock {path}")
    ops = OPS_BY_ACCELERATOR[accelerator]
    if not ops:
        print(f"{accelerator}: no DeepSpeed op to build")
        return 0
    problems = build_ops(ops, opts.timeout, root)
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
