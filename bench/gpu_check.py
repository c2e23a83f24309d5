"""GPU check of the trainer: one command, a few minutes, on the GPUs of this machine.

    python bench/gpu_check.py [--out DIR] [--steps 30] [--skip-bench]

What it runs (each part goes on if an earlier one failed; figures go to DIR/gpu_check.json as
they come, so a run cut short still leaves what it measured):

1. environment: torch, CUDA, NCCL versions, the GPUs and their compute capability;
2. DDP on every GPU present (NCCL), `--deterministic`: two uninterrupted runs (bitwise equal?),
   two runs without `--deterministic` (equal or not: what the mode buys), a run preempted with
   SIGTERM at a step and resumed, and a run killed with kill -9 between a checkpoint's shards and
   its commit marker and resumed: both must end bitwise equal to the uninterrupted run. Step time
   and checkpoint stall (the loop's `blocking_seconds`) from the trainer's own log lines;
3. DeepSpeed ZeRO-2 (when `deepspeed` imports), the same uninterrupted and SIGTERM runs, and how
   long its engine took to start (it must not compile anything at the first step);
4. peer loss: two nodes, one process each; node 1 is frozen (SIGSTOP, no socket closed) at a step
   and the time until node 0 exits with the peer-loss record is measured. NCCL when there are two
   GPUs; with one GPU NCCL cannot place two ranks on it, so the nodes run on gloo (CPU) and the
   figure is the heartbeat's, said so in the output;
5. bench/trainer_bench.py (trainer vs. plain DDP step time, alternating slices), unless --skip-bench.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = [
    "--model",
    "trainer.examples.gpt:build_larger_model",
    "--data",
    "trainer.examples.gpt:build_larger_dataset",
]
COMMON = ["--batch-size", "8", "--lr", "3e-4", "--seed", "1234", "--log-every", "5", "--grace-seconds", "30"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Node:
    """One `python -m trainer` launcher; its JSON log lines are collected by a thread."""

    def __init__(self, args: list[str], env: dict[str, str], log_path: str):
        self.log = open(log_path, "w")  # closed when the reader ends
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "trainer", *args],
            cwd=REPO,
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.records: list[dict] = []
        self.tail: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.log.write(line)
            self.tail = [*self.tail[-40:], line.rstrip()]
            if line.startswith("{"):
                try:
                    self.records.append(json.loads(line))
                except ValueError:
                    pass
        self.log.close()

    def find(self, message: str) -> list[dict]:
        return [r for r in list(self.records) if r.get("message") == message]

    def wait_for(self, message: str, timeout: float = 180) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.find(message)
            if found:
                return found[0]
            if self.proc.poll() is not None and not self._reader.is_alive():
                break
            time.sleep(0.05)
        raise RuntimeError(f"no {message!r} within {timeout}s:\n" + "\n".join(self.tail[-15:]))

    def wait(self, timeout: float = 300) -> int:
        code = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=10)
        return code

    def family(self):
        import psutil

        try:
            root = psutil.Process(self.proc.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def signal_all(self, sig: int) -> None:
        for proc in self.family():
            try:
                os.kill(proc.pid, sig)
            except ProcessLookupError:
                pass

    def kill_tree(self) -> None:
        self.signal_all(signal.SIGKILL)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass


class Check:
    def __init__(self, out_dir: str, steps: int):
        self.out_dir = out_dir
        self.steps = steps
        self.work = tempfile.mkdtemp(prefix="gpu-check-")
        self.results: dict = {}
        self.runs = 0

    def save(self) -> None:
        with open(os.path.join(self.out_dir, "gpu_check.json"), "w") as fh:
            json.dump(self.results, fh, indent=1, default=str)

    def env(self, attempt: int, root: str, extra: dict | None = None) -> dict:
        env = {
            k: v for k, v in os.environ.items() if not k.startswith(("RELAUNCH_", "CLUSTER_SPEC", "MASTER_"))
        }
        site = env.get("PYTHONPATH", "")
        env.update(
            {
                "PYTHONPATH": REPO + (os.pathsep + site if site else ""),
                "PYTHONUNBUFFERED": "1",
                "RELAUNCH_JOB_ID": "gpu-check",
                "RELAUNCH_ATTEMPT": str(attempt),
                "RELAUNCH_CHECKPOINT_URI": root,
                "TMPDIR": self.work,
            }
        )
        env.update(extra or {})
        return env

    def start(self, args: list[str], root: str, attempt: int = 1, extra: dict | None = None) -> Node:
        self.runs += 1
        log_path = os.path.join(self.work, f"run-{self.runs:02d}.log")
        return Node(args, self.env(attempt, root, extra), log_path)

    def run(self, args: list[str], root: str, attempt: int = 1) -> dict:
        node = self.start(args, root, attempt)
        code = node.wait()
        if code != 0:
            raise RuntimeError(f"exit {code}:\n" + "\n".join(node.tail[-20:]))
        return summary(node)

    def root(self, name: str) -> str:
        return f"file://{self.work}/{name}"


def summary(node: Node) -> dict:
    done = node.find("training completed")[0]
    start = (node.find("numerics") or [{}])[0]
    steps = [r["step_seconds"] for r in node.find("train")][1:]  # the first window warms up
    stalls = [r["blocking_seconds"] for r in node.find("checkpoint committed")][:-1]  # not the final
    return {
        "params_sha256": done["params_sha256"],
        "final_loss": done["final_loss"],
        "precision": start.get("precision"),
        "backend": start.get("backend"),
        "median_step_seconds": statistics.median(steps) if steps else None,
        "median_checkpoint_stall_seconds": statistics.median(stalls) if stalls else None,
    }


def section(check: Check, name: str, body) -> None:
    started = time.monotonic()
    print(f"== {name}", flush=True)
    try:
        check.results[name] = body()
    except Exception as exc:
        check.results[name] = {"error": f"{type(exc).__name__}: {exc}"[-3000:]}
    check.results[name]["seconds"] = round(time.monotonic() - started, 1)
    print(json.dumps(check.results[name], indent=1, default=str), flush=True)
    check.save()


def environment() -> dict:
    import torch

    gpus = [
        {"name": torch.cuda.get_device_name(i), "capability": list(torch.cuda.get_device_capability(i))}
        for i in range(torch.cuda.device_count())
    ]
    nccl = torch.cuda.nccl.version() if torch.cuda.is_available() else None
    try:
        import deepspeed

        ds_version = deepspeed.__version__
    except Exception as exc:  # reported, not fatal: the ZeRO part says it was skipped
        ds_version = f"not importable: {exc}"
    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": ".".join(map(str, nccl)) if isinstance(nccl, tuple) else nccl,
        "gpus": gpus,
        "deepspeed": ds_version,
        "load_average": os.getloadavg(),
    }


def resume_checks(check: Check, engine: list[str], label: str, with_kill: bool, with_nondeterministic: bool):
    nproc = max(1, _gpu_count())
    steps, every = check.steps, max(2, check.steps // 3)
    base = [
        *MODEL,
        *COMMON,
        *engine,
        "--steps",
        str(steps),
        "--checkpoint-every-steps",
        str(every),
        "--nproc-per-node",
        str(nproc),
    ]
    det = [*base, "--deterministic"]
    out: dict = {"nproc": nproc, "steps": steps, "checkpoint_every": every}
    first = check.run(det, check.root(f"{label}-a"))
    second = check.run(det, check.root(f"{label}-b"))
    out["uninterrupted"] = first
    out["two_deterministic_runs_bitwise_equal"] = first["params_sha256"] == second["params_sha256"]
    if with_nondeterministic:
        x = check.run(base, check.root(f"{label}-x"))
        y = check.run(base, check.root(f"{label}-y"))
        out["two_default_runs_bitwise_equal"] = x["params_sha256"] == y["params_sha256"]
        out["default_median_step_seconds"] = x["median_step_seconds"]

    # SIGTERM at a step between checkpoints, emergency checkpoint, resume.
    hold = every + every // 2
    root = check.root(f"{label}-term")
    node = check.start(det, root, extra={"RELAUNCH_TEST_HOLD_AT_STEP": str(hold)})
    node.wait_for("test hook: holding for SIGTERM")
    node.signal_all(signal.SIGTERM)
    code = node.wait()
    resumed = check.run(det, root, attempt=2)
    out["sigterm"] = {
        "at_step": hold,
        "exit_code": code,
        "resume_bitwise_equal": resumed["params_sha256"] == first["params_sha256"],
    }
    if with_kill:
        # kill -9 after step 2*every's shards are uploaded and before its commit marker.
        at = 2 * every
        root = check.root(f"{label}-kill")
        node = check.start(det, root, extra={"RELAUNCH_TEST_PAUSE_BEFORE_COMMIT": str(at)})
        node.wait_for("test hook: paused before commit marker")
        node.kill_tree()
        node2 = check.start(det, root, attempt=2)
        code2 = node2.wait()
        from_step = (node2.find("resumed") or [{}])[0].get("from_step")
        after = summary(node2) if code2 == 0 else {}
        out["kill9"] = {
            "killed_before_marker_of_step": at,
            "resumed_from_step": from_step,
            "exit_code": code2,
            "resume_bitwise_equal": after.get("params_sha256") == first["params_sha256"],
        }
    return out


def zero2(check: Check) -> dict:
    try:
        import deepspeed  # noqa: F401
    except Exception as exc:
        return {"skipped": f"deepspeed not importable: {exc}"}
    started = time.monotonic()
    out = resume_checks(check, ["--engine", "deepspeed", "--zero-stage", "2"], "zero2", False, False)
    out["wall_seconds"] = round(time.monotonic() - started, 1)
    return out


def _gpu_count() -> int:
    import torch

    return torch.cuda.device_count()


def peer_loss(check: Check) -> dict:
    gpus = _gpu_count()
    port = free_port()
    root = check.root("peer")
    mode = (
        "nccl, one GPU per node"
        if gpus >= 2
        else f"gloo on CPU ({gpus} GPU: NCCL cannot put two ranks on one)"
    )
    args = [*COMMON, "--steps", "40", "--peer-timeout", "10", "--nproc-per-node", "1"]
    nodes = []
    for rank in range(2):
        extra = {
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "NNODES": "2",
            "NODE_RANK": str(rank),
            "RELAUNCH_TEST_HOLD_AT_STEP": "5",
            "RELAUNCH_TEST_HOLD_RANK": "1",
            "CUDA_VISIBLE_DEVICES": str(rank) if gpus >= 2 else "",
        }
        nodes.append(check.start(args, root, extra=extra))
    nodes[1].wait_for("test hook: holding for SIGTERM")
    nodes[1].signal_all(signal.SIGSTOP)
    frozen_at = time.monotonic()
    try:
        code = nodes[0].wait(timeout=120)
        detected = time.monotonic() - frozen_at
    finally:
        nodes[1].kill_tree()
    lost = nodes[0].find("peer lost")
    return {
        "mode": mode,
        "peer_timeout_seconds": 10,
        "survivor_exit_code": code,
        "seconds_from_freeze_to_survivor_exit": round(detected, 2),
        "peer_lost_log": lost[0] if lost else None,
    }


def bench(check: Check) -> dict:
    nproc = max(1, _gpu_count())
    command = [sys.executable, os.path.join(REPO, "bench", "trainer_bench.py"), "--nproc", str(nproc)]
    command += ["--window", "10", "--slices", "12", "--no-checkpoints"]
    done = subprocess.run(
        command, cwd=REPO, env=check.env(1, ""), capture_output=True, text=True, timeout=400
    )
    return {"exit_code": done.returncode, "output": done.stdout[-2500:] + done.stderr[-1500:]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT") or ".")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--skip-bench", action="store_true")
    parser.add_argument("--tiny", action="store_true", help="the small example model (a quick try on CPU)")
    parser.add_argument("--only", action="append", help="run only these parts (environment always)")
    opts = parser.parse_args()
    os.makedirs(opts.out, exist_ok=True)
    if opts.tiny:
        MODEL[:] = []
    check = Check(opts.out, opts.steps)
    parts = {
        "ddp": lambda: resume_checks(check, ["--engine", "ddp"], "ddp", True, True),
        "zero2": lambda: zero2(check),
        "peer_loss": lambda: peer_loss(check),
        "bench": lambda: bench(check),
    }
    if opts.skip_bench:
        parts.pop("bench")
    section(check, "environment", environment)
    for name, body in parts.items():
        if not opts.only or name in opts.only:
            section(check, name, body)
    with tarfile.open(os.path.join(opts.out, "run-logs.tgz"), "w:gz") as tar:
        for name in sorted(os.listdir(check.work)):
            if name.endswith(".log"):
                tar.add(os.path.join(check.work, name), arcname=name)
    print(
        f"logs of every run: {check.work} (and run-logs.tgz); results: {os.path.join(opts.out, 'gpu_check.json')}"
    )


if __name__ == "__main__":
    main()
