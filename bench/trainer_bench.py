"""Trainer overhead, printed as a table (CPU with gloo, or the GPUs present with NCCL):

1. step time of `python -m trainer` (DDP engine) vs. a minimal hand-written DDP loop on the
   same model, data, batch size, optimizer and seed (bench/plain_ddp.py, started by torchrun:
   the same elastic agent, static rendezvous, spawned workers and OMP_NUM_THREADS). Both gangs
   start together and warm up; then only one runs at a time, the other stopped (SIGSTOP to its
   whole process tree), in alternating slices of `--windows-per-slice` windows (a few seconds).
   Each side logs its mean step time every `--window` steps; only windows wholly inside one of
   its slices count. Each
   trainer slice is compared with the plain slices just before and after it, so a load swing
   slower than a slice hits both sides of a ratio; the overhead is the median of those ratios
   (with their quartiles), printed with the load average before and after. Beside it, the CPU
   time per step of each side's whole process tree over its slices (read while it is frozen):
   other sessions' load steals wall time from both sides but adds no CPU time to either, so on
   a shared machine this ratio is the steadier measure of the work the trainer adds (it does
   not see time spent waiting, which the wall-time ratio does);
2. training-loop stall per checkpoint with the background upload vs. a synchronous save
   (ratio: synchronous / background), to a local path and, if devstack is importable, to the
   GCS emulator (`--no-checkpoints` skips this part).

Usage: .venv/bin/python bench/trainer_bench.py [--nproc 2] [--window 3] [--slices 12] [--windows-per-slice 3]
       [--no-checkpoints]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime

from trainer_logs import json_records  # bench/ is this script's directory

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = "trainer.examples.gpt:build_larger_model"
DATA = "trainer.examples.gpt:build_larger_dataset"
BATCH = 8
SEED = 1234


def trainer_env(extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RELAUNCH_", "CLUSTER_SPEC", "MASTER_"))}
    # Keep what PYTHONPATH already held (packages carried to a machine beside its own).
    path = os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH", "")) if p)
    env.update({"OMP_NUM_THREADS": "1", "PYTHONPATH": path, "RELAUNCH_JOB_ID": "bench"})
    env.update(extra or {})
    return env


def run_trainer(args: list[str], env: dict | None = None) -> list[dict]:
    cmd = [
        sys.executable,
        "-m",
        "trainer",
        "--model",
        MODEL,
        "--data",
        DATA,
        "--batch-size",
        str(BATCH),
        "--seed",
        str(SEED),
        *args,
    ]
    done = subprocess.run(cmd, env=trainer_env(env), cwd=REPO, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"trainer failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return json_records(done.stdout)


class Gang:
    """One side of the comparison: a launcher and its workers, run in their own session, paused
    and resumed as a whole (SIGSTOP/SIGCONT to every process of the tree), its `train` log lines
    collected as (end time, seconds per step) windows."""

    def __init__(self, name: str, cmd: list[str], env: dict):
        self.name = name
        self.windows: list[tuple[float, float]] = []  # (end time, seconds per step)
        self.last_step = 0
        self._stderr = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            cmd,
            env=env,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, name=f"bench-{name}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            for record in json_records(line):
                if record.get("message") == "train":
                    ended = datetime.fromisoformat(record["time"].replace("Z", "+00:00")).timestamp()
                    self.windows.append((ended, float(record["step_seconds"])))
                    self.last_step = int(record["step"])

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            self._stderr.seek(0)
            raise SystemExit(f"{self.name} exited {self.proc.returncode}:\n{self._stderr.read()[-3000:]}")

    def signal(self, signum: int) -> None:
        for pid in process_tree(self.proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def cpu_seconds(self) -> float:
        """CPU time used so far by every live process of the gang, all threads (launcher and
        agent included: their polling and the heartbeat are part of what a side costs)."""
        total = 0
        for pid in process_tree(self.proc.pid):
            with contextlib.suppress(OSError, IndexError, ValueError):
                with open(f"/proc/{pid}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
                total += int(fields[11]) + int(fields[12])  # utime, stime
        return total / os.sysconf("SC_CLK_TCK")

    def close(self) -> None:
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGKILL)
        self.proc.wait()
        self._stderr.close()


def process_tree(root: int) -> list[int]:
    """`root` and every process below it (the elastic agent starts its workers in new sessions,
    so a process group would miss them)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    parent = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def start_gangs(nproc: int, window: int) -> tuple[Gang, Gang]:
    env = trainer_env({"PYTHONUNBUFFERED": "1"})
    trainer_cmd = [sys.executable, "-m", "trainer", "--model", MODEL, "--data", DATA]
    trainer_cmd += ["--batch-size", str(BATCH), "--seed", str(SEED), "--steps", str(ENDLESS)]
    trainer_cmd += ["--log-every", str(window), "--nproc-per-node", str(nproc)]
    from trainer.cluster import free_port

    plain_cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc)]
    plain_cmd += ["--monitor-interval", "0.1", "--start-method", "spawn", "--master-addr", "127.0.0.1"]
    plain_cmd += ["--master-port", str(free_port()), os.path.join(REPO, "bench", "plain_ddp.py")]
    plain_cmd += ["--steps", str(ENDLESS), "--window", str(window), "--batch-size", str(BATCH)]
    plain_cmd += ["--seed", str(SEED)]
    return Gang("trainer", trainer_cmd, env), Gang("plain", plain_cmd, env)


