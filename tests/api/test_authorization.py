"""Authorization (#46): every route through the server's Authorizer and gpuhive's one declared
policy; host groups and their administrators, by real requests to a real server.

The site's authorizer here is a real jupyter_server Authorizer class, configured as a site
configures one (`ServerApp.authorizer_class`): it refuses malice everything of gpuhive.
gpu1 and gpu2 belong to host group physics (administered by the members of physics-heads:
hedy), gpu3 to chemistry (administered by carl).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from jupyter_server.auth.authorizer import AllowAllAuthorizer

from jupyter_gpuhive.errors import Forbidden, Invalid
from jupyter_gpuhive.model import HostDecl, Identity
from jupyter_gpuhive.model.authority import (
    ADMIN,
    GROUP_ADMIN,
    POLICY,
    Authority,
    parse_host_groups,
)
from jupyter_gpuhive.server.api import ENDPOINTS, PUBLIC_PATHS
from jupyter_gpuhive.server.api.authorization import authorized_action
from jupyter_gpuhive.server.api.operations import implemented
from tests.conftest import HOSTS, USERS, book, soon

ASKED: list[tuple[str, str, str]] = []  # (user, action, resource) the site's authorizer saw
REFUSED = {"malice"}  # whom the site refuses gpuhive (malice is a gpuhive admin, even so)


class RefusesMalice(AllowAllAuthorizer):
    """A site's authorizer: malice may do nothing with gpuhive (everything else as before)."""

    def is_authorized(self, handler: Any, user: Any, action: str, resource: str) -> bool:
        ASKED.append((user.username, action, resource))
        return not (user.username in REFUSED and resource.startswith("gpuhive:"))


SITE_USERS = {
    **USERS,
    "tok-malice": {"name": "malice", "groups": ["admins"]},
    "tok-hedy": {"name": "hedy", "groups": ["physics-heads"]},
    "tok-carl": {"name": "carl", "groups": []},
}
GROUPED_HOSTS = [
    {**host, "group": "chemistry" if host["name"] == "gpu3" else "physics"} for host in HOSTS
]

GROUPED = {  # GpuHiveApp settings: the hosts in their groups, and who administers each
    "hosts": GROUPED_HOSTS,
    "host_groups": {
        "physics": {"admin_groups": ["physics-heads"]},
        "chemistry": {"admins": ["carl"]},
    },
}


@pytest.fixture
def hive_config(hive_config: dict[str, Any]) -> dict[str, Any]:
    return {**hive_config, **GROUPED}


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    jp_server_config["ServerApp"]["authorizer_class"] = f"{__name__}.RefusesMalice"
    jp_server_config["TokenUsersIdentityProvider"] = {"users": SITE_USERS}
    return jp_server_config


FILLED = {"{id}": "1", "{kernel}": "k-1", "{group}": "physics"}


def concrete(path: str) -> str:
    for name, value in FILLED.items():
        path = path.replace(name, value)
    return path


# Every (path, method) of the route table but the two public ones (a feed's token in its URL,
# the Prometheus scrape token), with the resource and action it declares.
ROUTES = [
    (path, method, handler.auth_resource, authorized_action(getattr(handler, method)))
    for path, handler in ENDPOINTS
    if path not in PUBLIC_PATHS
    for method in implemented(handler)
]
ADMINISTRATORS = (ADMIN, GROUP_ADMIN)
ADMIN_ONLY = [
    (path, method, resource, action)
    for path, method, resource, action in ROUTES
    if POLICY[(resource, str(action))].who in ADMINISTRATORS
]


