"""Replicas as local processes: the environment Vertex gives each one, launching, signalling.

Every replica runs its container's ``command + args`` directly (the image is not pulled) in a
process group of its own, so a signal reaches the whole tree the replica may have started, the
way a VM shutdown reaches every process in a container.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from google.cloud.aiplatform_v1 import CustomJobSpec

LOOPBACK = "127.0.0.1"
EXIT_COMMAND_NOT_RUNNABLE = 127  # what a shell reports when the command cannot be executed


@dataclass
class ReplicaPlan:
    """Where one replica sits in the gang and what it runs."""

    pool: int
    index: int
    rank: int
    port: int
    argv: list[str]
    env: dict[str, str]

    @property
    def name(self) -> str:
        return f"workerpool{self.pool}-{self.index}"


@dataclass
class Replica:
    plan: ReplicaPlan
    process: subprocess.Popen | None
    log_path: Path
    # Set when the process could not be started at all (e.g. command not found).
    launch_error: str | None = None
    exited: threading.Event = field(default_factory=threading.Event)
    # Set by `VertexEmulator.out_of_memory` before it kills the replica: the kill reads as the
    # container exceeding its memory, which Vertex reports with its own text.
    out_of_memory: bool = False

    @property
    def returncode(self) -> int | None:
        if self.process is None:
            return EXIT_COMMAND_NOT_RUNNABLE
        return self.process.poll()

    @property
    def exit_status(self) -> int | None:
        """The code Vertex would report: a death by signal N reads as 128 + N, as in a shell."""
        code = self.returncode
        if code is None:
            return None
        return 128 - code if code < 0 else code

    def group_alive(self) -> bool:
        if self.process is None:
            return False
        try:
            os.killpg(self.process.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        # killpg also finds zombies: orphans whose new parent has not reaped them yet (some
        # container init processes never do). They no longer run, so they must not hold up
        # a teardown for the whole grace period.
        return _group_has_running_member(self.process.pid)

    def signal_group(self, signum: int) -> None:
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


def _group_has_running_member(pgid: int) -> bool:
    proc = Path("/proc")
    if not proc.is_dir():
        return True  # no way to tell zombies apart here: count the group as alive
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # the process ended while we looked
        # After the command name: state, ppid, pgrp, ...
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def _free_ports(count: int) -> list[int]:
    # Hold every socket until all are bound, so the ports are distinct from one another.
    with ExitStack() as stack:
        sockets = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((LOOPBACK, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]


def _output_dirs(spec: CustomJobSpec) -> dict[str, str]:
    base = spec.base_output_directory.output_uri_prefix
    if not base:
        return {}
    base = base.rstrip("/")
    return {
        "AIP_MODEL_DIR": f"{base}/model/",
        "AIP_CHECKPOINT_DIR": f"{base}/checkpoints/",
        "AIP_TENSORBOARD_LOG_DIR": f"{base}/logs/",
    }


def plan_replicas(spec: CustomJobSpec, job_id: str, python_bin_dir: str) -> list[ReplicaPlan]:
    """One plan per replica, pool 0 first; ranks run over all pools in order."""
    pools = [(i, pool) for i, pool in enumerate(spec.worker_pool_specs) if pool.replica_count > 0]
    total = sum(pool.replica_count for _, pool in pools)
    ports = iter(_free_ports(total))
    cluster: dict[str, list[str]] = {}
    slots: list[tuple[int, int, int]] = []  # (pool, index, port)
    for pool_index, pool in pools:
        addresses = cluster.setdefault(f"workerpool{pool_index}", [])
        for index in range(pool.replica_count):
            port = next(ports)
            addresses.append(f"{LOOPBACK}:{port}")
            slots.append((pool_index, index, port))

    master_port = slots[0][2]
    job_json = CustomJobSpec.to_json(spec, indent=None)
    base_env = dict(os.environ)
    base_env["PATH"] = os.pathsep.join(p for p in (python_bin_dir, base_env.get("PATH", "")) if p)
    plans = []
    for rank, (pool_index, index, port) in enumerate(slots):
        container = spec.worker_pool_specs[pool_index].container_spec
        env = dict(base_env)
        env.update({var.name: var.value for var in container.env})
        cluster_spec = {
            "cluster": cluster,
            "task": {"type": f"workerpool{pool_index}", "index": index, "trial": ""},
            "environment": "cloud",
            "job": job_json,
        }
        # What Vertex sets wins over the pool's env: the gang only forms if these are right.
        env.update(
            {
                "CLUSTER_SPEC": json.dumps(cluster_spec),
                "MASTER_ADDR": LOOPBACK,
                "MASTER_PORT": str(master_port),
                "WORLD_SIZE": str(total),
                "RANK": str(rank),
                "CLOUD_ML_JOB_ID": job_id,
                **_output_dirs(spec),
            }
        )
        argv = list(container.command) + list(container.args)
        plans.append(ReplicaPlan(pool_index, index, rank, port, argv, env))
    return plans


def launch(plan: ReplicaPlan, log_dir: Path, on_exit: Callable[[Replica], None]) -> Replica:
    """Start one replica with its output in ``log_dir/<pool>-<index>.log``; never raises for a
    bad command, which instead reads as a replica that exited with status 127."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{plan.name}.log"
    with open(log_path, "ab") as log_file:
        try:
            process = subprocess.Popen(
                plan.argv,
                env=plan.env,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            log_file.write(f"devstack: cannot start {plan.argv!r}: {exc}\n".encode())
            replica = Replica(plan, None, log_path, launch_error=str(exc))
            replica.exited.set()
            on_exit(replica)
            return replica
    replica = Replica(plan, process, log_path)

    def reap() -> None:
        process.wait()
        replica.exited.set()
        on_exit(replica)

    threading.Thread(target=reap, name=f"reap-{plan.name}", daemon=True).start()
    return replica


class Signallable(Protocol):
    """What `terminate` needs of a replica (a process here, or a simulated one)."""

    exited: threading.Event

    def group_alive(self) -> bool: ...

    def signal_group(self, signum: int) -> None: ...


def terminate(
    replicas: Sequence[Signallable], grace_seconds: float, poll_seconds: float = 0.05, *, sigterm: bool = True
) -> None:
    """SIGTERM every replica's process group, wait up to ``grace_seconds`` for the groups to
    empty, SIGKILL what is left, and return once every replica process has been reaped.
    ``sigterm=False`` skips the warning: a hard stop, as when a VM is powered off at once."""
    if sigterm:
        for replica in replicas:
            replica.signal_group(signal.SIGTERM)
    deadline = time.monotonic() + max(grace_seconds, 0.0)
    while any(r.group_alive() for r in replicas):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        # A group can outlive its leader, so its emptiness is checked, not only the leader's exit.
        time.sleep(min(poll_seconds, remaining))
    for replica in replicas:
        replica.signal_group(signal.SIGKILL)
    for replica in replicas:
        replica.exited.wait(timeout=10.0)
