"""Team mode end to end: identities come from the Hub, never from a user's own server.

Everything is real: JupyterHub 5+/6 with configurable-http-proxy, the gpuhive service managed
by the Hub on PostgreSQL, each user's own jupyter server (client mode) spawned by the Hub.
The leader-election test runs last: it kills a service replica.
"""

from __future__ import annotations

import os
import signal
import time
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

import pytest

from tests.conftest import iso, soon
from tests.hub.conftest import Team
from tests.hub.own_server import OwnServer
from tests.support.team_hub import call, service_processes
from tests.support.waiting import wait_for

pytestmark = pytest.mark.hub

SLOT = soon(days=2)


def book(gpu: str, hours: float = 0, title: str = "run") -> dict[str, Any]:
    start = SLOT + timedelta(hours=hours)
    return {
        "title": title,
        "gpus": [gpu],
        "start": iso(start),
        "end": iso(start + timedelta(hours=1)),
    }


def live(team: Team, reservation_id: int) -> bool:
    found = team.own("alice", "GET", f"reservations/{reservation_id}")
    assert found.status == 200, found
    return found.body["cancelled_at"] is None


@pytest.fixture(scope="module")
def bookings(team: Team) -> dict[str, int]:
    """Each user books through their own server: user -> reservation id."""
    made: dict[str, int] = {}
    for i, user in enumerate(("alice", "bob", "carol")):
        reply = team.own(user, "POST", "reservations", book(f"gpu1:{i}", title=f"{user}'s"))
        assert reply.status == 201, reply
        assert reply.body["owner"] == user
        made[user] = reply.body["id"]
    return made


def test_each_user_books_through_their_own_server_and_all_see_it(
    team: Team, bookings: dict[str, int]
) -> None:
    for user in ("alice", "bob", "carol"):
        me = team.own(user, "GET", "me")
        assert me.status == 200, me
        assert me.body["name"] == user
        assert me.body["admin"] is (user == "carol")  # carol: custom:gpuhive:admin via group
        window = {"start": iso(SLOT - timedelta(hours=1)), "end": iso(SLOT + timedelta(hours=3))}
        listed = team.own(user, "GET", f"reservations?{urlencode(window)}")
        assert listed.status == 200, listed
        owners = {r["id"]: r["owner"] for r in listed.body["reservations"]}
        assert owners == {rid: owner for owner, rid in bookings.items()}
    # Double booking refused across users' servers: the service decides, on PostgreSQL.
    clash = team.own("bob", "POST", "reservations", book("gpu1:0"))
    assert clash.status == 409, clash


def test_bob_cannot_cancel_or_edit_alices_reservation(team: Team, bookings: dict[str, int]) -> None:
    rid = bookings["alice"]
    cancel = team.own("bob", "DELETE", f"reservations/{rid}")
    assert cancel.status == 403, cancel
    assert "alice" in cancel.message
    edit = team.own("bob", "PATCH", f"reservations/{rid}", {"title": "mine now"})
    assert edit.status == 403, edit
    assert live(team, rid)


def test_bobs_forged_server_config_gives_him_nothing(team: Team, bookings: dict[str, int]) -> None:
    # bob's ~/.jupyter config says he is a gpuhive admin (admin_users, admin_groups, groups):
    # in client mode his server keeps no store, and the service asks the Hub who he is.
    me = team.own("bob", "GET", "me")
    assert me.body == {"name": "bob", "groups": ["phd"], "admin": False}
    for_alice = team.own("bob", "POST", "reservations", {**book("gpu2:0"), "owner": "alice"})
    assert for_alice.status == 403, for_alice
    # Headers that some proxies trust are not trusted (and not forwarded).
    spoof = {"X-Forwarded-User": "alice", "X-Remote-User": "alice", "X-Auth-Request-User": "alice"}
    made = team.own("bob", "POST", "reservations", book("gpu2:1"), headers=spoof)
    assert made.status == 201, made
    assert made.body["owner"] == "bob"
    assert (
        team.own("bob", "DELETE", f"reservations/{bookings['alice']}", headers=spoof).status == 403
    )


