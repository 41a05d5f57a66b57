"""Team mode (#46): JupyterHub's roles and custom scopes decide who uses gpuhive and who
administers which hosts, end to end with a real Hub and the gpuhive service it manages.

The site's jupyterhub_config.py defines `custom:gpuhive:use` and grants it (role
gpuhive-user) to alice and hedy, and grants hedy `custom:gpuhive:admin!group=physics`
(role physics-gpu-admin). The service requires the use scope (`c.GpuHiveService.use_scope`).
gpu1 and gpu2 belong to host group physics, gpu3 to chemistry. Nobody's server is spawned:
each user calls the service with a token of their own, as their server would.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.support.postgres import PostgresCluster
from tests.support.team_hub import HOSTS, HubSetupError, Reply, TeamHub, call

USERS = {"alice": ["phd"], "hedy": ["lab-heads"], "zed": ["visitors"]}
ACCESS = "access:services!service=gpuhive"
ROLES = """
# --- #46: gpuhive's use scope and a host group's administrator, granted by roles ---
c.JupyterHub.custom_scopes = {"custom:gpuhive:use": {"description": "use gpuhive"}}
c.JupyterHub.load_roles.append(
    {"name": "gpuhive-user", "scopes": ["custom:gpuhive:use"], "users": ["alice", "hedy"]}
)
c.JupyterHub.load_roles.append(
    {"name": "physics-gpu-admin", "scopes": ["custom:gpuhive:admin!group=physics"],
     "users": ["hedy"]}
)
"""


class RolesHub(TeamHub):
    """The team Hub, with the site's roles above before gpuhive's example config."""

    def _hub_config(self, log_level: str) -> str:
        config = super()._hub_config(log_level)
        last = config.index("# --- gpuhive, as docs/team-mode.md says")
        return config[:last] + ROLES + "\n" + config[last:]


@pytest.fixture(scope="module")
def hub(postgres: PostgresCluster) -> Iterator[RolesHub]:
    hosts = [{**h, "group": "chemistry" if h["name"] == "gpu3" else "physics"} for h in HOSTS]
    settings = {
        "hosts": hosts,
        "host_groups": {"physics": {}, "chemistry": {}},
        "approvals": {"physics": {"gpus": 1}, "chemistry": {"gpus": 1}},  # 2 GPUs wait
    }
    try:
        made = RolesHub(postgres.new_database(), USERS, service_settings=settings)
    except HubSetupError as error:
        pytest.fail(f"{error} (then `make test`; or `make sysdeps venv` first)", pytrace=False)
    config = made.service_config
    config.write_text(config.read_text() + 'c.GpuHiveService.use_scope = "custom:gpuhive:use"\n')
    made.start()
    try:
        yield made
    except Exception:
        print(made.log_tail())
        raise
    finally:
        made.cleanup()


def service(hub: RolesHub, token: str, method: str, path: str, body: Any = None) -> Reply:
    return call(method, hub.service_url() + "api/" + path, token, body)


def test_the_use_scope_decides_who_uses_gpuhive(hub: RolesHub) -> None:
    alice = hub.token_for("alice", [ACCESS, "custom:gpuhive:use"])
    me = service(hub, alice, "GET", "me")
    assert me.status == 200 and me.body["name"] == "alice", me
    zed = hub.token_for("zed", [ACCESS])  # no role grants zed the use scope
    for method, path in (("GET", "me"), ("GET", "reservations"), ("POST", "reservations")):
        refused = service(hub, zed, method, path, {} if method == "POST" else None)
        assert refused.status == 403, refused
        assert "needs the Hub scope custom:gpuhive:use" in refused.message, refused
    # a token of alice's without the scope is refused too: the token's scopes count
    bare = hub.token_for("alice", [ACCESS])
    assert service(hub, bare, "GET", "me").status == 403


def test_a_filtered_admin_scope_makes_a_host_groups_administrator(hub: RolesHub) -> None:
    alice = hub.token_for("alice", [ACCESS, "custom:gpuhive:use"])
    hedy = hub.token_for(
        "hedy", [ACCESS, "custom:gpuhive:use", "custom:gpuhive:admin!group=physics"]
    )
    start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(days=1)
    ids = {}
    for gpu in ("gpu1:0", "gpu3:0"):
        made = service(hub, alice, "POST", "reservations", {
            "title": "run", "gpus": [gpu], "start": start.isoformat(), "duration": "1h"})  # fmt: skip
        assert made.status == 201, made
        ids[gpu] = made.body["id"]
    assert service(hub, hedy, "GET", "me").body["admin"] is False  # not a site admin
    drained = service(hub, hedy, "POST", "health/drain", {"gpu": "gpu2:1"})
    assert drained.status == 200, drained
    refused = service(hub, hedy, "POST", "health/drain", {"gpu": "gpu3:1"})
    assert refused.status == 403 and "gpu3 belongs to host group chemistry" in refused.message
    refused = service(hub, hedy, "DELETE", f"reservations/{ids['gpu3:0']}")
    assert refused.status == 403 and "Who may: alice" in refused.message, refused
    ended = service(hub, hedy, "DELETE", f"reservations/{ids['gpu1:0']}")
    assert ended.status == 200, ended
    # alice holds no admin scope: not even on physics
    assert service(hub, alice, "POST", "health/drain", {"gpu": "gpu2:2"}).status == 403


def test_a_filtered_admin_scope_lets_its_holder_answer_approvals_of_that_group(
    hub: RolesHub,
) -> None:
    """Approvals (#46 item 4) in team mode: bookings of 2 GPUs wait; hedy, administrator of
    physics by the Hub's filtered scope, approves one there and may not answer one on gpu3."""
    alice = hub.token_for("alice", [ACCESS, "custom:gpuhive:use"])
    hedy = hub.token_for(
        "hedy", [ACCESS, "custom:gpuhive:use", "custom:gpuhive:admin!group=physics"]
    )
    start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(days=2)
    ids = {}
    for host in ("gpu2", "gpu3"):
        made = service(hub, alice, "POST", "reservations", {
            "title": "pair", "gpus": [f"{host}:2", f"{host}:3"], "start": start.isoformat(),
            "duration": "1h"})  # fmt: skip
        assert made.status == 201 and made.body["tentative"] is True, made
        ids[host] = made.body["id"]
    assert service(hub, hedy, "GET", f"reservations/{ids['gpu2']}").body["may_approve"] is True
    refused = service(hub, hedy, "POST", f"reservations/{ids['gpu3']}/approve")
    assert refused.status == 403 and "gpu3 belongs to host group chemistry" in refused.message
    approved = service(hub, hedy, "POST", f"reservations/{ids['gpu2']}/approve")
    assert approved.status == 200 and approved.body["tentative"] is False, approved
    # the booking's holder may not answer her own
    own = service(hub, alice, "POST", f"reservations/{ids['gpu3']}/decline")
    assert own.status == 403, own
    for rid in ids.values():
        assert service(hub, alice, "DELETE", f"reservations/{rid}").status == 200
