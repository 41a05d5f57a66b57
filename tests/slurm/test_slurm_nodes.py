"""Reading Slurm: the parsers on what the session's real cluster prints (captured here, at
test time), and the Slurm backend's samples of its nodes (GPUs by gres type, states)."""

from __future__ import annotations

import asyncio

import pytest

from jupyter_gpuhive.errors import Invalid
from jupyter_gpuhive.hosts.backends.slurm import SlurmBackend, settings_of, slurm_uuid
from jupyter_gpuhive.hosts.config import parse_host
from jupyter_gpuhive.hosts.pool import HostPool, HostUnavailable
from jupyter_gpuhive.hosts.slurm import (
    SlurmParseError,
    expand_hostlist,
    fields,
    parse_gres,
    parse_nodes,
    parse_reservations,
    parse_version,
    printable,
)
from jupyter_gpuhive.model.gpus import FAILED
from tests.slurm.conftest import in_service, slurm_hosts
from tests.support.slurm import GPUS_PER_NODE, NODES, SlurmCluster


def test_nodes_gpus_and_states_from_real_output(slurm: SlurmCluster) -> None:
    tricky = "fan broken Weight=9 State=IDLE [x@y]\tnext"  # an '=' and a bracket in the words
    slurm.scontrol("update", "nodename=n2", "state=drain", f"reason={tricky}")
    slurm.scontrol("update", "nodename=n1", "state=down", "reason=PSU replaced")
    text = slurm.scontrol("show", "node", "-o").stdout
    nodes = {n.name: n for n in parse_nodes(text)}
    assert set(nodes) == set(NODES)
    for name, kind in NODES.items():
        assert [(g.type, g.count) for g in nodes[name].gpus] == [(kind, GPUS_PER_NODE)]
        assert nodes[name].gpu_count == GPUS_PER_NODE
    n1, n2 = nodes["n1"], nodes["n2"]
    assert n1.states == ("DOWN",)
    assert n1.reason == "PSU replaced" and n1.reason_by == "root"
    assert n2.states == ("IDLE", "DRAIN")
    assert n2.reason == printable(tricky) == "fan broken Weight=9 State=IDLE [x@y] next"
    assert n2.closed() == "is drained: fan broken Weight=9 State=IDLE [x@y] next (by root)"
    # a drain drains the node's GPUs (they stay healthy); down fails them
    assert n2.health() is None
    assert n2.drain() == "fan broken Weight=9 State=IDLE [x@y] next (node n2, by root)"
    health = n1.health()
    assert health is not None and health.state == FAILED and n1.drain() is None
    assert health.reasons == ("Slurm: node n1 is down: PSU replaced (by root)",)
    # back in service: open again, no reason left
    slurm.scontrol("update", "nodename=n2", "state=resume")
    slurm.scontrol("update", "nodename=n1", "state=resume")
    again = {n.name: n for n in in_service(slurm)}
    assert again["n2"].states == ("IDLE",) and again["n2"].reason is None
    assert again["n2"].health() is None


def test_reservations_from_real_output(slurm: SlurmCluster) -> None:
    assert parse_reservations(slurm.scontrol("show", "reservation", "-o").stdout) == []
    slurm.scontrol(
        "create", "reservation", "reservationname=gpuhive-7", "users=gh-alice,gh-bob",
        "nodes=n1,n2", "starttime=2030-01-02T03:04:05", "endtime=2030-01-02T05:00:00",
    )  # fmt: skip
    [found] = parse_reservations(slurm.scontrol("show", "reservation", "-o").stdout)
    assert found.name == "gpuhive-7"
    assert found.nodes == ("n1", "n2")  # Slurm prints n[1-2]
    assert found.users == ("gh-alice", "gh-bob")
    assert found.start.isoformat() == "2030-01-02T03:04:05+00:00"
    assert found.end.isoformat() == "2030-01-02T05:00:00+00:00"
    assert parse_version(slurm.scontrol("--version").stdout) >= (22, 5)


