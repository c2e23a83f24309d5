"""How long `relaunch controller` takes from start to ready, this tree beside an older commit.

Cloud Run starts an instance on demand and after every deploy and sends it work once `/readyz`
answers; until then the instance costs money and its requests wait. Against one devstack, each
round starts the controller of each tree in turn (`python -m controller.cli controller`, a fresh
SQLite state store, the same environment) and measures from the process start to the first 200
from `/readyz` ("ready": standby or leader) and to "ready: leader" (subscriptions open, it acts),
then stops it. One warm-up start per tree first (bytecode compiled), not counted.

    .venv/bin/python bench/startup.py [--old /tmp/old-aea] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.scale import _start_devstack  # noqa: E402  (the path above makes `bench` importable)


def _readyz(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as reply:
            return reply.read().decode()
    except urllib.error.HTTPError:
        return None  # up, not ready
    except OSError:
        return None  # not listening yet


def start_once(tree: Path, env: dict[str, str], workdir: Path, port: int) -> tuple[float, float]:
    """(seconds to the first ready, seconds to "ready: leader") of one controller start."""
    state = tempfile.mkdtemp(dir=workdir)
    environment = {
        **os.environ,
        **env,
        "PORT": str(port),
        "PYTHONPATH": str(tree),
        "RELAUNCH_STATE_STORE": f"sqlite:///{state}/state.db",
        "XDG_CONFIG_HOME": state,  # no user configuration from this machine
        "XDG_STATE_HOME": state,
    }
    log = open(Path(state) / "controller.log", "wb")
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "controller.cli", "controller"],
        cwd=str(tree),
        env=environment,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    ready = None
    try:
        deadline = started + 120
        while time.perf_counter() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{tree}: the controller exited; see {log.name}")
            answer = _readyz(port)
            if answer is not None and ready is None:
                ready = time.perf_counter() - started
            if answer is not None and "leader" in answer:
                return ready or 0.0, time.perf_counter() - started
            time.sleep(0.01)  # polling another process's HTTP endpoint
        raise RuntimeError(f"{tree}: not leading after 120 s; see {log.name}")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--old", type=Path, default=None, help="a checkout of the older commit")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    trees = [("this tree", ROOT)] + ([("old", args.old.resolve())] if args.old else [])

    workdir = Path(tempfile.mkdtemp(prefix="relaunch-bench-startup-"))
    devstack, env = _start_devstack(workdir)
    port = 19000 + os.getpid() % 1000
    results: dict[str, list[tuple[float, float, float]]] = {label: [] for label, _ in trees}
    try:
        for _, tree in trees:
            start_once(tree, env, workdir, port)  # warm-up: bytecode, page cache
        for _ in range(args.rounds):
            for label, tree in trees:
                ready, leading = start_once(tree, env, workdir, port)
                results[label].append((ready, leading, os.getloadavg()[0]))
                print(
                    f"{label:9} ready {ready:6.2f} s, leader {leading:6.2f} s (load {os.getloadavg()[0]:.1f})"
                )
    finally:
        devstack.terminate()
        devstack.wait(timeout=60)

    print()
    print(f"start to ready, {args.rounds} rounds, median (min-max); load = 1-minute average after each start")
    for label, rows in results.items():
        ready = [r for r, _, _ in rows]
        leading = [lead for _, lead, _ in rows]
        loads = [load for _, _, load in rows]
        print(
            f"{label:9} ready {statistics.median(ready):5.2f} s ({min(ready):.2f}-{max(ready):.2f}); "
            f"leader {statistics.median(leading):5.2f} s ({min(leading):.2f}-{max(leading):.2f}); "
            f"load {min(loads):.1f}-{max(loads):.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
