"""Fixtures of the Slurm tests: one real cluster per session (tests/support/slurm.py), left as
it was found after each test (no reservation, every node back in service)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from jupyter_gpuhive.hosts.slurm import SlurmNode, parse_nodes, parse_reservations
from jupyter_gpuhive.sim.users import ensure_user
from tests.support.slurm import NODES, SlurmCluster, running_slurm, unavailable_reason
from tests.support.waiting import wait_for

# gpuhive user -> the UNIX account Slurm knows them as (c.GpuHiveApp.unix_users)
ACCOUNTS = {"alice": "gh-alice", "bob": "gh-bob"}


@pytest.fixture(scope="session")
def slurm_session() -> Iterator[SlurmCluster]:
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    for account in ACCOUNTS.values():
        ensure_user(account)
    with running_slurm() as cluster:
        yield cluster


@pytest.fixture
def slurm(slurm_session: SlurmCluster) -> Iterator[SlurmCluster]:
    """The session's cluster, cleaned after the test: reservations deleted, nodes resumed."""
    yield slurm_session
    listed = slurm_session.scontrol("show", "reservation", "-o", check=False).stdout
    for found in parse_reservations(listed):
        slurm_session.scontrol("delete", f"reservationname={found.name}")
    for node in parse_nodes(slurm_session.scontrol("show", "node", "-o").stdout):
        if {"DOWN", "DRAIN"} & set(node.states):
            slurm_session.scontrol("update", f"nodename={node.name}", "state=resume")
    in_service(slurm_session)


def in_service(cluster: SlurmCluster) -> list[SlurmNode]:
    """Wait until every node is open again (a resumed node answers within a second or so)."""

    def listed() -> list[SlurmNode]:
        nodes = parse_nodes(cluster.scontrol("show", "node", "-o").stdout)
        return nodes if not any(n.closed() for n in nodes) else []

    found: list[SlurmNode] = wait_for(listed, 30, "every Slurm node back in service")
    return found


def slurm_hosts(cluster: SlurmCluster) -> list[dict[str, Any]]:
    """gpuhive's host entries of the cluster's nodes (GPUs from Slurm, none declared)."""
    return [
        {"name": node, "transport": "slurm",
         "slurm": {"node": node, "conf": str(cluster.conf), "bin": cluster.bin}}
        for node in NODES
    ]  # fmt: skip