def test_every_route_declares_a_resource_and_action_of_the_policy() -> None:
    assert len(ROUTES) > 60
    for path, method, resource, action in ROUTES:
        assert action in ("read", "write", "execute"), f"{method.upper()} {path}: {action}"
        assert (resource, action) in POLICY, f"{method.upper()} {path}: {resource} {action}"


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize(("path", "method", "resource", "action"), ROUTES)
async def test_the_sites_authorizer_refuses_every_route(
    api: Any, path: str, method: str, resource: str, action: str
) -> None:
    """Each route, called for real by malice (a gpuhive admin whom the site's authorizer
    refuses gpuhive): 403 with a JSON message, from the site's authorizer, asked about the
    route's own resource and action."""
    ASKED.clear()
    body = {} if method in ("post", "put", "patch") else None
    reply = await api("malice")(method.upper(), concrete(path), body)
    assert reply.status == 403, reply
    assert isinstance(reply.body, dict), reply
    assert f"authorizer does not allow malice to {action} {resource}" in reply.message, reply
    assert ("malice", action, resource) in ASKED
    # the site's authorizer answers the others as before: alice still reads her own name
    me = await api("alice")("GET", "me")
    assert me.status == 200 and ("alice", "read", "gpuhive:me") in ASKED


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize(("path", "method"), [(p, m) for p, m, _, _ in ADMIN_ONLY])
async def test_an_administrators_route_refuses_a_plain_user(
    api: Any, path: str, method: str
) -> None:
    """gpuhive's own policy: alice administers nothing, so the route refuses her at once,
    saying who may."""
    reply = await api("alice")(method.upper(), concrete(path), {})
    assert reply.status == 403, reply
    assert "Only gpuhive admins may" in reply.message and "alice is not one" in reply.message


def test_the_administrators_routes_are_the_ones_a_site_expects() -> None:
    found = {f"{m.upper()} {p}" for p, m, _, _ in ADMIN_ONLY}
    expected = {"POST /rules", "PUT /rules/{id}", "DELETE /rules/{id}", "PUT /limits",
                "DELETE /limits", "PUT /limits/tiers", "POST /health/drain", "POST /feeds/site",
                "DELETE /feeds/site/{id}", "POST /budgets", "PUT /budgets/{id}",
                "DELETE /budgets/{id}", "PUT /host-groups/{group}/limits",
                "DELETE /host-groups/{group}/limits", "PUT /host-groups/{group}/noshow",
                "DELETE /host-groups/{group}/noshow"}  # fmt: skip
    assert found == expected


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_the_metrics_scrape_by_jupyter_credentials_goes_through_the_authorizer(
    api: Any,
) -> None:
    refused = await api("malice")("GET", "prometheus")
    assert refused.status == 403 and "authorizer does not allow malice" in refused.message
    assert (await api("boss")("GET", "prometheus")).status == 200