ENDLESS = 10**7  # both sides run until the bench kills them
WARM_WINDOWS = 3  # per side: start-up, DDP's bucket rebuild, the first steps


def alternate(
    gangs: tuple[Gang, Gang], slices: int, windows_per_slice: int, window: int
) -> list[list[list[float]]]:
    """Run one gang at a time (the other stopped) for `slices` slices each, alternating; a slice
    lasts until its gang logged `windows_per_slice` whole windows after the one cut by the resume
    (so a slice is a few seconds whatever the load). Return per gang and slice the step times of
    the windows that lay wholly inside the slice, and per gang its CPU seconds per step."""
    while any(len(g.windows) < WARM_WINDOWS for g in gangs):  # both start up and warm up together
        for gang in gangs:
            gang.check_alive()
        time.sleep(0.2)
    runs: list[list[tuple[float, float]]] = [[], []]  # per gang: (resumed at, paused at)
    frozen: list[list[tuple[float, int]]] = [[], []]  # per gang, at each pause: (CPU seconds, step)
    gangs[1].signal(signal.SIGSTOP)
    for index in range(2 * slices):
        side = index % 2
        gang = gangs[side]
        wanted = len(gang.windows) + windows_per_slice + 1
        gang.signal(signal.SIGCONT)
        resumed = time.time()
        while len(gang.windows) < wanted:
            gang.check_alive()
            time.sleep(0.01)
        gang.signal(signal.SIGSTOP)
        runs[side].append((resumed, time.time()))
        frozen[side].append((gang.cpu_seconds(), gang.last_step))
    per_slice: list[list[list[float]]] = [[], []]
    for side, gang in enumerate(gangs):
        for resumed, paused in runs[side]:
            inside = [
                seconds
                for ended, seconds in gang.windows
                if resumed + MARGIN <= ended - seconds * window and ended <= paused
            ]
            per_slice[side].append(inside)
    # A frozen gang uses no CPU: between its first and last pause, its CPU time went to the steps
    # it logged in its slices (the bit of a step run after the last line read before each pause
    # is there at both ends, so it cancels).
    cpu_per_step = [(f[-1][0] - f[0][0]) / max(1, f[-1][1] - f[0][1]) for f in frozen]
    return per_slice, cpu_per_step


MARGIN = 0.05  # seconds: a window that starts this close after a SIGCONT is not counted


def slice_ratios(per_slice: list[list[list[float]]]) -> list[float]:
    """Each trainer slice against the mean of the plain slices just before and after it: a load
    trend across the three cancels out. Slices without a whole window are left out."""
    trainer, plain = ([statistics.mean(s) if s else None for s in side] for side in per_slice)
    ratios = []
    for index, value in enumerate(trainer):
        neighbours = [plain[i] for i in (index - 1, index) if 0 <= i < len(plain) and plain[i] is not None]
        if value is not None and neighbours:
            ratios.append(value / statistics.mean(neighbours))
    return ratios


