"""The pytorch template: torchrun per node and env:// per GPU, rank arithmetic."""

from __future__ import annotations

import shlex

import pytest

from jupyter_gpuhive.jobs import TemplateError, get_template

pytorch = get_template("pytorch")


def torchrun_args(command: str) -> dict[str, str]:
    """The --flag value pairs of a rendered torchrun prefix."""
    words = shlex.split(command)
    assert words[0] == "torchrun"
    return {words[i]: words[i + 1] for i in range(1, 11, 2)}


def test_single_node_single_gpu_torchrun(hosts):
    [task] = pytorch.render("j", "train.py", hosts(1), options={"master_port": 29400})
    assert torchrun_args(task.command) == {
        "--nnodes": "1",
        "--nproc-per-node": "1",
        "--node-rank": "0",
        "--master-addr": "10.0.0.1",
        "--master-port": "29400",
    }
    assert task.command.endswith(" train.py")
    assert task.env["WORLD_SIZE"] == "1"
    assert task.env["NODE_RANK"] == "0"
    assert task.env["CUDA_VISIBLE_DEVICES"] == task.gpus[0].uuid


def test_single_node_single_gpu_env(hosts):
    [task] = pytorch.render("j", "train.py", hosts(1), options={"mode": "env"})
    assert {k: task.env[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK")} == {
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
        "NODE_RANK": "0",
    }


def test_two_nodes_two_gpus_torchrun(hosts):
    tasks = pytorch.render(
        "j", "train.py --lr {lr}", hosts(2, 2), {"lr": "0.1"}, options={"master_port": 1234}
    )
    assert len(tasks) == 2
    for node_rank, task in enumerate(tasks):
        args = torchrun_args(task.command)
        assert args["--nnodes"] == "2"
        assert args["--nproc-per-node"] == "2"
        assert args["--node-rank"] == str(node_rank)
        assert args["--master-addr"] == "10.0.0.1"
        assert args["--master-port"] == "1234"
        assert task.command.endswith(" train.py --lr 0.1")
        assert task.env["MASTER_ADDR"] == "10.0.0.1"
        assert task.env["MASTER_PORT"] == "1234"
        assert task.env["WORLD_SIZE"] == "4"
        assert task.env["NODE_RANK"] == str(node_rank)
        assert task.env["CUDA_VISIBLE_DEVICES"] == ",".join(g.uuid for g in task.gpus)
        assert len(task.gpus) == 2
        assert "RANK" not in task.env  # torchrun sets it per worker


def test_two_nodes_two_gpus_env(hosts):
    tasks = pytorch.render(
        "j",
        "train.py --rank {rank} --local {local_rank} --node {node_rank} --world {world_size}",
        hosts(2, 2),
        options={"mode": "env", "master_port": 29501},
    )
    ranks = [(t.env["NODE_RANK"], t.env["LOCAL_RANK"], t.env["RANK"]) for t in tasks]
    assert ranks == [("0", "0", "0"), ("0", "1", "1"), ("1", "0", "2"), ("1", "1", "3")]
    assert [t.index for t in tasks] == [0, 1, 2, 3]
    assert tasks[3].command == "train.py --rank 3 --local 1 --node 1 --world 4"
    assert {t.env["MASTER_ADDR"] for t in tasks} == {"10.0.0.1"}
    assert {t.env["WORLD_SIZE"] for t in tasks} == {"4"}
    # Each process sees exactly its own GPU by default.
    assert [t.env["CUDA_VISIBLE_DEVICES"] for t in tasks] == [
        "GPU-gpu0-0000-aaaa-bbbb-cccc",
        "GPU-gpu0-0001-aaaa-bbbb-cccc",
        "GPU-gpu1-0000-aaaa-bbbb-cccc",
        "GPU-gpu1-0001-aaaa-bbbb-cccc",
    ]


def test_uneven_three_plus_one(hosts):
    tasks = pytorch.render("j", "t.py {rank}", hosts(3, 1), options={"mode": "env"})
    assert [(t.host, t.env["RANK"], t.env["LOCAL_RANK"]) for t in tasks] == [
        ("gpu0", "0", "0"),
        ("gpu0", "1", "1"),
        ("gpu0", "2", "2"),
        ("gpu1", "3", "0"),
    ]
    assert [t.env["LOCAL_WORLD_SIZE"] for t in tasks] == ["3", "3", "3", "1"]
    assert {t.env["WORLD_SIZE"] for t in tasks} == {"4"}
    # Ranks are unique and contiguous even though nodes differ in size.
    assert sorted(int(t.env["RANK"]) for t in tasks) == [0, 1, 2, 3]


def test_uneven_one_plus_three_uses_cumulative_offsets(hosts):
    tasks = pytorch.render("j", "t.py", hosts(1, 3), options={"mode": "env"})
    assert [t.env["RANK"] for t in tasks] == ["0", "1", "2", "3"]
    assert [t.env["LOCAL_RANK"] for t in tasks] == ["0", "0", "1", "2"]


def test_uneven_torchrun_nproc_per_node(hosts):
    tasks = pytorch.render("j", "t.py {nproc_per_node}", hosts(3, 1))
    assert [torchrun_args(t.command)["--nproc-per-node"] for t in tasks] == ["3", "1"]
    assert [t.command.rsplit(" ", 1)[1] for t in tasks] == ["3", "1"]
    assert {t.env["WORLD_SIZE"] for t in tasks} == {"4"}


def test_gpu_visibility_node(hosts):
    tasks = pytorch.render("j", "t.py", hosts(2), options={"mode": "env", "gpu_visibility": "node"})
    both = ",".join(g.uuid for g in tasks[0].gpus)
    assert [t.env["CUDA_VISIBLE_DEVICES"] for t in tasks] == [both, both]
    assert [t.env["LOCAL_RANK"] for t in tasks] == ["0", "1"]


def test_master_port_default_is_stable_and_in_range(hosts):
    first = pytorch.render("job-a", "t.py", hosts(1))[0].env["MASTER_PORT"]
    again = pytorch.render("job-a", "t.py", hosts(1))[0].env["MASTER_PORT"]
    assert first == again
    assert 29500 <= int(first) < 30500


def test_rank_field_in_torchrun_mode_explains(hosts):
    with pytest.raises(TemplateError, match=r"'rank'.*mode=env"):
        pytorch.render("j", "t.py --rank {rank}", hosts(1))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"mode": "mpi"}, "mode must be one of"),
        ({"master_port": 70000}, "master_port must be between"),
        ({"master_port": "29500"}, "master_port .* must be int"),
        ({"gpu_visibility": "all"}, "gpu_visibility must be one of"),
        ({"nnodes": 2}, "unknown option nnodes"),
    ],
)
def test_bad_options(hosts, options, message):
    with pytest.raises(TemplateError, match=message):
        pytorch.render("j", "t.py", hosts(1), options=options)


def test_node_without_gpus_is_refused(hosts):
    with pytest.raises(TemplateError, match=r"gpu1.*no GPUs"):
        pytorch.render("j", "t.py", hosts(1, 0))


def test_template_env_cannot_be_overridden(hosts):
    with pytest.raises(TemplateError, match="MASTER_PORT is set by the template"):
        pytorch.render("j", "t.py", hosts(1), env={"MASTER_PORT": "1"})
