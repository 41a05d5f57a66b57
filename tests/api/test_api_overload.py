"""Overload in personal mode: the bound on requests in flight, dropped work, idempotency keys.

Requests are held in flight for real: the server runs its database work on one thread
(`db_workers = 1`), and the test occupies that thread with a task waiting on an Event.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from jupyter_gpuhive.server.api.admission import SETTING as ADMISSION
from jupyter_gpuhive.server.api.idempotency import answers_stored
from tests.api.helpers import booking
from tests.conftest import TOKENS, soon

LIMIT = 3


@pytest.fixture
def hive_config(hive_config: dict[str, Any]) -> dict[str, Any]:
    return {**hive_config, "max_requests_in_flight": LIMIT, "db_workers": 1}


class Reply:
    def __init__(self, code: int, body: bytes, headers: Any) -> None:
        self.status, self.headers = code, headers
        self.body = json.loads(body) if body else None

    @property
    def message(self) -> str:
        return str((self.body or {}).get("message", ""))

    def __repr__(self) -> str:
        return f"Reply({self.status}, {self.body!r})"


@pytest.fixture
def fetch(http_server_client: Any, jp_base_url: str) -> Any:
    async def fetch(
        method: str,
        path: str,
        body: Any = None,
        *,
        user: str = "alice",
        key: str | None = None,
        extra: dict[str, str] | None = None,
    ) -> Reply:
        headers = {"Authorization": f"token {TOKENS[user]}"} if user else {}
        if key is not None:
            headers["Idempotency-Key"] = key
        headers.update(extra or {})
        payload = json.dumps(body).encode() if body is not None else None
        response = await http_server_client.fetch(
            f"{jp_base_url}gpuhive/api/{path}", method=method, body=payload, headers=headers,
            raise_error=False, request_timeout=120,
        )  # fmt: skip
        return Reply(response.code, response.body, response.headers)

    return fetch


@pytest.fixture
def hive(jp_serverapp: Any) -> Any:
    return jp_serverapp.web_app.settings["gpuhive"]


@pytest.fixture
def admission(jp_serverapp: Any) -> Any:
    return jp_serverapp.web_app.settings[ADMISSION]


@pytest.fixture
def gate(hive: Any) -> Iterator[threading.Event]:
    """The server's only database thread, held until the test sets the event."""
    event = threading.Event()
    hive.executor.submit(event.wait, 120)
    yield event
    event.set()


async def until(check: Any, what: str) -> None:
    for _ in range(1200):
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never: {what}")


async def titles(fetch: Any) -> list[str]:
    found = await fetch("GET", "reservations", user="boss")
    assert found.status == 200, found
    return [r["title"] for r in found.body["reservations"]]


async def test_beyond_the_bound_a_request_is_refused_at_once_with_retry_after(
    fetch: Any, admission: Any, gate: threading.Event
) -> None:
    held = [asyncio.ensure_future(fetch("GET", "reservations")) for _ in range(LIMIT)]
    await until(lambda: admission.in_flight == LIMIT, f"{LIMIT} requests in flight")

    refused = await fetch("GET", "reservations")
    assert refused.status == 503, refused
    assert refused.headers["Retry-After"] == "1"
    assert "busy" in refused.message and "max_requests_in_flight" in refused.message
    # decided before the credentials are looked at: no token is refused the same way
    assert (await fetch("GET", "me", user="")).status == 503

    gate.set()
    assert [r.status for r in await asyncio.gather(*held)] == [200] * LIMIT
    await until(lambda: admission.in_flight == 0, "every request out of flight")
    assert (await fetch("GET", "me")).status == 200