def test_bob_calling_the_service_directly_is_still_bob(
    team: Team, bookings: dict[str, int]
) -> None:
    bob = team.service_tokens["bob"]
    spoof = {"X-Forwarded-User": "alice", "X-Remote-User": "alice", "X-JupyterHub-User": "alice"}
    # On the service's own port, and through the Hub's proxy.
    for n, via in enumerate((team.service, team.proxied)):
        me = via(bob, "GET", "me?user=alice&name=alice", headers=spoof)
        assert me.status == 200, me
        assert me.body["name"] == "bob" and me.body["admin"] is False
        made = via(bob, "POST", "reservations", book("gpu2:2", hours=n), headers=spoof)
        assert made.status == 201, made
        assert made.body["owner"] == "bob"
        claim = via(bob, "POST", "reservations", {**book("gpu2:3"), "owner": "alice"})
        assert claim.status == 403, claim
        cancel = via(bob, "DELETE", f"reservations/{bookings['alice']}", headers=spoof)
        assert cancel.status == 403, cancel
    assert live(team, bookings["alice"])
    # A method the resource does not answer: 405 with its Allow header, as a user's server says.
    wrong = team.service(bob, "PUT", "reservations", book("gpu2:3"))
    assert wrong.status == 405, wrong
    assert wrong.headers.get("Allow") == "GET, POST" and "PUT" in wrong.body["message"]


def test_bobs_own_client_mode_server_cannot_claim_alice(
    team: Team, bookings: dict[str, int]
) -> None:
    """bob runs a server of his own in client mode, configured to say he is alice (and an
    admin), once with his real token and once with a made-up one: the service believes
    the Hub about the token, and nothing else."""
    claims = {"tok-claims-alice": {"name": "alice", "groups": ["admins"]}}
    extra = {"admin_users": ["alice", "bob"], "admin_groups": ["admins"]}
    url = team.hub.service_url()
    real = OwnServer(url, team.service_tokens["bob"], claims, extra)
    made_up = OwnServer(url, "made-up-token-" + "0" * 32, claims, extra)
    try:
        real.wait()
        made_up.wait()
        me = real.api("GET", "me")
        assert (me.status, me.body["name"], me.body["admin"]) == (200, "bob", False)
        made = real.api("POST", "reservations", book("gpu3:0"))
        assert (made.status, made.body["owner"]) == (201, "bob")
        assert real.api("DELETE", f"reservations/{bookings['alice']}").status == 403

        assert made_up.api("GET", "me").status == 401
        assert made_up.api("POST", "reservations", book("gpu3:1")).status == 401
        assert made_up.api("DELETE", f"reservations/{bookings['alice']}").status == 401
    finally:
        real.stop()
        made_up.stop()
    assert live(team, bookings["alice"])
    listed = team.own("alice", "GET", "reservations?" + urlencode({"gpu": "gpu3:1"}))
    assert listed.status == 200, listed
    assert listed.body["reservations"] == []


def test_tokens_the_service_refuses(team: Team) -> None:
    driver = team.hub.admin_token  # a *service* token (kind: service), with admin:users
    unscoped = team.hub.token_for("alice", ["read:users:name!user=alice"])  # no access scope
    for via in (team.service, team.proxied):
        for method, body in (("GET", None), ("POST", book("gpu3:2"))):
            assert via(None, method, "reservations", body).status == 401
            assert via("garbage-" + "x" * 40, method, "reservations", body).status == 401
            assert via(driver, method, "reservations", body).status == 403
            assert via(unscoped, method, "reservations", body).status == 403
        assert via(None, "GET", "me", headers={"X-Forwarded-User": "alice"}).status == 401
    # A server token is a user's: alice's own server reaches the service as alice.
    assert team.own("alice", "GET", "me").body["name"] == "alice"