def checkpoint_stalls(root: str, nproc: int, sync: bool, env: dict | None = None) -> tuple[float, int]:
    """Median seconds the loop stalled per checkpoint (and checkpoint size in bytes)."""
    args = [
        "--steps",
        "40",
        "--checkpoint-every-steps",
        "5",
        "--keep-last",
        "2",
        "--log-every",
        "40",
        "--nproc-per-node",
        str(nproc),
        "--checkpoint-uri",
        root,
    ]
    if sync:
        args.append("--synchronous-checkpoints")
    records = run_trainer(args, env)
    saves = [r for r in records if r.get("message") == "checkpoint committed"][
        :-1
    ]  # last one is the final save
    return statistics.median(r["blocking_seconds"] for r in saves), saves[0]["bytes"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--window", type=int, default=3, help="steps per timed window")
    parser.add_argument("--slices", type=int, default=12, help="slices per side, alternating")
    parser.add_argument("--windows-per-slice", type=int, default=3)
    parser.add_argument("--no-checkpoints", action="store_true", help="only the step-time comparison")
    opts = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.path.insert(0, REPO)

    load_before = os.getloadavg()
    gangs = start_gangs(opts.nproc, opts.window)
    try:
        per_slice, cpu_per_step = alternate(gangs, opts.slices, opts.windows_per_slice, opts.window)
    finally:
        for gang in gangs:
            gang.close()
    load_after = os.getloadavg()
    ratios = slice_ratios(per_slice)
    trainer_windows, plain_windows = ([w for s in side for w in s] for side in per_slice)
    quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
    rows = [
        (
            "step time, trainer (DDP engine), median window",
            f"{statistics.median(trainer_windows) * 1000:.2f} ms",
            f"{len(trainer_windows)} windows of {opts.window} steps",
        ),
        (
            "step time, plain DDP loop, median window",
            f"{statistics.median(plain_windows) * 1000:.2f} ms",
            f"{len(plain_windows)} windows of {opts.window} steps",
        ),
        (
            "  ratio trainer / plain, median of slices",
            f"{statistics.median(ratios):.3f}",
            f"{len(ratios)} slices, quartiles {quartiles[0]:.3f} .. {quartiles[2]:.3f}",
        ),
        ("CPU time per step, trainer (all its processes)", f"{cpu_per_step[0] * 1000:.2f} ms", ""),
        ("CPU time per step, plain DDP (all its processes)", f"{cpu_per_step[1] * 1000:.2f} ms", ""),
        (
            "  ratio trainer / plain, CPU time",
            f"{cpu_per_step[0] / cpu_per_step[1]:.3f}",
            "slices 2.. of each side",
        ),
    ]
    if opts.no_checkpoints:
        _print_table(opts, rows, load_before, load_after)
        return

    with tempfile.TemporaryDirectory() as tmp:
        targets = [("local", f"file://{tmp}/bg", f"file://{tmp}/sync", None)]
        try:
            from google.auth.credentials import AnonymousCredentials
            from google.cloud import storage as gcs

            from devstack.gcs import start_gcs

            emulator = start_gcs(port=0)
            os.environ["STORAGE_EMULATOR_HOST"] = emulator.url
            gcs.Client(project="relaunch-dev", credentials=AnonymousCredentials()).create_bucket("bench")
            targets.append(
                ("gcs emulator", "gs://bench/bg", "gs://bench/sync", {"STORAGE_EMULATOR_HOST": emulator.url})
            )
        except ImportError:
            emulator = None
        for label, bg_root, sync_root, env in targets:
            background, size = checkpoint_stalls(bg_root, opts.nproc, sync=False, env=env)
            synchronous, _ = checkpoint_stalls(sync_root, opts.nproc, sync=True, env=env)
            rows.append(
                (
                    f"checkpoint stall, background upload ({label})",
                    f"{background * 1000:.2f} ms",
                    f"{size / 1e6:.1f} MB",
                )
            )
            rows.append((f"checkpoint stall, synchronous save ({label})", f"{synchronous * 1000:.2f} ms", ""))
            rows.append(("  ratio synchronous / background", f"{synchronous / background:.1f}", ""))
        if emulator is not None:
            emulator.stop()
    _print_table(opts, rows, load_before, load_after)


def _print_table(opts, rows, load_before, load_after) -> None:
    import torch

    where = f"GPU {torch.cuda.get_device_name(0)}, NCCL" if torch.cuda.is_available() else "CPU, gloo"
    print(
        f"\n{where}, {opts.nproc} processes, model {MODEL.split(':')[1]}, batch {BATCH}/rank, "
        f"OMP_NUM_THREADS=1, {opts.slices} alternating slices of {opts.windows_per_slice} windows per side; "
        f"load average {load_before[0]:.2f} before, {load_after[0]:.2f} after the step-time part\n"
    )
    width = max(len(r[0]) for r in rows)
    print(f"{'measure'.ljust(width)} | value      | note")
    print(f"{'-' * width}-|------------|------")
    for name, value, note in rows:
        print(f"{name.ljust(width)} | {value.ljust(10)} | {note}")


if __name__ == "__main__":
    main()