# --- host groups and their administrators ------------------------------------------------


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_a_group_administrator_drains_only_her_groups_gpus(api: Any) -> None:
    hedy = api("hedy")
    drained = await hedy("POST", "health/drain", {"gpu": "gpu1:0", "reason": "fan"})
    assert drained.status == 200, drained
    refused = await hedy("POST", "health/drain", {"gpu": "gpu3:0"})
    assert refused.status == 403, refused
    assert "gpu3 belongs to host group chemistry" in refused.message, refused.message
    assert "chemistry's administrators (carl)" in refused.message
    assert "gpuhive admins" in refused.message
    undrained = await hedy("POST", "health/drain", {"gpu": "gpu1:0", "drain": False})
    assert undrained.status == 200, undrained
    # carl the other way round; the site admin everywhere
    assert (await api("carl")("POST", "health/drain", {"gpu": "gpu3:1"})).status == 200
    refused = await api("carl")("POST", "health/drain", {"gpu": "gpu2:1"})
    assert refused.status == 403 and "physics's administrators (members of physics-heads)" in (
        refused.message
    )
    assert (await api("boss")("POST", "health/drain", {"gpu": "gpu2:1"})).status == 200


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_a_group_administrator_sets_rules_only_for_her_groups_hosts(api: Any) -> None:
    hedy = api("hedy")
    office = {"days": ["mon-fri"], "start": "08:00", "end": "16:00"}
    ours = await hedy(
        "POST", "rules", {"name": "lab", "groups": ["phd"], "hosts": ["gpu1", "gpu2"]}
    )
    assert ours.status == 201, ours
    theirs = await hedy("POST", "rules", {"name": "x", "users": ["*"], "hosts": ["gpu3"]})
    assert theirs.status == 403 and "chemistry's administrators (carl)" in theirs.message
    by_gpu = await hedy("POST", "rules", {"name": "y", "users": ["*"], "gpus": ["gpu3:0"]})
    assert by_gpu.status == 403, by_gpu
    everywhere = await hedy("POST", "rules", {"name": "z", "users": ["*"], "windows": [office]})
    assert everywhere.status == 403 and "a rule for every host" in everywhere.message
    carls = await api("carl")(
        "POST", "rules", {"name": "chem", "users": ["carl"], "hosts": ["gpu3"]}
    )
    assert carls.status == 201, carls
    cid, oid = carls.body["id"], ours.body["id"]
    # replacing or deleting chemistry's rule is chemistry's; moving hers onto gpu3 too
    assert (await hedy("DELETE", f"rules/{cid}")).status == 403
    moved = {"name": "lab", "groups": ["phd"], "hosts": ["gpu1", "gpu3"]}
    assert (await hedy("PUT", f"rules/{oid}", moved)).status == 403
    kept = {"name": "lab", "groups": ["phd"], "hosts": ["gpu1"], "windows": [office]}
    assert (await hedy("PUT", f"rules/{oid}", kept)).status == 200
    # she sees the rules on her hosts (not applying to her), not chemistry's
    seen = {r["name"] for r in (await hedy("GET", "rules")).body["rules"]}
    assert seen == {"lab"}
    assert (await hedy("DELETE", f"rules/{oid}")).status == 200
    assert (await api("boss")("DELETE", f"rules/{cid}")).status == 200
    # the site's limits stay the site's (her group's own: tests/api/test_host_groups_api.py)
    limits = await hedy("PUT", "limits", {"scope": "site", "limits": {"max_gpus": 2}})
    assert limits.status == 403 and "Only gpuhive admins may set limits" in limits.message


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_a_group_administrator_sees_and_ends_bookings_on_her_hosts_only(api: Any) -> None:
    alice, hedy = api("alice"), api("hedy")
    t = soon()
    on_ours = (await book(alice, "ours", ["gpu1:0"], t)).body["id"]
    on_theirs = (await book(alice, "theirs", ["gpu3:0"], t)).body["id"]
    across = (await book(alice, "across", ["gpu2:0", "gpu3:1"], t)).body["id"]
    for rid in (on_ours, on_theirs, across):
        done = await alice("PATCH", f"reservations/{rid}", {"description": "secret plan"})
        assert done.status == 200, done
    # every booking on her hosts in full; elsewhere as everyone sees it
    assert (await hedy("GET", f"reservations/{on_ours}")).body["description"] == "secret plan"
    assert "description" not in (await hedy("GET", f"reservations/{on_theirs}")).body
    assert "description" not in (await hedy("GET", f"reservations/{across}")).body
    assert "description" not in (await api("bob")("GET", f"reservations/{on_ours}")).body
    listed = await hedy(
        "GET", "reservations", params={"start": (t - timedelta(hours=1)).isoformat()}
    )
    shown = {r["id"]: r for r in listed.body["reservations"]}
    assert shown[on_ours]["description"] == "secret plan" and "description" not in shown[across]
    # she may end one on her hosts, not change it; nor touch one that leaves them
    edit = await hedy("PATCH", f"reservations/{on_ours}", {"title": "mine"})
    assert edit.status == 403 and "belongs to alice" in edit.message, edit
    assert "Who may: alice, gpuhive admins" in edit.message
    for rid in (on_theirs, across):
        refused = await hedy("DELETE", f"reservations/{rid}")
        assert refused.status == 403, refused
        assert "gpu3 belongs to host group chemistry" in refused.message
        assert "alice, chemistry's administrators (carl), gpuhive admins" in refused.message
    ended = await hedy("DELETE", f"reservations/{on_ours}")
    assert ended.status == 200 and ended.body["status"] == "cancelled", ended
    assert (await api("carl")("DELETE", f"reservations/{on_theirs}")).status == 200
    # bob administers nothing: refused as before
    assert (await api("bob")("DELETE", f"reservations/{across}")).status == 403


