"""Live state on every replica, and a failover that loses nothing, end to end (issue #33
items 1 and 4).

A real JupyterHub, the Hub-managed gpuhive service and a second replica on one PostgreSQL,
monitoring two local simulated hosts with a real GPU process of root on a GPU alice holds
(a violation): the replica that is not the leader serves the same hosts,
GPUs, processes (with their violation marks), timestamps, open violations and metric series
as the leader; after the leader is killed (SIGKILL) the new leader's series still holds
every point of before the failover and goes on, and the violation is the same one.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpuhive.sim.cluster import LocalSimHost
from jupyter_gpuhive.sim.ports import free_port
from tests.hub.conftest import start_replica
from tests.sim.conftest import gpu_processes  # noqa: F401 (a fixture)
from tests.support.postgres import PostgresCluster
from tests.support.team_hub import HubSetupError, TeamHub, call, service_processes
from tests.support.waiting import wait_for

SIM_ENV = ("PATH", "GPUHIVE_SIM_HOST", "GPUHIVE_SIM_CONFIG")


class Live:
    """The Hub, its replicas' ports and a user's token for the service."""

    def __init__(self, hub: TeamHub, ports: list[int], token: str, hosts: list[LocalSimHost]):
        self.hub, self.ports, self.token, self.hosts = hub, ports, token, hosts

    def get(self, port: int, path: str) -> Any:
        reply = call("GET", self.hub.service_url(port) + "api/" + path, self.token)
        assert reply.status == 200, reply
        return reply.body

    def leader(self) -> int | None:
        leaders = [p for p in self.ports if self.hub.health(p).body.get("leader")]
        return leaders[0] if len(leaders) == 1 else None


@pytest.fixture(scope="module")
def live(postgres: PostgresCluster) -> Iterator[Live]:
    folder = Path(tempfile.mkdtemp(prefix="gpuhive-live-"))
    folder.chmod(0o755)
    hosts = [LocalSimHost(f"gpu{i}", folder / f"sim{i}") for i in (1, 2)]
    declared = []
    for host in hosts:
        env = host.env()
        declared.append(
            {"name": host.name, "transport": "local", "env": {k: env[k] for k in SIM_ENV}}
        )
    settings = {
        "hosts": declared,
        "monitor": True,
        "poll_interval": 1.0,
        "violation_ladder": [{"after": 0, "handler": "event"}],
    }
    try:
        hub = TeamHub(postgres.new_database(), {"alice": ["phd"]}, service_settings=settings)
    except HubSetupError as error:
        pytest.fail(f"{error} (then `make test`; or `make sysdeps venv` first)", pytrace=False)
    with contextlib.ExitStack() as stack:
        stack.callback(hub.cleanup)
        hub.start()
        port = free_port()
        stack.callback(_stop, start_replica(hub, port))
        wait_for(lambda: hub.health(port).status == 200, 60, "second replica start",
                 interval=0.1, ignore=(OSError,))  # fmt: skip
        token = hub.token_for("alice", ["access:services!service=gpuhive"])
        yield Live(hub, [hub.service_port, port], token, hosts)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
        process.wait(5)


def _live_part(body: dict[str, Any]) -> list[Any]:
    """What the sampler gave GET hosts: per host its state, time and GPUs with processes."""
    return [
        (h["name"], h["state"], h["updated_at"], h["cpu_percent"], h["mem_used_mib"],
         [(g["uuid"], g["util"], g["mem_used_mib"], g["processes"]) for g in h["gpus"]])
        for h in body["hosts"]
    ]  # fmt: skip


def test_every_replica_serves_the_leaders_live_state_and_a_failover_keeps_the_series(
    live: Live,
    gpu_processes: list[Any],  # noqa: F811
) -> None:
    leader = wait_for(live.leader, 30, "one leader", interval=0.1)
    (other,) = set(live.ports) - {leader}
    booked = call("POST", live.hub.service_url(leader) + "api/reservations", live.token,
                  {"title": "run", "gpus": ["gpu1:1"], "duration": "1h"})  # fmt: skip
    assert booked.status == 201, booked
    proc = live.hosts[0].start_process([1], mem_mib=3072, util=64)
    gpu_processes.append(proc)

    def agreed() -> Any:
        """Both replicas' answers, when they show the same sweep with the process in it."""
        theirs = live.get(leader, "hosts")
        ours = live.get(other, "hosts")
        marked = [
            p.get("violation") for h in ours["hosts"] for g in h["gpus"] for p in g["processes"]
            if p["pid"] == proc.pid
        ]  # fmt: skip
        if not marked or not marked[0]:  # seen, and its violation recorded
            return None
        if _live_part(ours) != _live_part(live.get(leader, "hosts")):
            return None
        return theirs, ours

    theirs, ours = wait_for(agreed, 60, "the same live state on both replicas", interval=0.2)
    assert _live_part(ours) == _live_part(theirs)  # processes with their violation marks too
    ongoing = [v["violation"] for v in live.get(other, "violations")["ongoing"]]
    assert ongoing == [v["violation"] for v in live.get(leader, "violations")["ongoing"]]
    assert len(ongoing) == 1
    for host in ours["hosts"]:
        assert host["state"] == "up" and host["updated_at"], host
        assert [g["id"] for g in host["gpus"]] == [f"{host['name']}:{i}" for i in range(4)]
    gpu = next(g for h in ours["hosts"] for g in h["gpus"] if g["id"] == "gpu1:1")
    assert gpu["util"] == 64 and [p["pid"] for p in gpu["processes"]] == [proc.pid]

    def series(port: int) -> list[list[Any]]:
        return live.get(port, "metrics?gpu=gpu1:1")["gpus"]["gpu1:1"]["points"]

    def same_series() -> Any:
        mine = series(other)
        return mine if len(mine) >= 3 and mine == series(leader) else None

    before = wait_for(same_series, 60, "the same series on both replicas", interval=0.2)
    assert before[-1][1] == 64  # util as the process set it

    pids = {
        int(env["JUPYTERHUB_SERVICE_URL"].rsplit(":", 1)[1]): pid
        for pid, env in service_processes(live.hub.service_config).items()
    }
    before = series(other)  # all the survivor holds now
    os.kill(pids[leader], signal.SIGKILL)
    live.ports.remove(leader)
    wait_for(lambda: live.leader() == other, 30, "the survivor leads", interval=0.1)

    def went_on() -> Any:
        after = series(other)
        return after if len(after) > len(before) + 2 else None

    after = wait_for(went_on, 60, "new points from the new leader", interval=0.2)
    assert after[: len(before)] == before  # every point of before the failover, unchanged
    assert [p[0] for p in after] == sorted({p[0] for p in after})  # in order, none twice
    # The new leader has swept since: the violation goes on as the same one.
    report = live.get(other, "violations")
    assert [v["id"] for v in report["violations"]] == ongoing
    assert [v["violation"] for v in report["ongoing"]] == ongoing
