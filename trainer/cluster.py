"""Where this node sits in the gang: from Vertex's CLUSTER_SPEC, torchrun-style variables, or alone."""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass

from trainer import layout
from trainer.config import ConfigError

DEFAULT_MASTER_PORT = 29500
# The pools whose replicas run the trainer and form the gang: Vertex's chief (workerpool0) and
# workers (workerpool1). Pools 2 and 3 hold parameter servers, a reduction server or evaluators
# (https://cloud.google.com/vertex-ai/docs/training/distributed-training): they run other
# programs, so their hosts are never counted as training nodes.
TRAINING_POOLS = ("workerpool0", "workerpool1")


@dataclass(frozen=True)
class NodeTopology:
    node_rank: int
    num_nodes: int
    master_addr: str
    master_port: int
    source: str  # "cluster_spec", "torchrun_env" or "single_node"
    task_type: str | None = None  # CLUSTER_SPEC's task (workerpoolN), when there is one
    task_index: int | None = None

    @property
    def replica(self) -> str:
        """This replica's name in exit records: `workerpool1-0` on Vertex, else `node-K`."""
        return layout.replica_name(self.task_type, self.task_index, self.node_rank)


def _split_host_port(entry: str) -> tuple[str, int]:
    host, sep, port = entry.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ConfigError(f"CLUSTER_SPEC host entry must be host:port, got {entry!r}")
    return host, int(port)


def from_cluster_spec(text: str) -> NodeTopology:
    """Vertex's CLUSTER_SPEC: the training nodes are workerpool0's host then workerpool1's, in list
    order; the hosts of pools 2-3 are not part of the gang. A trainer started in one of those
    pools is a configuration error: it would wait for a rank nobody gives it."""
    try:
        spec = json.loads(text)
        cluster = spec["cluster"]
        task = spec["task"]
        task_type, task_index = task["type"], int(task["index"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"CLUSTER_SPEC is not valid: {exc}") from None
    hosts: list[str] = []
    offsets: dict[str, int] = {}
    for name in TRAINING_POOLS:
        offsets[name] = len(hosts)
        hosts.extend(cluster.get(name) or [])  # an empty or absent workerpool1 is allowed
    if not cluster.get("workerpool0"):
        raise ConfigError("CLUSTER_SPEC has no workerpool0 host to rendezvous at")
    if task_type in cluster and task_type not in offsets:
        raise ConfigError(
            f"CLUSTER_SPEC task {task_type} is not a training pool: the trainer runs in "
            f"{' and '.join(TRAINING_POOLS)} only (pools 2-3 run a reduction server, parameter "
            "servers or evaluators with their own command)"
        )
    if task_type not in offsets or not 0 <= task_index < len(cluster.get(task_type) or []):
        raise ConfigError(f"CLUSTER_SPEC task {task_type}[{task_index}] is not in the cluster")
    master_addr, master_port = _split_host_port(cluster["workerpool0"][0])
    return NodeTopology(
        node_rank=offsets[task_type] + task_index,
        num_nodes=len(hosts),
        master_addr=master_addr,
        master_port=master_port,
        source="cluster_spec",
        task_type=task_type,
        task_index=task_index,
    )


def _int_env(env: dict[str, str], name: str) -> int:
    try:
        return int(env[name])
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {env[name]!r}") from None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def from_environment(env: dict[str, str]) -> NodeTopology:
    if env.get("CLUSTER_SPEC"):
        return from_cluster_spec(env["CLUSTER_SPEC"])
    if env.get("MASTER_ADDR"):
        nodes_var = "NNODES" if env.get("NNODES") else "WORLD_SIZE" if env.get("WORLD_SIZE") else None
        num_nodes = _int_env(env, nodes_var) if nodes_var else 1
        node_rank = _int_env(env, "NODE_RANK") if env.get("NODE_RANK") else 0
        port = _int_env(env, "MASTER_PORT") if env.get("MASTER_PORT") else DEFAULT_MASTER_PORT
        if num_nodes < 1 or not 0 <= node_rank < num_nodes:
            raise ConfigError(f"NODE_RANK={node_rank} is outside 0..{num_nodes - 1}")
        return NodeTopology(node_rank, num_nodes, env["MASTER_ADDR"], port, "torchrun_env")
    return NodeTopology(0, 1, "127.0.0.1", free_port(), "single_node")
