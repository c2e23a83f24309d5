"""The plain side of bench/trainer_bench.py: the smallest honest DDP loop on the trainer's example
model, started by torchrun (the same elastic agent, static rendezvous and spawned workers as the
trainer's launcher), logging a window the way the trainer does.

Same model, data, batch size, optimizer and seed as the trainer; threads come from
OMP_NUM_THREADS, as in the trainer's workers. Every `--window` steps rank 0 prints one JSON line
with the window's mean step time, after averaging the loss over the ranks (the trainer's `train`
log line costs the same all-reduce). On a GPU: NCCL, bf16 autocast and fused AdamW, as a user
would write it.

    torchrun --nproc-per-node 2 bench/plain_ddp.py --steps 1000 --window 4
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from datetime import UTC, datetime, timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from trainer.examples import gpt  # found through the repository root put on the path above


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--window", type=int, required=True)
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--seed", type=int, required=True)
    opts = parser.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    on_gpu = torch.cuda.is_available()
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if on_gpu else torch.device("cpu")
    if on_gpu:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if on_gpu else "gloo", timeout=timedelta(minutes=10))
    torch.manual_seed(opts.seed)
    model = DistributedDataParallel(
        gpt.build_larger_model().to(device), device_ids=[device.index] if on_gpu else None
    )
    data = gpt.build_larger_dataset()
    fused = {"fused": True} if on_gpu else {}
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01, **fused)
    autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if on_gpu else contextlib.nullcontext
    order = torch.randperm(len(data), generator=torch.Generator().manual_seed(opts.seed)).tolist()
    batch = opts.batch_size
    start = time.monotonic()
    for step in range(1, opts.steps + 1):
        offset = ((step - 1) * batch * world + rank * batch) % (len(data) - batch)
        samples = [data[i] for i in order[offset : offset + batch]]
        inputs, targets = (torch.stack(column).to(device) for column in zip(*samples, strict=True))
        with autocast():
            loss = model(inputs, targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step % opts.window == 0:
            if on_gpu:
                torch.cuda.synchronize(device)
            elapsed = time.monotonic() - start
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            mean_loss = (mean / world).item()
            if rank == 0:
                line = {
                    "message": "train",
                    "step": step,
                    "loss": mean_loss,
                    "step_seconds": round(elapsed / opts.window, 5),
                    "time": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
                }
                print(json.dumps(line), flush=True)
            start = time.monotonic()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
