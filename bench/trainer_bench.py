"""Trainer overhead, printed as a table (CPU with gloo, or the GPUs present with NCCL):

1. step time of `python -m trainer` (DDP engine) vs. a minimal hand-written DDP loop on the
   same model, data and batch size (ratio: trainer / plain). The two are interleaved: round i
   runs one trainer window and one plain window back to back (alternating which goes first), so
   a swing of the machine's load hits both sides of a round; the overhead is the median of the
   rounds' ratios, printed with the load average before and after;
2. training-loop stall per checkpoint with the background upload vs. a synchronous save
   (ratio: synchronous / background), to a local path and, if devstack is importable, to the
   GCS emulator (`--no-checkpoints` skips this part).

Usage: .venv/bin/python bench/trainer_bench.py [--nproc 2] [--steps 60] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta

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


def trainer_step_seconds(nproc: int, steps: int, window: int) -> float:
    records = run_trainer(["--steps", str(steps), "--log-every", str(window), "--nproc-per-node", str(nproc)])
    windows = [r["step_seconds"] for r in records if r.get("message") == "train"]
    return statistics.median(windows[1:])  # the first window includes warm-up


def interleaved_step_seconds(nproc: int, steps: int, window: int, rounds: int) -> list[tuple[float, float]]:
    """(trainer, plain) median step seconds per round; odd rounds run the plain loop first."""
    results = []
    for index in range(rounds):
        if index % 2:
            plain = plain_ddp_step_seconds(nproc, steps, window)
            trainer = trainer_step_seconds(nproc, steps, window)
        else:
            trainer = trainer_step_seconds(nproc, steps, window)
            plain = plain_ddp_step_seconds(nproc, steps, window)
        print(
            f"round {index + 1}: trainer {trainer * 1000:.2f} ms, plain {plain * 1000:.2f} ms, "
            f"ratio {trainer / plain:.3f}, load {os.getloadavg()[0]:.2f}",
            flush=True,
        )
        results.append((trainer, plain))
    return results


def _plain_ddp_worker(rank: int, world: int, port: int, steps: int, window: int, out_path: str) -> None:
    """The smallest honest DDP loop: same model, data, optimizer and batch size, nothing else
    (on a GPU: NCCL, bf16 autocast and fused AdamW, as a user would write it)."""
    import contextlib

    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from trainer.examples import gpt

    on_gpu = torch.cuda.is_available()
    device = torch.device("cuda", rank) if on_gpu else torch.device("cpu")
    if on_gpu:
        torch.cuda.set_device(device)
    torch.set_num_threads(1)
    backend = "nccl" if on_gpu else "gloo"
    dist.init_process_group(backend, rank=rank, world_size=world, timeout=timedelta(minutes=5))
    torch.manual_seed(SEED)
    model = DistributedDataParallel(
        gpt.build_larger_model().to(device), device_ids=[rank] if on_gpu else None
    )
    data = gpt.build_larger_dataset()
    fused = {"fused": True} if on_gpu else {}
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01, **fused)
    autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if on_gpu else contextlib.nullcontext
    order = torch.randperm(len(data), generator=torch.Generator().manual_seed(SEED)).tolist()
    times, start = [], time.perf_counter()
    for step in range(steps):
        offset = (step * BATCH * world + rank * BATCH) % (len(data) - BATCH)
        samples = [data[i] for i in order[offset : offset + BATCH]]
        inputs, targets = (torch.stack(c).to(device) for c in zip(*samples))
        with autocast():
            loss = model(inputs, targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        loss.item()
        if (step + 1) % window == 0:
            now = time.perf_counter()
            times.append((now - start) / window)
            start = now
    if rank == 0:
        with open(out_path, "w") as fh:
            json.dump(times, fh)
    dist.destroy_process_group()


def plain_ddp_step_seconds(nproc: int, steps: int, window: int) -> float:
    import torch.multiprocessing as mp

    from trainer.cluster import free_port

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "times.json")
        mp.spawn(_plain_ddp_worker, args=(nproc, free_port(), steps, window, out), nprocs=nproc, join=True)
        with open(out) as fh:
            return statistics.median(json.load(fh)[1:])


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
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--window", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved trainer/plain rounds")
    parser.add_argument("--no-checkpoints", action="store_true", help="only the step-time comparison")
    opts = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.path.insert(0, REPO)

    load_before = os.getloadavg()
    rows = []
    pairs = interleaved_step_seconds(opts.nproc, opts.steps, opts.window, opts.rounds)
    ratios = [trainer / plain for trainer, plain in pairs]
    rows.append(
        (
            "step time, trainer (DDP engine), median of rounds",
            f"{statistics.median(p[0] for p in pairs) * 1000:.2f} ms",
            "",
        )
    )
    rows.append(
        (
            "step time, plain DDP loop, median of rounds",
            f"{statistics.median(p[1] for p in pairs) * 1000:.2f} ms",
            "",
        )
    )
    rows.append(
        (
            "  ratio trainer / plain, median of rounds",
            f"{statistics.median(ratios):.3f}",
            " ".join(f"{r:.3f}" for r in ratios),
        )
    )
    load_after = os.getloadavg()
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
        f"OMP_NUM_THREADS=1, {opts.rounds} interleaved rounds of {opts.steps} steps; load average "
        f"{load_before[0]:.2f} before, {load_after[0]:.2f} after the step-time rounds\n"
    )
    width = max(len(r[0]) for r in rows)
    print(f"{'measure'.ljust(width)} | value      | note")
    print(f"{'-' * width}-|------------|------")
    for name, value, note in rows:
        print(f"{name.ljust(width)} | {value.ljust(10)} | {note}")


if __name__ == "__main__":
    main()
