"""Overload in team mode: a real Hub, PostgreSQL, the Hub-managed service and a second replica.

The second replica serves at most 3 requests at once on one database thread, with its health
port on. Requests are held in flight for real: the test locks the reservations table in
PostgreSQL, so every read of it waits in the database (and the one database thread with it).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import socket
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import make_url

from jupyter_gpuhive.notebook.client import HiveClient
from jupyter_gpuhive.sim.ports import free_port
from tests.api.helpers import booking
from tests.conftest import soon
from tests.hub.conftest import start_replica
from tests.support.postgres import PostgresCluster
from tests.support.team_hub import HubSetupError, Reply, TeamHub, call
from tests.support.waiting import wait_for

LIMIT = 3
USERS = {"alice": ["phd"], "bob": ["phd"]}


@dataclass
class Site:
    hub: TeamHub
    tokens: dict[str, str]
    port: int  # the bounded replica's
    health_port: int

    def replica(self, user: str | None, method: str, path: str, body: Any = None,
                key: str | None = None, port: int | None = None) -> Reply:  # fmt: skip
        headers = {"Idempotency-Key": key} if key else {}
        token = self.tokens.get(user or "", "not-a-token")
        url = self.hub.service_url(port or self.port) + "api/" + path
        return call(method, url, token, body, headers=headers)

    def health(self) -> dict[str, Any]:
        reply = call("GET", f"http://127.0.0.1:{self.health_port}/", timeout=5)
        assert reply.status == 200, reply
        return reply.body  # type: ignore[no-any-return]

    def titles(self) -> list[str]:
        found = self.replica("alice", "GET", "reservations", port=self.hub.service_port)
        assert found.status == 200, found
        return [r["title"] for r in found.body["reservations"]]

    def locked(self) -> psycopg.Connection[Any]:
        """A transaction that holds the reservations table: every read of it waits."""
        url = make_url(self.hub.db_url).set(drivername="postgresql")
        conn = psycopg.connect(url.render_as_string(hide_password=False))
        conn.execute("LOCK TABLE reservations IN ACCESS EXCLUSIVE MODE")
        return conn


@pytest.fixture(scope="module")
def site(postgres: PostgresCluster) -> Iterator[Site]:
    try:
        hub = TeamHub(postgres.new_database(), USERS)
    except HubSetupError as error:
        pytest.fail(f"{error} (then `make test`; or `make sysdeps venv` first)", pytrace=False)
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(hub.cleanup)
        hub.start()
        port, health_port = free_port(), free_port()
        config = hub.dir / "bounded_replica_config.py"
        config.write_text(
            hub.service_config.read_text()
            + f"c.GpuHiveApp.max_requests_in_flight = {LIMIT}\n"
            + "c.GpuHiveApp.db_workers = 1\n"
            + f"c.GpuHiveService.health_port = {health_port}\n"
        )
        cleanup.callback(stop, start_replica(hub, port, config))
        tokens = {u: hub.token_for(u, ["access:services!service=gpuhive"]) for u in USERS}
        wait_for(lambda: hub.health(port).status == 200, 60, "replica start", interval=0.1,
                 ignore=(OSError,))  # fmt: skip
        yield Site(hub, tokens, port, health_port)


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
        process.wait(5)


def test_both_health_checks_answer(site: Site) -> None:
    on_loop = site.hub.health(site.port)
    assert on_loop.status == 200 and on_loop.body == {"ok": True, "leader": False}
    own = site.health()
    assert own["ok"] is True and own["leader"] is False and own["in_flight"] == 0
    assert own["loop_lag_s"] >= 0


def test_beyond_the_bound_the_replica_answers_503_before_asking_the_hub(site: Site) -> None:
    with concurrent.futures.ThreadPoolExecutor(LIMIT) as pool:
        lock = site.locked()
        try:
            held = [pool.submit(site.replica, "alice", "GET", "reservations") for _ in range(LIMIT)]
            wait_for(lambda: site.health()["in_flight"] == LIMIT, 60, "requests in flight")
            refused = site.replica("alice", "GET", "me")
            assert refused.status == 503, refused
            assert refused.headers["Retry-After"] == "1"
            assert "max_requests_in_flight" in refused.message
            # a token the Hub does not know is refused the same way: it was never looked up
            assert site.replica(None, "GET", "me").status == 503
            assert site.health()["refused"] >= 2
        finally:
            lock.rollback()
            lock.close()
        assert [f.result().status for f in held] == [200] * LIMIT
    wait_for(lambda: site.health()["in_flight"] == 0, 60, "every request out of flight")
    assert site.replica("alice", "GET", "me").status == 200


def test_a_booking_whose_client_has_gone_is_not_made(site: Site) -> None:
    title, key = f"abandoned {uuid.uuid4()}", str(uuid.uuid4())
    body = booking(["gpu1:0"], soon(), soon(2), title)
    gone = site.health()["clients_gone"]
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        lock = site.locked()
        try:  # the replica's one database thread waits in a read of the locked table
            reader = pool.submit(site.replica, "alice", "GET", "reservations")
            wait_for(lambda: site.health()["in_flight"] == 1, 60, "the read in flight")
            with socket.create_connection(("127.0.0.1", site.port)) as client:
                client.sendall(raw_post(site, body, key))
                wait_for(lambda: site.health()["in_flight"] == 2, 60, "the booking in flight")
            # the client gave up; the replica notices before its booking gets a thread
            wait_for(lambda: site.health()["clients_gone"] == gone + 1, 60, "the client gone")
        finally:
            lock.rollback()
            lock.close()
        assert reader.result().status == 200
    wait_for(lambda: site.health()["in_flight"] == 0, 60, "the abandoned booking done")
    assert title not in site.titles()
    # its key was freed: the client's retry books, once
    retry = site.replica("alice", "POST", "reservations", body, key=key)
    assert retry.status == 201, retry
    assert site.titles().count(title) == 1


def raw_post(site: Site, body: dict[str, Any], key: str) -> bytes:
    payload = json.dumps(body).encode()
    path = site.hub.service_prefix + "api/reservations"
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{site.port}\r\n"
        f"Authorization: token {site.tokens['alice']}\r\nIdempotency-Key: {key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
    )
    return head.encode() + payload


def test_a_retried_booking_is_booked_once(site: Site) -> None:
    title, key = f"retried {uuid.uuid4()}", str(uuid.uuid4())
    body = booking(["gpu1:1"], soon(), soon(2), title)
    first = site.replica("alice", "POST", "reservations", body, key=key)
    assert first.status == 201, first
    # the retry goes to the other replica (a load balancer's round robin): same answer
    again = site.replica("alice", "POST", "reservations", body, key=key,
                         port=site.hub.service_port)  # fmt: skip
    assert again.status == 201 and again.body == first.body, again
    assert again.headers["Idempotent-Replayed"] == "true"
    assert site.titles().count(title) == 1
    other = site.replica("alice", "POST", "reservations", {**body, "title": "else"}, key=key)
    assert other.status == 422 and "different request" in other.message, other


def test_concurrent_retries_on_both_replicas_make_one_booking(site: Site) -> None:
    title, key = f"raced {uuid.uuid4()}", str(uuid.uuid4())
    body = booking(["gpu1:2"], soon(), soon(2), title)
    ports = [site.port, site.hub.service_port] * 3

    def post(port: int) -> Reply:
        return site.replica("alice", "POST", "reservations", body, key=key, port=port)

    with concurrent.futures.ThreadPoolExecutor(len(ports)) as pool:
        replies = list(pool.map(post, ports))
    statuses = [r.status for r in replies]
    assert set(statuses) <= {201, 409, 503} and 201 in statuses, replies
    assert site.titles().count(title) == 1
    made = {r.body["id"] for r in replies if r.status == 201}
    assert len(made) == 1, replies
    for busy in (r for r in replies if r.status == 409):
        assert busy.headers["Retry-After"] == "1" and "still being carried out" in busy.message


def client(site: Site, timeout: float = 30) -> HiveClient:
    """HiveClient (the magics') on the bounded replica, as alice."""
    return HiveClient(site.hub.service_url(site.port), site.tokens["alice"], timeout=timeout)


def test_the_client_waits_out_a_busy_replica(site: Site) -> None:
    title = f"patient {uuid.uuid4()}"
    with concurrent.futures.ThreadPoolExecutor(LIMIT + 1) as pool:
        lock = site.locked()
        try:
            held = [pool.submit(site.replica, "alice", "GET", "reservations") for _ in range(LIMIT)]
            wait_for(lambda: site.health()["in_flight"] == LIMIT, 60, "requests in flight")
            refused = site.health()["refused"]
            booked = pool.submit(
                client(site).reserve, title=title, gpus=["gpu2:0"], start=soon().isoformat(),
                duration="1h",
            )  # fmt: skip
            wait_for(lambda: site.health()["refused"] > refused, 60, "the client refused")
        finally:
            lock.rollback()
            lock.close()
        assert all(f.result().status == 200 for f in held)
        made = booked.result()  # it waited Retry-After and asked again
    assert made["title"] == title
    assert site.titles().count(title) == 1


def test_the_client_retries_a_booking_whose_answer_was_lost_with_its_key(site: Site) -> None:
    title = f"lost answer {uuid.uuid4()}"
    gone = site.health()["clients_gone"]
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        lock = site.locked()
        try:  # the booking waits in the database longer than the client waits for an answer
            booked = pool.submit(
                client(site, timeout=2).reserve, title=title, gpus=["gpu2:1"],
                start=soon().isoformat(), duration="1h",
            )  # fmt: skip
            wait_for(lambda: site.health()["clients_gone"] > gone, 60, "the client to give up")
        finally:
            lock.rollback()
            lock.close()
        made = booked.result()  # a retry with the same key got the first request's answer
    assert made["title"] == title
    assert site.titles().count(title) == 1
