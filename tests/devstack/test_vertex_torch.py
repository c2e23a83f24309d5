"""A 2-pool CustomJob on the Vertex stand-in forms a real torch.distributed gloo group."""

from __future__ import annotations

import json
import textwrap

import pytest
from google.cloud.aiplatform_v1 import JobState

from devstack.vertex import start_vertex
from devstack.vertex.testing import command_job, job_service_client

PROJECT = "relaunch-dev"
REGION = "us-central1"
DONE = {JobState.JOB_STATE_SUCCEEDED, JobState.JOB_STATE_FAILED, JobState.JOB_STATE_CANCELLED}

# Uses only what Vertex puts in the environment: env:// rendezvous reads MASTER_ADDR,
# MASTER_PORT, RANK and WORLD_SIZE.
REPLICA = """
    import datetime, json, os, pathlib, sys
    import torch
    import torch.distributed as dist

    out = pathlib.Path(sys.argv[1])
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    total = torch.tensor([float(rank)])
    dist.all_reduce(total)
    (out / f"rank-{rank}.json").write_text(json.dumps({
        "rank": rank,
        "world_size": int(os.environ["WORLD_SIZE"]),
        "group_size": dist.get_world_size(),
        "master": [os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]],
        "cluster_spec": json.loads(os.environ["CLUSTER_SPEC"]),
        "rank_sum": total.item(),
    }))
    dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def vertex(tmp_path_factory):
    emulator = start_vertex(
        project=PROJECT,
        region=REGION,
        workdir=str(tmp_path_factory.mktemp("vertex-torch")),
        provisioning_seconds=0.05,
        kill_grace_seconds=2.0,
    )
    yield emulator
    emulator.stop()


def test_two_pool_job_forms_a_gloo_group_from_the_vertex_environment(vertex, tmp_path):
    program = tmp_path / "replica.py"
    program.write_text(textwrap.dedent(REPLICA))
    command = ["python", str(program), str(tmp_path)]
    client = job_service_client(vertex.host_port)

    job = client.create_custom_job(
        parent=f"projects/{PROJECT}/locations/{REGION}",
        custom_job=command_job("gloo", [(1, command), (2, command)], timeout_seconds=300),
    )
    ended = vertex.wait_for_state(job.name, DONE, timeout=300)
    assert ended.state == JobState.JOB_STATE_SUCCEEDED, (
        ended.error.message,
        vertex.replica_log(job.name).read_text()[-2000:],
    )

    reports = {r["rank"]: r for r in (json.loads(p.read_text()) for p in tmp_path.glob("rank-*.json"))}
    assert sorted(reports) == [0, 1, 2]
    cluster = reports[0]["cluster_spec"]["cluster"]
    assert len(cluster["workerpool0"]) == 1 and len(cluster["workerpool1"]) == 2
    addresses = cluster["workerpool0"] + cluster["workerpool1"]
    assert len(set(addresses)) == 3 and all(a.startswith("127.0.0.1:") for a in addresses)
    expected_task = {0: ("workerpool0", 0), 1: ("workerpool1", 0), 2: ("workerpool1", 1)}
    for rank, report in reports.items():
        task = report["cluster_spec"]["task"]
        assert (task["type"], task["index"]) == expected_task[rank]
        assert report["cluster_spec"]["cluster"] == cluster
        assert report["master"] == ["127.0.0.1", cluster["workerpool0"][0].split(":")[1]]
        assert report["world_size"] == report["group_size"] == 3
        assert report["rank_sum"] == 0 + 1 + 2
