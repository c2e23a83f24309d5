"""What "the same optimisation" means when a job shrinks and grows back (issue 16), measured.

For each engine (DDP, DeepSpeed ZeRO-2), on CPU with the built-in tiny GPT and a fixed global
batch (--global-batch-size), it runs:
  (a) an unshrunk run at world size W (default 4, one node x W processes) to step N;
  (b) the same run stopped with a checkpoint at step k, resumed on W/2 ranks (twice the gradient
      accumulation) until step m, then grown back to W ranks until step N;
  (c) an unshrunk run with another seed.
It prints, for (b) vs (a) beside (c) vs (a): the final-loss difference and the max-abs and
relative-L2 difference of the final parameters; checks that (b) ends at the same optimizer step
and data position as (a); and writes the loss curves of (a), (b), (c) as a PNG (and a CSV).

Usage: .venv/bin/python bench/elastic_resume.py [--engines ddp deepspeed] [--steps 40]
       [--stop-at 10] [--grow-at 25] [--world 4] [--out DIR] [--no-dropout]
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
import time

import torch
from trainer_logs import json_records  # bench/ is this script's directory

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BATCH = 4
GLOBAL_BATCH = 16
COMMON = ["--batch-size", str(BATCH), "--global-batch-size", str(GLOBAL_BATCH), "--lr", "3e-3"]
COMMON += ["--warmup-steps", "8", "--log-every", "1", "--keep-last", "1"]
MODEL: list[str] = []  # --no-dropout sets the example model without dropout


def run_trainer(engine: str, nproc: int, steps: int, seed: int, root: str, attempt: int) -> list[dict]:
    args = [
        *MODEL,
        "--engine",
        engine,
        "--steps",
        str(steps),
        "--seed",
        str(seed),
        "--nproc-per-node",
        str(nproc),
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RELAUNCH_", "CLUSTER_SPEC", "MASTER_"))}
    env.update(
        {
            "OMP_NUM_THREADS": "1",
            "DS_ACCELERATOR": "cpu",
            "PYTHONPATH": REPO,
            "RELAUNCH_JOB_ID": "elastic-bench",
            "RELAUNCH_ATTEMPT": str(attempt),
            "RELAUNCH_CHECKPOINT_URI": f"file://{root}",
        }
    )
    command = [sys.executable, "-m", "trainer", *COMMON, *args]
    done = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"trainer failed ({done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-2000:]}")
    return json_records(done.stdout)


def final_parameters(engine: str, root: str, step: int) -> dict[str, torch.Tensor]:
    step_dir = os.path.join(root, f"step-{step:010d}")
    if engine == "ddp":
        return torch.load(os.path.join(step_dir, "model.pt"), map_location="cpu", weights_only=True)["model"]
    path = os.path.join(step_dir, "deepspeed", f"step-{step:010d}", "mp_rank_00_model_states.pt")
    return torch.load(path, map_location="cpu", weights_only=False)["module"]


def parameter_difference(left: dict, right: dict) -> tuple[float, float]:
    """(max |l - r| over all parameters, ||l - r||_2 / ||l||_2 over all parameters concatenated)."""
    max_abs, diff_sq, norm_sq = 0.0, 0.0, 0.0
    for name, value in left.items():
        delta = (value.double() - right[name].double()).flatten()
        max_abs = max(max_abs, delta.abs().max().item())
        diff_sq += delta.pow(2).sum().item()
        norm_sq += value.double().pow(2).sum().item()
    return max_abs, (diff_sq / norm_sq) ** 0.5


def losses(records: list[dict]) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in records if r.get("message") == "train"}


def completed(records: list[dict]) -> dict:
    return next(r for r in records if r.get("message") == "training completed")


def measure(engine: str, args, workdir: str) -> dict:
    world, shrunk = args.world, args.world // 2
    roots = {name: os.path.join(workdir, engine, name) for name in ("a", "b", "c")}
    started = time.monotonic()
    a = run_trainer(engine, world, args.steps, 1234, roots["a"], 1)
    c = run_trainer(engine, world, args.steps, 4321, roots["c"], 1)
    b1 = run_trainer(engine, world, args.stop_at, 1234, roots["b"], 1)
    b2 = run_trainer(engine, shrunk, args.grow_at, 1234, roots["b"], 2)
    b3 = run_trainer(engine, world, args.steps, 1234, roots["b"], 3)
    seconds = time.monotonic() - started
    b = b1 + b2 + b3
    end_a, end_b, end_c = completed(a), completed(b3), completed(c)
    same_place = all(
        end_a[key] == end_b[key] for key in ("step", "optimizer_steps", "data_epoch", "data_consumed")
    )
    lr_a = {r["step"]: r["lr"] for r in a if r.get("message") == "train"}
    lr_b = {r["step"]: r["lr"] for r in b if r.get("message") == "train"}
    params = {name: final_parameters(engine, roots[name], args.steps) for name in roots}
    b_max, b_rel = parameter_difference(params["a"], params["b"])
    c_max, c_rel = parameter_difference(params["a"], params["c"])
    resumes = [r for r in b if r.get("message") == "resumed"]
    return {
        "engine": engine,
        "curves": {"a": losses(a), "b": losses(b), "c": losses(c)},
        "final_loss": {k: float(v["final_loss"]) for k, v in (("a", end_a), ("b", end_b), ("c", end_c))},
        "b_vs_a": (abs(float(end_b["final_loss"]) - float(end_a["final_loss"])), b_max, b_rel),
        "c_vs_a": (abs(float(end_c["final_loss"]) - float(end_a["final_loss"])), c_max, c_rel),
        "same_place": same_place,
        "same_lr_schedule": lr_a == lr_b,
        "resumes": [
            (r["from_step"], r["saved_world_size"], r["world_size"], r["micro_steps_per_step"])
            for r in resumes
        ],
        "reshard_seconds": [
            r["load_seconds"] for r in b if r.get("message") == "checkpoint resharded to a new world size"
        ],
        "seconds": seconds,
    }


def write_curves(results: list[dict], out: str) -> str:
    csv_path = os.path.join(out, "elastic_resume_losses.csv")
    with open(csv_path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["engine", "run", "step", "loss"])
        for result in results:
            for run, curve in result["curves"].items():
                for step, loss in sorted(curve.items()):
                    writer.writerow([result["engine"], run, step, loss])
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: loss curves written as CSV only")
        return csv_path
    figure, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4), squeeze=False)
    labels = {"a": "(a) unshrunk", "b": "(b) shrunk then grown", "c": "(c) other seed"}
    styles = {"a": "-", "b": "--", "c": ":"}
    for axis, result in zip(axes[0], results):
        for run, curve in result["curves"].items():
            steps = sorted(curve)
            axis.plot(steps, [curve[s] for s in steps], styles[run], label=labels[run])
        axis.set_title(
            f"{result['engine']}: world {result['world']} -> {result['world'] // 2} -> {result['world']}"
        )
        axis.set_xlabel("optimizer step")
        axis.set_ylabel("training loss (mean over ranks)")
        axis.legend()
    figure.tight_layout()
    png_path = os.path.join(out, "elastic_resume_losses.png")
    figure.savefig(png_path, dpi=100)
    return png_path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", nargs="+", default=["ddp", "deepspeed"], choices=["ddp", "deepspeed"])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--stop-at", type=int, default=10)
    parser.add_argument("--grow-at", type=int, default=25)
    parser.add_argument("--world", type=int, default=4)
    parser.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "relaunch-elastic-bench"))
    parser.add_argument(
        "--no-dropout", action="store_true", help="tiny model without dropout: rounding differences only"
    )
    args = parser.parse_args()
    if args.no_dropout:
        MODEL.extend(["--model", "trainer.examples.gpt:build_model_without_dropout"])
    os.makedirs(args.out, exist_ok=True)
    results = []
    with tempfile.TemporaryDirectory(prefix="elastic-bench-") as workdir:
        for engine in args.engines:
            result = measure(engine, args, workdir)
            result["world"] = args.world
            results.append(result)
    print(
        f"{'no dropout; ' if args.no_dropout else ''}"
        f"global batch {GLOBAL_BATCH} (micro-batch {BATCH}/rank); (b): stop at {args.stop_at}, "
        f"{args.world // 2} ranks to {args.grow_at}, {args.world} ranks to {args.steps}"
    )
    header = (
        f"{'engine':10} {'compare':8} {'|d final loss|':>15} {'max |d param|':>14} {'rel L2 d param':>15}"
    )
    print(header)
    for r in results:
        for name, (loss, max_abs, rel) in (("(b)-(a)", r["b_vs_a"]), ("(c)-(a)", r["c_vs_a"])):
            print(f"{r['engine']:10} {name:8} {loss:15.3e} {max_abs:14.3e} {rel:15.3e}")
    for r in results:
        print(
            f"{r['engine']}: final losses a={r['final_loss']['a']:.6f} b={r['final_loss']['b']:.6f} "
            f"c={r['final_loss']['c']:.6f}; same step/optimizer steps/data position: {r['same_place']}; "
            f"same LR at every step: {r['same_lr_schedule']}; resumes (from, saved size, size, "
            f"micro-steps): {r['resumes']}; reshard load seconds: {r['reshard_seconds']}; "
            f"wall {r['seconds']:.0f}s"
        )
    print(f"loss curves: {write_curves(results, args.out)}")


if __name__ == "__main__":
    main()
