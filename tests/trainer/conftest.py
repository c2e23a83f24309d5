"""Fixtures for the trainer tests (the harness itself lives in tests/support/gang.py)."""

import pytest

from tests.support.gang import Gang, Node, base_env, free_port


@pytest.fixture
def start_gang(tmp_path):
    started: list[Gang] = []

    def start(
        args: list[str],
        *,
        nodes: int = 1,
        nproc: int = 2,
        attempt: int = 1,
        checkpoint_uri: str | None = None,
        env: dict | None = None,
        only_nodes: list[int] | None = None,
    ) -> Gang:
        port = free_port()
        members = []
        for node_rank in only_nodes if only_nodes is not None else range(nodes):
            node_env = base_env(tmp_path, attempt, checkpoint_uri, env)
            node_env.update(
                {
                    "MASTER_ADDR": "127.0.0.1",
                    "MASTER_PORT": str(port),
                    "NNODES": str(nodes),
                    "NODE_RANK": str(node_rank),
                }
            )
            members.append(
                Node([*args, "--nproc-per-node", str(nproc)], node_env, f"attempt{attempt}/node{node_rank}")
            )
        gang = Gang(members)
        started.append(gang)
        return gang

    yield start
    for gang in started:  # never leave processes behind, whatever the test did
        gang.kill()