def test_a_revoked_token_changes_nothing_from_the_next_request_on(team: Team) -> None:
    """Writes never use the cached answer about a token: a revoked token's next POST fails."""
    hub = team.hub
    token = hub.token_for("alice", ["access:services!service=gpuhive"], note="to revoke")
    assert team.service(token, "GET", "me").status == 200  # the Hub's answer is now cached
    made = team.service(token, "POST", "reservations", book("gpu3:3", hours=3))
    assert made.status == 201, made
    job = {"name": "after revoke", "template": "plain", "gpus": ["gpu3:3"], "command": "true"}
    hub.revoke("alice", token)
    after = {
        "POST reservations": team.service(token, "POST", "reservations", book("gpu3:3", hours=5)),
        "POST jobs": team.service(token, "POST", "jobs", job),
        "PATCH": team.service(token, "PATCH", f"reservations/{made.body['id']}", {"title": "x"}),
        "DELETE": team.service(token, "DELETE", f"reservations/{made.body['id']}"),
        # the refused write replaced the cached answer: reads stop at once as well
        "GET": team.service(token, "GET", "me"),
    }
    assert {what: reply.status for what, reply in after.items()} == dict.fromkeys(after, 401)
    assert "revoked" in after["POST reservations"].message
    assert live(team, made.body["id"])
    window = {"gpu": "gpu3:3", "start": iso(SLOT), "end": iso(SLOT + timedelta(hours=8))}
    listed = team.own("alice", "GET", f"reservations?{urlencode(window)}")
    assert [r["id"] for r in listed.body["reservations"]] == [made.body["id"]]
    assert team.own("alice", "GET", "jobs").body["jobs"] == []


def test_an_admin_removed_from_the_admins_loses_admin_writes_at_once(team: Team) -> None:
    """dave is in group `admins` (custom:gpuhive:admin): removed from it, his very next
    write for someone else is not applied, although reads may still use a cached answer.

    A booking runs on the Hub's last answer while the Hub is asked afresh and commits only
    once the Hub confirms the same rights: here it does not, so nothing is booked and dave
    is told to send it again; sent again, it is refused."""
    hub = team.hub
    assert hub.api("POST", "users/dave").status == 201
    assert hub.api("POST", "groups/admins/users", {"users": ["dave"]}).status == 200
    dave = hub.token_for("dave", ["access:services!service=gpuhive", "custom:gpuhive:admin"])
    me = team.service(dave, "GET", "me")  # cached from here on for reads
    assert (me.status, me.body["admin"]) == (200, True), me
    for_alice = team.service(dave, "POST", "reservations", {**book("gpu3:2", 7), "owner": "alice"})
    assert (for_alice.status, for_alice.body["owner"]) == (201, "alice"), for_alice
    job = {"name": "alice's", "template": "plain", "gpus": ["gpu3:2"], "command": "true"}
    alices_job = team.own("alice", "POST", "jobs", job)
    assert alices_job.status == 201, alices_job
    jid = alices_job.body["id"]
    # As an admin, dave passes the ownership check: 200, or 409 if it has already ended.
    assert team.service(dave, "POST", f"jobs/{jid}/stop").status in (200, 409)

    assert hub.api("DELETE", "groups/admins/users", {"users": ["dave"]}).status == 200
    for_alice_again = {**book("gpu3:2", 9), "owner": "alice"}
    again = team.service(dave, "POST", "reservations", for_alice_again)
    assert again.status == 503, again
    assert "rights changed" in again.message and "nothing was changed" in again.message
    assert again.headers["Retry-After"] == "1"
    refused = team.service(dave, "POST", "reservations", for_alice_again)
    assert refused.status == 403, refused
    slot = SLOT + timedelta(hours=9)
    window = {"gpu": "gpu3:2", "start": iso(slot), "end": iso(slot + timedelta(hours=1))}
    listed = team.own("alice", "GET", f"reservations?{urlencode(window)}").body["reservations"]
    assert listed == []  # the unconfirmed booking was not made
    stop = team.service(dave, "POST", f"jobs/{jid}/stop")
    assert stop.status == 403, stop
    cancel = team.service(dave, "DELETE", f"reservations/{for_alice.body['id']}")
    assert cancel.status == 403, cancel
    assert live(team, for_alice.body["id"])
    assert team.service(dave, "POST", "reservations", book("gpu3:2", 11)).status == 201


