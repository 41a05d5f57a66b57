"""The replicas recipe (examples/deploy/, docs/how-to/replicas.md) brought up from its own files.

JupyterHub configured by examples/jupyterhub_config.py with the environment of the recipe's
Hub drop-in (the balancer's URL, the shared token file), two replicas started as the recipe's
gpuhive@.service says (its environment files, its ExecStart), Debian's haproxy running the
recipe's haproxy.cfg (only the addresses replaced by free ports; tests/support/deploy.py), on
a real PostgreSQL. The test that kills a replica runs last.
"""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

import pytest

from tests.conftest import iso, soon
from tests.support.deploy import HAPROXY_CFG, ReplicaStack
from tests.support.postgres import PostgresCluster
from tests.support.team_hub import Reply, call
from tests.support.waiting import wait_for

pytestmark = pytest.mark.hub

USERS = {"alice": ["phd"], "bob": ["phd"]}
SLOT = soon(days=3)


def replica_of(reply: Reply) -> str:
    """The replica haproxy says answered (its X-Gpuhive-Replica header)."""
    return next((v for k, v in reply.headers.items() if k.lower() == "x-gpuhive-replica"), "")


@pytest.fixture(scope="module")
def stack(postgres: PostgresCluster) -> Iterator[ReplicaStack]:
    # the Hub on a PostgreSQL database of its own, as docs/how-to/replicas.md sets it up
    built = ReplicaStack(
        postgres.new_database(), USERS, replicas=2, hub_db_url=postgres.new_database()
    )
    try:
        built.start(timeout=180)
        yield built
    finally:
        built.cleanup()


@pytest.fixture(scope="module")
def token(stack: ReplicaStack) -> str:
    return stack.hub.token_for("alice", ["access:services!service=gpuhive"])


def via_balancer(stack: ReplicaStack, token: str, method: str, path: str, **kw: Any) -> Reply:
    return call(method, stack.balancer_url + "api/" + path, token, **kw)


def test_the_recipes_haproxy_cfg_is_valid(stack: ReplicaStack) -> None:
    checked = stack.check_haproxy()
    assert checked.returncode == 0, checked.stdout + checked.stderr
    rendered = stack.haproxy_config()
    # Only addresses were replaced: the health check and balancing are the recipe's own.
    for line in ("option httpchk GET /health", "balance roundrobin"):
        assert line in HAPROXY_CFG.read_text() and line in rendered


def test_requests_through_the_balancer_reach_both_replicas(stack: ReplicaStack, token: str) -> None:
    answered = set()
    for _ in range(6):
        me = via_balancer(stack, token, "GET", "me")
        assert (me.status, me.body["name"]) == (200, "alice"), me
        answered.add(replica_of(me))
    assert answered == {"replica1", "replica2"}
    wait_for(lambda: len(stack.leaders()) == 1, 30, "one replica leads")


def test_a_booking_through_the_balancer_is_read_back_through_the_other_replica(
    stack: ReplicaStack, token: str
) -> None:
    body = {"title": "via haproxy", "gpus": ["gpu1:0"], "start": iso(SLOT), "duration": "1h"}
    key = {"Idempotency-Key": str(uuid.uuid4())}
    made = via_balancer(stack, token, "POST", "reservations", body=body, headers=key)
    assert made.status == 201, made
    other = next(r for r in stack.replicas if r.name != replica_of(made))
    read = call("GET", other.url(f"api/reservations/{made.body['id']}"), token)
    assert read.status == 200, read
    assert (read.body["owner"], read.body["title"]) == ("alice", "via haproxy")
    # The same through the Hub's proxy: its route for the service is the balancer.
    proxied = call(
        "GET", f"{stack.hub.proxied_service_url()}api/reservations/{made.body['id']}", token
    )
    assert proxied.status == 200 and proxied.body["id"] == made.body["id"], proxied
    clash = {**body, "title": "bob's"}
    bobs = stack.hub.token_for("bob", ["access:services!service=gpuhive"])
    refused = via_balancer(stack, bobs, "POST", "reservations", body=clash)
    assert refused.status == 409, refused


def test_a_clients_wait_counts_from_haproxys_reception(stack: ReplicaStack, token: str) -> None:
    """haproxy stamps X-Request-Start (replacing a client's); a replica changes nothing past
    the client's Gpuhive-Client-Timeout counted from that stamp."""
    import time

    later = iso(SLOT + timedelta(days=1))  # outside the window the client-mode test lists
    body = {"title": "patient", "gpus": ["gpu1:1"], "start": later, "duration": "1h"}
    stale = {"Gpuhive-Client-Timeout": "2", "X-Request-Start": f"t={int((time.time() - 5) * 1e6)}"}
    direct = call("POST", stack.replicas[0].url("api/reservations"), token, body=body,
                  headers=stale)  # fmt: skip
    assert direct.status == 503, direct  # its own stamp says its client left 3 s ago
    assert "Gpuhive-Client-Timeout" in direct.body["message"]
    made = via_balancer(stack, token, "POST", "reservations", body=body, headers=stale)
    assert made.status == 201, made  # haproxy's stamp replaced the client's


def test_a_users_server_in_client_mode_calls_the_balancer(stack: ReplicaStack) -> None:
    """The example config points every user's server at the balancer (no service on 10101)."""
    hub = stack.hub
    hub.spawn(["bob"])
    server_token = hub.token_for("bob", ["access:servers!user=bob"])
    me = call("GET", hub.server_url("bob") + "gpuhive/api/me", server_token)
    assert (me.status, me.body["name"]) == (200, "bob"), me
    window = {"start": iso(SLOT - timedelta(hours=1)), "end": iso(SLOT + timedelta(hours=2))}
    path = f"gpuhive/api/reservations?{urlencode(window)}"
    listed = call("GET", hub.server_url("bob") + path, server_token)
    assert listed.status == 200, listed
    assert [r["title"] for r in listed.body["reservations"]] == ["via haproxy"]


def test_the_replicas_give_out_the_hubs_public_url(stack: ReplicaStack, token: str) -> None:
    """replica.env's JUPYTERHUB_PUBLIC_URL: a feed's URL is the Hub's, whatever a request says."""
    public = stack.hub.public_url + "services/gpuhive/api/calendar/"
    for _ in range(2):  # round-robin: both replicas
        made = via_balancer(stack, token, "POST", "feeds/personal",
                            headers={"X-Forwarded-Host": "elsewhere.example"})  # fmt: skip
        assert made.status == 201, made
        assert made.body["url"].startswith(public), (made.body["url"], public)


def test_a_killed_replica_leaves_the_rotation_and_the_other_serves(
    stack: ReplicaStack, token: str
) -> None:
    victim, survivor = stack.replicas
    victim.kill(signal.SIGKILL)
    wait_for(lambda: stack.up() == {survivor.name}, 30, "haproxy marks the dead replica down")
    for _ in range(6):
        me = via_balancer(stack, token, "GET", "me")
        assert (me.status, replica_of(me)) == (200, survivor.name), me
    wait_for(lambda: stack.leaders() == {survivor.name}, 30, "the survivor leads")