def test_the_backend_samples_each_node_from_slurm(slurm: SlurmCluster) -> None:
    decls = [parse_host(spec) for spec in slurm_hosts(slurm)]
    pool = HostPool(decls)

    async def sweep() -> dict:
        try:
            return {d.name: await pool.sample(d.name, 20) for d in decls}
        finally:
            await pool.close()

    slurm.scontrol("update", "nodename=n2", "state=drain", "reason=new fans")
    samples = asyncio.run(sweep())
    n1, n2 = samples["n1"], samples["n2"]
    assert [(g.index, g.name) for g in n1.gpus] == [(i, "a100") for i in range(GPUS_PER_NODE)]
    assert [g.uuid for g in n1.gpus] == [slurm_uuid("n1", "n1", i) for i in range(4)]
    assert n1.health == {} and n1.processes == ()
    assert n2.health == {} and n2.drainer == "Slurm"
    assert n2.drained == {g.uuid: "new fans (node n2, by root)" for g in n2.gpus}
    assert n1.drained == {} and n1.drainer == "Slurm"
    assert pool.status("n1").state == "up"
    assert isinstance(pool.backend("n1"), SlurmBackend)
    # gpuhive runs no command on a Slurm node (yet): it says so, and the node stays up
    done = asyncio.run(pool.backend("n1").run(decls[0], "true", "root", 5, None))
    assert done.exit_status == 126 and "no commands on Slurm nodes" in done.stderr


def test_a_node_slurm_does_not_list_is_down_with_why(slurm: SlurmCluster) -> None:
    spec = {**slurm_hosts(slurm)[0], "name": "n9", "slurm": {"conf": str(slurm.conf)}}
    pool = HostPool([parse_host(spec)])

    async def one() -> None:
        try:
            await pool.sample("n9", 20)
        finally:
            await pool.close()

    with pytest.raises(HostUnavailable, match="Slurm lists no node n9"):
        asyncio.run(one())
    assert pool.status("n9").state == "down"


def test_gres_and_host_lists_and_fields() -> None:
    assert [(g.type, g.count) for g in parse_gres("gpu:a100:4(S:0-1),shard:8,gpu:2")] == [
        ("a100", 4), (None, 2),
    ]  # fmt: skip
    assert parse_gres("(null)") == ()
    with pytest.raises(SlurmParseError, match="GPU count"):
        parse_gres("gpu:a100:lots")
    assert expand_hostlist("n[1-3,7],gpu[08-10],login") == [
        "n1", "n2", "n3", "n7", "gpu08", "gpu09", "gpu10", "login",
    ]  # fmt: skip
    with pytest.raises(SlurmParseError):
        expand_hostlist("n[1-")
    assert fields("NodeName=n1 OS=Linux 6.1 #1 SMP State=IDLE")["OS"] == "Linux 6.1 #1 SMP"
    with pytest.raises(SlurmParseError, match="line 1"):
        parse_nodes("garbage without a node\n")


def test_bad_slurm_settings_are_the_sites_mistake() -> None:
    bad = parse_host({"name": "n1", "transport": "slurm", "slurm": {"conf": "relative.conf"}})
    with pytest.raises(Invalid, match="conf must be an absolute path"):
        settings_of(bad)
    odd = parse_host({"name": "n1", "transport": "slurm", "slurm": {"node": "n1; rm -rf /"}})
    with pytest.raises(Invalid, match="is not a Slurm node name"):
        settings_of(odd)
    pool = HostPool([bad])
    with pytest.raises(HostUnavailable, match="conf must be an absolute path"):
        asyncio.run(pool.sample("n1", 5))
    assert pool.status("n1").state == "down"


def test_the_gpus_slurms_jobs_hold_come_from_gres_used_only() -> None:
    """`GresUsed` (scontrol show node -d) gives the IDX of the GPUs jobs hold; a reason that
    looks like that field counts for nothing, and `IDX:N/A` is none."""
    line = ("NodeName=n1 Arch=x86_64 State=MIXED+DRAIN Gres=gpu:a100:4 GresDrain=N/A "
            "GresUsed=gpu:a100:2(IDX:0,2) Reason=x GresUsed=gpu:a100:4(IDX:0-3) "
            "[root@2026-01-02T03:04:05] Comment=(null)")  # fmt: skip
    (node,) = parse_nodes(line)
    assert node.gpus_used == (0, 2)
    (idle,) = parse_nodes("NodeName=n2 State=IDLE Gres=gpu:h100:4 GresUsed=gpu:h100:0(IDX:N/A)")
    assert idle.gpus_used == ()