def test_admin_carol_can_cancel_alices_reservation(team: Team, bookings: dict[str, int]) -> None:
    rid = bookings["alice"]
    done = team.own("carol", "DELETE", f"reservations/{rid}")
    assert done.status == 200, done
    assert done.body["cancelled_at"] is not None
    assert not live(team, rid)
    # The slot is free again: bob may now book it.
    again = team.own("bob", "POST", "reservations", book("gpu1:0"))
    assert again.status == 201, again


def test_a_feed_made_through_a_users_server_has_the_address_of_the_hubs_proxy(
    team: Team,
) -> None:
    """No c.JupyterHub.public_url here: the URL is where alice's request reached the proxy
    (never the service's internal address, which nothing outside this machine reaches)."""
    made = team.own("alice", "POST", "feeds/personal")
    assert made.status == 201, made
    url = made.body["url"]
    assert url.startswith(team.hub.url + "/services/gpuhive/api/calendar/"), url
    feed = call("GET", url)  # a calendar program: no credentials, through the proxy
    assert feed.status == 200 and "BEGIN:VCALENDAR" in str(feed.body), feed


def test_a_retry_through_the_users_own_server_is_booked_once(team: Team) -> None:
    """Client mode passes the Idempotency-Key on and the replay's headers back."""
    body, key = book("gpu3:3", hours=30, title="retried through my server"), "own-server-retry-1"
    first = team.own("alice", "POST", "reservations", body, headers={"Idempotency-Key": key})
    assert first.status == 201, first
    again = team.own("alice", "POST", "reservations", body, headers={"Idempotency-Key": key})
    assert again.status == 201 and again.body == first.body, again
    assert again.headers["idempotent-replayed"] == "true"  # (the Hub's proxy: lower case)
    assert again.headers["location"] == first.headers["location"]
    other = team.own("alice", "POST", "reservations", {**body, "title": "else"},
                     headers={"Idempotency-Key": key})  # fmt: skip
    assert other.status == 422 and "different request" in other.message, other


def test_leader_election_and_failover(team: Team) -> None:
    """Two replicas on one PostgreSQL: one leader; SIGKILL it and the other takes over."""
    hub = team.hub
    ports = {hub.service_port, team.replica_port}

    def leaders() -> set[int]:
        return {port for port in ports if hub.health(port).body["leader"]}

    # The lock is tried every max(0.2, poll_interval / 2) = 0.5 s (poll_interval = 1 s here).
    wait_for(lambda: len(leaders()) == 1, 5, "one leader", interval=0.05)
    for _ in range(10):  # stable: never two, never none
        assert len(leaders()) == 1
        time.sleep(0.05)
    leader = leaders().pop()
    (other,) = ports - {leader}
    pids = {
        int(env["JUPYTERHUB_SERVICE_URL"].rsplit(":", 1)[1]): pid
        for pid, env in service_processes(hub.service_config).items()
    }
    killed_at = time.monotonic()
    os.kill(pids[leader], signal.SIGKILL)
    took = None
    while time.monotonic() - killed_at < 5:
        if hub.health(other).body["leader"]:
            took = time.monotonic() - killed_at
            break
        time.sleep(0.02)
    assert took is not None, "the surviving replica never became leader"
    poll_interval, lock_retry = 1.0, 0.5
    print(f"failover after SIGKILL: {took:.3f} s")
    assert took <= poll_interval + lock_retry + 0.5  # + slack for a busy 2-core machine
    # The survivor serves users' servers as before (if it is the Hub-managed one).
    if other == hub.service_port:
        assert team.own("alice", "GET", "me").status == 200
    else:
        direct = team.service_tokens["alice"]
        reply = call("GET", hub.service_url(other) + "api/me", direct)
        assert reply.status == 200 and reply.body["name"] == "alice"
