"""The tensorflow (TF_CONFIG) and tf-clusterspec templates."""

from __future__ import annotations

import json
import shlex

import pytest

from jupyter_gpuhive.jobs import TemplateError, get_template

tensorflow = get_template("tensorflow")
clusterspec = get_template("tf-clusterspec")


def tf_configs(tasks):
    return [json.loads(t.env["TF_CONFIG"]) for t in tasks]


def test_one_worker_per_host(hosts):
    tasks = tensorflow.render("j", "python t.py", hosts(2, 2))
    configs = tf_configs(tasks)
    cluster = {"worker": ["10.0.0.1:2222", "10.0.0.2:2222"]}
    assert configs == [
        {"cluster": cluster, "task": {"type": "worker", "index": 0}},
        {"cluster": cluster, "task": {"type": "worker", "index": 1}},
    ]
    assert [len(t.gpus) for t in tasks] == [2, 2]
    assert tasks[1].env["CUDA_VISIBLE_DEVICES"] == ",".join(g.uuid for g in tasks[1].gpus)


def test_per_gpu_tasks_on_one_host_get_distinct_ports(hosts):
    tasks = tensorflow.render("j", "t {port}", hosts(3), options={"per_gpu": True})
    config = tf_configs(tasks)[0]
    assert config["cluster"]["worker"] == ["10.0.0.1:2222", "10.0.0.1:2223", "10.0.0.1:2224"]
    assert [t.command for t in tasks] == ["t 2222", "t 2223", "t 2224"]
    assert [len(t.gpus) for t in tasks] == [1, 1, 1]


def test_hosts_sharing_an_address_do_not_clash(hosts):
    tasks = tensorflow.render(
        "j",
        "t",
        hosts(2, 1, addresses=["127.0.0.1", "127.0.0.1"]),
        options={"per_gpu": True, "chief": True, "ps": 2, "port_base": 40000},
    )
    cluster = tf_configs(tasks)[0]["cluster"]
    endpoints = [e for role in cluster.values() for e in role]
    assert len(endpoints) == 5
    assert len(set(endpoints)) == 5
    assert all(int(e.rsplit(":", 1)[1]) >= 40000 for e in endpoints)


def test_chief_counts_separately_and_indexes_count_per_role(hosts):
    tasks = tensorflow.render(
        "j", "t {task_type} {task_index}", hosts(2, 1), options={"per_gpu": True, "chief": True}
    )
    configs = tf_configs(tasks)
    assert configs[0]["cluster"] == {
        "chief": ["10.0.0.1:2222"],
        "worker": ["10.0.0.1:2223", "10.0.0.2:2222"],
    }
    assert [c["task"] for c in configs] == [
        {"type": "chief", "index": 0},
        {"type": "worker", "index": 0},
        {"type": "worker", "index": 1},
    ]
    assert [t.command for t in tasks] == ["t chief 0", "t worker 0", "t worker 1"]
    assert [t.role for t in tasks] == ["chief", "worker", "worker"]
    # Every task carries the same cluster.
    assert len({json.dumps(c["cluster"]) for c in configs}) == 1


def test_parameter_servers_have_no_gpus_and_spread_over_hosts(hosts):
    tasks = tensorflow.render("j", "t", hosts(1, 1), options={"ps": 3, "chief": True})
    ps = [t for t in tasks if t.role == "ps"]
    assert [t.host for t in ps] == ["gpu0", "gpu1", "gpu0"]
    assert all(t.gpus == () and t.env["CUDA_VISIBLE_DEVICES"] == "" for t in ps)
    cluster = tf_configs(tasks)[0]["cluster"]
    assert {role: len(endpoints) for role, endpoints in cluster.items()} == {
        "chief": 1,
        "worker": 1,
        "ps": 3,
    }
    assert cluster["ps"] == ["10.0.0.1:2223", "10.0.0.2:2223", "10.0.0.1:2224"]


def test_ipv6_addresses_are_bracketed(hosts):
    tasks = tensorflow.render("j", "t", hosts(1, addresses=["fe80::1"]))
    assert tf_configs(tasks)[0]["cluster"]["worker"] == ["[fe80::1]:2222"]


def test_port_range_is_checked(hosts):
    with pytest.raises(TemplateError, match="too few ports"):
        tensorflow.render("j", "t", hosts(3), options={"per_gpu": True, "port_base": 65534})


def test_user_cannot_set_tf_config(hosts):
    with pytest.raises(TemplateError, match="TF_CONFIG is set by the template"):
        tensorflow.render("j", "t", hosts(1), env={"TF_CONFIG": "{}"})


def test_clusterspec_flags(hosts):
    tasks = clusterspec.render("j", "python trainer.py --lr {lr}", hosts(2, 1), {"lr": "0.5"})
    assert [t.role for t in tasks] == ["worker", "worker", "ps"]
    words = [shlex.split(t.command) for t in tasks]
    assert words[0] == [
        "python",
        "trainer.py",
        "--lr",
        "0.5",
        "--ps_hosts=10.0.0.1:2223",
        "--worker_hosts=10.0.0.1:2222,10.0.0.2:2222",
        "--job_name=worker",
        "--task_index=0",
    ]
    assert words[1][-2:] == ["--job_name=worker", "--task_index=1"]
    assert words[2][-2:] == ["--job_name=ps", "--task_index=0"]
    assert tasks[2].gpus == ()
    assert "TF_CONFIG" not in tasks[0].env


def test_clusterspec_fields_without_appended_flags(hosts):
    tasks = clusterspec.render(
        "j",
        "t --ps {ps_hosts} --workers {worker_hosts} --role {tf_job_name} --i {task_index}",
        hosts(2, addresses=["127.0.0.1"]),
        options={"per_gpu": True, "ps": 2, "append_flags": False},
    )
    assert [t.command for t in tasks] == [
        "t --ps 127.0.0.1:2224,127.0.0.1:2225 --workers 127.0.0.1:2222,127.0.0.1:2223 "
        f"--role {role} --i {index}"
        for role, index in [("worker", 0), ("worker", 1), ("ps", 0), ("ps", 1)]
    ]


def test_clusterspec_without_ps_omits_ps_hosts(hosts):
    [task] = clusterspec.render("j", "t", hosts(1), options={"ps": 0})
    assert shlex.split(task.command)[1:] == [
        "--worker_hosts=10.0.0.1:2222",
        "--job_name=worker",
        "--task_index=0",
    ]