async def test_a_booking_whose_client_has_gone_is_not_made(
    fetch: Any,
    hive: Any,
    admission: Any,
    gate: threading.Event,
    jp_http_port: int,
    jp_base_url: str,
) -> None:
    body = json.dumps(booking(["gpu1:0"], soon(), soon(2), "abandoned")).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", jp_http_port)
    writer.write(
        f"POST {jp_base_url}gpuhive/api/reservations HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: token {TOKENS['alice']}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    await writer.drain()
    await until(lambda: hive.executor._work_queue.qsize() == 1, "the booking queued")
    writer.close()  # the client gives up while its booking waits for a database thread
    await writer.wait_closed()
    await until(lambda: admission.gone == 1, "the server to see the client go")
    gate.set()
    await until(lambda: admission.in_flight == 0, "the abandoned request done")
    assert "abandoned" not in await titles(fetch)
    assert await reader.read() == b""  # it got no answer


async def test_work_past_its_deadline_is_not_started_and_frees_its_key(
    fetch: Any, hive: Any, admission: Any, gate: threading.Event
) -> None:
    admission.deadline = 0.5
    late = asyncio.ensure_future(
        fetch("POST", "reservations", booking(["gpu1:1"], soon(), soon(2), "late"), key="k-late")
    )
    await until(lambda: admission.in_flight == 1, "the booking in flight")
    await asyncio.sleep(1.0)  # past its deadline while it waits for the database thread
    gate.set()
    reply = await late
    assert reply.status == 503, reply
    assert "deadline" in reply.message and reply.headers["Retry-After"] == "1"
    assert "late" not in await titles(fetch)

    admission.deadline = 60.0
    again = await fetch(
        "POST", "reservations", booking(["gpu1:1"], soon(), soon(2), "late"), key="k-late"
    )
    assert again.status == 201, again  # the dropped request released its key


async def test_a_booking_whose_client_stopped_waiting_is_not_made_and_its_retry_is(
    fetch: Any, admission: Any, gate: threading.Event
) -> None:
    """The client says how long it waits (Gpuhive-Client-Timeout), counted from when the load
    balancer received the request (X-Request-Start) where one says so: past that, nothing
    is carried out, so no booking exists whose client never saw it acknowledged."""
    body = booking(["gpu2:1"], soon(), soon(2), "impatient")
    waiting = asyncio.ensure_future(
        fetch("POST", "reservations", body, key="k-impatient",
              extra={"Gpuhive-Client-Timeout": "0.5"})
    )  # fmt: skip
    await until(lambda: admission.in_flight == 1, "the booking in flight")
    await asyncio.sleep(1.0)  # its client's half second passes while it waits for a thread
    gate.set()
    reply = await waiting
    assert reply.status == 503, reply
    assert "Gpuhive-Client-Timeout" in reply.message and reply.headers["Retry-After"] == "1"
    assert "impatient" not in await titles(fetch)

    # a request the load balancer received 5 s ago, from a client that waits 2 s: too late
    stale = f"t={int((time.time() - 5) * 1e6)}"  # haproxy's form: microseconds
    late = await fetch("POST", "reservations", body, key="k-impatient",
                       extra={"Gpuhive-Client-Timeout": "2", "X-Request-Start": stale})  # fmt: skip
    assert late.status == 503, late
    assert "impatient" not in await titles(fetch)

    retry = await fetch("POST", "reservations", body, key="k-impatient",
                        extra={"Gpuhive-Client-Timeout": "30"})  # fmt: skip
    assert retry.status == 201, retry  # the dropped attempts released the key
    assert (await titles(fetch)).count("impatient") == 1

    for bad in ("soon", "0", "-1", "1e9", "nan"):
        refused = await fetch("GET", "me", extra={"Gpuhive-Client-Timeout": bad})
        assert refused.status == 400, (bad, refused)
        assert "Gpuhive-Client-Timeout header must be the seconds" in refused.message


async def test_a_retry_with_the_same_key_gets_the_same_reservation(fetch: Any) -> None:
    body = booking(["gpu1:2"], soon(), soon(2), "once")
    first = await fetch("POST", "reservations", body, key="b6f1c1d2-once")
    assert first.status == 201, first
    assert "Idempotent-Replayed" not in first.headers
    retry = await fetch("POST", "reservations", body, key="b6f1c1d2-once")
    assert retry.status == 201, retry
    assert retry.body == first.body
    assert retry.headers["Idempotent-Replayed"] == "true"
    assert retry.headers["Location"] == first.headers["Location"]
    assert (await titles(fetch)).count("once") == 1

    # the same key is alice's own: bob's request with it is a request of its own
    bobs = await fetch("POST", "reservations", {**body, "gpus": ["gpu1:3"]}, user="bob",
                       key="b6f1c1d2-once")  # fmt: skip
    assert bobs.status == 201 and bobs.body["id"] != first.body["id"], bobs

    other = await fetch("POST", "reservations", {**body, "title": "twice"}, key="b6f1c1d2-once")
    assert other.status == 422, other
    assert "different request" in other.message and "new key" in other.message
    assert "twice" not in await titles(fetch)

    # a refusal is an answer too: the retry gets the same 409, not a second try
    clash = booking(["gpu1:2"], soon(), soon(2), "clash")
    refused = await fetch("POST", "reservations", clash, key="k-clash")
    assert refused.status == 409, refused
    assert (await fetch("POST", "reservations", clash, key="k-clash")).body == refused.body


async def test_keys_that_are_not_acceptable(fetch: Any) -> None:
    body = booking(["gpu2:0"], soon(), soon(2), "bad key")
    for key in ("x" * 256, "two words", "é"):
        reply = await fetch("POST", "reservations", body, key=key)
        assert reply.status == 400, (key, reply)
        assert "1 to 255 visible ASCII characters" in reply.message
    assert "bad key" not in await titles(fetch)


async def test_concurrent_requests_with_one_key_make_one_booking(
    fetch: Any, gate: threading.Event, admission: Any
) -> None:
    body = booking(["gpu2:1"], soon(), soon(2), "racing")
    racing = [
        asyncio.ensure_future(fetch("POST", "reservations", body, key="k-race")) for _ in range(3)
    ]
    await until(lambda: admission.in_flight == 3, "three copies in flight")
    gate.set()
    replies = await asyncio.gather(*racing)
    # One makes it; each other copy finds the key taken at the start of its write: busy
    # (409, Retry-After) while the answer is being stored, or that answer once it is.
    made = [r for r in replies if r.status == 201 and "Idempotent-Replayed" not in r.headers]
    assert len(made) == 1, replies
    for other in replies:
        if other.status == 409:
            assert other.headers["Retry-After"] == "1"
            assert "still being carried out" in other.message
        else:
            assert other.status == 201 and other.body == made[0].body, other
    assert (await titles(fetch)).count("racing") == 1
    replay = await fetch("POST", "reservations", body, key="k-race")
    assert replay.body == made[0].body and replay.headers["Idempotent-Replayed"] == "true"


async def test_an_answer_is_stored_under_its_key_once_it_went_out(fetch: Any, hive: Any) -> None:
    """The answer goes out first (one transaction less before the client hears it) and is
    stored right after; a retry then gets it from the store, never a second booking."""
    body = booking(["gpu2:2"], soon(), soon(2), "stored after")
    first = await fetch("POST", "reservations", body, key="k-after")
    assert first.status == 201, first
    await answers_stored()
    row = hive.store.idempotency.get("alice", "k-after")
    assert row is not None and row["status"] == 201, row
    assert json.loads(row["body"]) == first.body
    again = await fetch("POST", "reservations", body, key="k-after")
    assert again.status == 201 and again.body == first.body, again
    assert again.headers["Idempotent-Replayed"] == "true"
    assert (await titles(fetch)).count("stored after") == 1


KEYED = {  # each creating request that takes an Idempotency-Key: (who, path, body)
    "rules": ("boss", "rules", {"name": "keyed rule", "groups": ["phd"],
                                "windows": [{"days": ["mon-fri"], "start": "08:00", "end": "16:00"}]}),
    "subscriptions": ("alice", "subscriptions", {"gpus": 1, "host": "gpu2", "duration": "1h"}),
    "jobs": ("alice", "jobs", {"name": "keyed job", "template": "plain", "gpus": ["gpu2:3"],
                               "command": "true"}),
}  # fmt: skip


@pytest.mark.parametrize("what", sorted(KEYED))
async def test_concurrent_keyed_creations_of_every_kind_make_one(
    what: str, fetch: Any, gate: threading.Event, admission: Any
) -> None:
    """Every keyed operation hands its errand to its own write, which takes the key: three
    copies sent at once (each past its checks before any wrote) make one thing, not three."""
    user, path, body = KEYED[what]
    racing = [
        asyncio.ensure_future(fetch("POST", path, body, user=user, key=f"k-{what}"))
        for _ in range(3)
    ]
    await until(lambda: admission.in_flight == 3, "three copies in flight")
    gate.set()
    replies = await asyncio.gather(*racing)
    made = [r for r in replies if r.status == 201 and "Idempotent-Replayed" not in r.headers]
    assert len(made) == 1, replies
    assert all(r.status in (201, 409) for r in replies), replies
    listed = (await fetch("GET", path, user="boss")).body[what]
    assert [item["id"] for item in listed] == [made[0].body["id"]], listed  # (a new server)
