"""Team mode end to end: a real JupyterHub, its proxy, the gpuhive service, three users' servers.

One Hub per module (starting it and three servers takes ~30-40 s here): alice and bob in
group `phd`, carol in group `admins` (which the example config grants the custom scope
`custom:gpuhive:admin`). bob's own ~/.jupyter config is forged: it claims gpuhive admin
rights for him, which his server in client mode must not be able to pass on.

A second service replica (same environment and config as the Hub-managed one, another port)
is started outside the Hub for the leader-election test.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpuhive.sim.ports import free_port
from tests.support.postgres import PostgresCluster
from tests.support.team_hub import HubSetupError, Reply, TeamHub, call, service_processes
from tests.support.waiting import wait_for

USERS = {"alice": ["phd"], "bob": ["phd"], "carol": ["admins"]}

# What bob puts into his own server's config: none of it may reach the service.
FORGED_CONFIG = """\
c = get_config()  # noqa: F821
c.GpuHiveApp.admin_users = {"bob"}
c.GpuHiveApp.admin_groups = {"phd"}
c.GpuHiveApp.groups = {"admins": ["bob"]}
"""


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "hub: end-to-end tests with a real JupyterHub (needs configurable-http-proxy)"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.hub)


@dataclass
class Team:
    hub: TeamHub
    tokens: dict[str, str]  # user -> token for their own server (access:servers!user=…)
    service_tokens: dict[str, str]  # user -> token for the service (access:services!…)
    replica: subprocess.Popen[bytes]
    replica_port: int
    extra: dict[str, Any] = field(default_factory=dict)

    def own(self, user: str, method: str, path: str, body: Any = None, **kw: Any) -> Reply:
        """`user` calls gpuhive through their own single-user server (behind the proxy)."""
        url = self.hub.server_url(user) + "gpuhive/api/" + path
        return call(method, url, self.tokens[user], body, **kw)

    def service(
        self, token: str | None, method: str, path: str, body: Any = None, **kw: Any
    ) -> Reply:
        """Call the service itself, bypassing every user's server."""
        return call(method, self.hub.service_url() + "api/" + path, token, body, **kw)

    def proxied(
        self, token: str | None, method: str, path: str, body: Any = None, **kw: Any
    ) -> Reply:
        """Call the service through the Hub's public proxy."""
        return call(method, self.hub.proxied_service_url() + "api/" + path, token, body, **kw)


def start_replica(hub: TeamHub, port: int, config: Path | None = None) -> subprocess.Popen[bytes]:
    """A second service process: the managed one's environment and config (or `config`),
    another port."""
    managed = service_processes(hub.service_config)
    assert len(managed) == 1, f"expected the Hub-managed service only, found {managed}"
    env = dict(next(iter(managed.values())))
    env["JUPYTERHUB_SERVICE_URL"] = f"http://127.0.0.1:{port}"
    log = open(hub.dir / (f"replica-{port}.log" if config else "replica.log"), "wb")  # noqa: SIM115
    config = config or hub.service_config
    return subprocess.Popen(
        [sys.executable, "-m", "jupyter_gpuhive.hub", "--config", str(config)],
        env=env,
        cwd=hub.dir,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


@pytest.fixture(scope="module")
def team(postgres: PostgresCluster) -> Iterator[Team]:
    if os.name != "posix":  # pragma: no cover
        pytest.fail("The team-mode tests need Linux (/proc).")
    try:
        hub = TeamHub(
            postgres.new_database(),
            USERS,
            home_files={"bob": {".jupyter/jupyter_server_config.py": FORGED_CONFIG}},
        )
    except HubSetupError as error:
        pytest.fail(f"{error} (then `make test`; or `make sysdeps venv` first)", pytrace=False)
    hub.start()
    replica: subprocess.Popen[bytes] | None = None
    try:
        replica_port = free_port()
        replica = start_replica(hub, replica_port)  # starts while the servers spawn
        hub.spawn(USERS)
        tokens = {u: hub.token_for(u, [f"access:servers!user={u}"]) for u in USERS}
        service_tokens = {u: hub.token_for(u, ["access:services!service=gpuhive"]) for u in USERS}
        wait_for(
            lambda: hub.health(replica_port).status == 200,
            60,
            "second replica start",
            interval=0.1,
            ignore=(OSError,),
        )
        yield Team(hub, tokens, service_tokens, replica, replica_port)
    except Exception:
        print(hub.log_tail())
        raise
    finally:
        if replica is not None and replica.poll() is None:
            replica.kill()
            replica.wait(5)
        hub.cleanup()