def test_a_host_naming_an_undeclared_group_is_a_configuration_error() -> None:
    hosts = [HostDecl("gpu7", extra={"group": "physcs"})]
    with pytest.raises(Invalid, match=r"physcs.*declared: physics"):
        parse_host_groups({"physics": {"admins": ["hedy"]}}, hosts)
    with pytest.raises(Invalid, match=r"lists of names"):
        parse_host_groups({"physics": {"admins": "hedy"}})
    with pytest.raises(Invalid, match="admin_groups"):
        parse_host_groups({"physics": {"owners": ["hedy"]}})


def test_the_generated_reference_lists_every_route_and_policy_entry() -> None:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "docs" / "_ext"))
    from gpuhive_reference.policy import policy_page

    page = policy_page()
    for path, method, resource, action in ROUTES:
        assert f"| `{path}` | {method.upper()} | `{resource}` | {action} |" in page
    for (resource, action), entry in POLICY.items():
        assert f"| `{resource}` | {action} |" in page and entry.what in page


def test_a_refusal_on_a_site_without_host_groups_names_the_owner_and_admins() -> None:
    bob = Identity("bob", frozenset({"phd"}))
    with pytest.raises(Forbidden) as refused:
        Authority().require(
            bob, "gpuhive:reservations", "cancel", owner="alice", hosts={"gpu1"},
            thing="reservation 5 belongs to alice",
        )  # fmt: skip
    assert refused.value.message == (
        "bob may not cancel or end this reservation: reservation 5 belongs to alice. "
        "Who may: alice, gpuhive admins."
    )
    with pytest.raises(LookupError, match="declares no"):
        Authority().require(bob, "gpuhive:reservations", "paint")


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_a_group_administrator_chooses_lending_on_her_hosts_only(api: Any) -> None:
    """Lending settings (#46 item 2): the administrators of a booking's hosts may choose
    whether it lends its GPUs to preemptible jobs (and nothing else of it); elsewhere the
    refusal says who may."""
    alice, hedy = api("alice"), api("hedy")
    t = soon(4)
    ours = (await book(alice, "ours", ["gpu2:0"], t)).body["id"]
    theirs = (await book(alice, "theirs", ["gpu3:2"], t)).body["id"]
    kept = await hedy("PATCH", f"reservations/{ours}", {"lend": False})
    assert kept.status == 200 and kept.body["lend"] is False, kept
    early = await hedy("PATCH", f"reservations/{ours}", {"reclaim_before_start": True})
    assert early.status == 200 and early.body["reclaim_before_start"] is True, early
    # lending with anything else is a change of the booking: its owner's
    mixed = await hedy("PATCH", f"reservations/{ours}", {"lend": True, "title": "x"})
    assert mixed.status == 403 and "may not change this reservation" in mixed.message
    refused = await hedy("PATCH", f"reservations/{theirs}", {"lend": False})
    assert refused.status == 403, refused
    assert "may not choose whether this booking lends its GPUs" in refused.message
    assert "alice, chemistry's administrators (carl), gpuhive admins" in refused.message
    assert (await api("bob")("PATCH", f"reservations/{ours}", {"lend": True})).status == 403
    assert (await api("carl")("PATCH", f"reservations/{theirs}", {"lend": False})).status == 200
    assert (await alice("GET", f"reservations/{ours}")).body["lend"] is False
