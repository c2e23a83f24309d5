import json

import pytest

from trainer.cluster import from_environment
from trainer.config import ConfigError, parse_config


def _spec(task_type, index):
    return json.dumps(
        {
            "cluster": {"workerpool0": ["chief:2222"], "workerpool1": ["w0:2222", "w1:2222", "w2:2222"]},
            "task": {"type": task_type, "index": index, "trial": ""},
            "environment": "cloud",
        }
    )


@pytest.mark.parametrize(
    "task,expected_rank", [(("workerpool0", 0), 0), (("workerpool1", 0), 1), (("workerpool1", 2), 3)]
)
def test_cluster_spec_numbers_nodes_pool_by_pool(task, expected_rank):
    topo = from_environment({"CLUSTER_SPEC": _spec(*task)})
    assert (topo.node_rank, topo.num_nodes, topo.master_addr, topo.master_port) == (
        expected_rank,
        4,
        "chief",
        2222,
    )


def test_cluster_spec_wins_over_torchrun_variables_and_skips_empty_pools():
    spec = json.dumps(
        {
            "cluster": {"workerpool0": ["10.0.0.2:3333"], "workerpool1": []},
            "task": {"type": "workerpool0", "index": 0},
        }
    )
    topo = from_environment({"CLUSTER_SPEC": spec, "MASTER_ADDR": "elsewhere", "NODE_RANK": "0"})
    assert (topo.node_rank, topo.num_nodes, topo.master_addr) == (0, 1, "10.0.0.2")


def _spec_with_reduction_server(task_type: str) -> str:
    return json.dumps(
        {
            "cluster": {
                "workerpool0": ["chief:2222"],
                "workerpool1": ["w0:2222"],
                "workerpool2": ["rs0:2222", "rs1:2222"],
            },
            "task": {"type": task_type, "index": 0},
        }
    )


@pytest.mark.parametrize("task,expected_rank", [("workerpool0", 0), ("workerpool1", 1)])
def test_only_the_training_pools_make_the_gang(task, expected_rank):
    # A reduction server's two hosts in workerpool2 are not trainer nodes: the gang is 2, not 4.
    topo = from_environment({"CLUSTER_SPEC": _spec_with_reduction_server(task)})
    assert (topo.node_rank, topo.num_nodes) == (expected_rank, 2)


def test_a_trainer_started_in_a_non_training_pool_is_a_config_error():
    with pytest.raises(ConfigError, match="workerpool2 is not a training pool"):
        from_environment({"CLUSTER_SPEC": _spec_with_reduction_server("workerpool2")})


def test_torchrun_style_variables():
    topo = from_environment(
        {"MASTER_ADDR": "10.1.1.1", "MASTER_PORT": "4000", "NNODES": "3", "NODE_RANK": "2"}
    )
    assert (topo.node_rank, topo.num_nodes, topo.master_addr, topo.master_port) == (2, 3, "10.1.1.1", 4000)
    assert from_environment({"MASTER_ADDR": "h", "WORLD_SIZE": "2", "NODE_RANK": "1"}).num_nodes == 2


def test_no_cluster_information_means_one_node_on_localhost():
    topo = from_environment({})
    assert (topo.node_rank, topo.num_nodes, topo.master_addr) == (0, 1, "127.0.0.1")


@pytest.mark.parametrize(
    "env",
    [
        {"CLUSTER_SPEC": "{not json"},
        {"CLUSTER_SPEC": _spec("workerpool1", 7)},
        {"MASTER_ADDR": "h", "NNODES": "2", "NODE_RANK": "2"},
        {"MASTER_ADDR": "h", "NNODES": "two"},
    ],
)
def test_inconsistent_cluster_information_is_a_config_error(env):
    with pytest.raises(ConfigError):
        from_environment(env)


def test_command_line_defaults_come_from_relaunch_env():
    cfg = parse_config(
        ["--steps", "5"], env={"RELAUNCH_CHECKPOINT_URI": "gs://b/p", "RELAUNCH_RESUME_FROM": ""}
    )
    assert cfg.checkpoint_uri == "gs://b/p" and cfg.resume_from is None and cfg.engine == "ddp"
    with pytest.raises(ConfigError):
        parse_config(["--steps", "0"], env={})
    with pytest.raises(ConfigError):
        parse_config(["--steps", "5", "--model", "no_colon"], env={})
