"""Hostile input: ids, numbers, JSON and text no client should send get a clear 4xx, never a 500.

Every case here was a 500 (or a silent misreading) once; each runs on SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
from typing import Any

from tornado.httpclient import HTTPClientError

from jupyter_gpuhive.server.api import PUBLIC_PATHS
from jupyter_gpuhive.server.api.inputs import MAX_BODY_BYTES
from tests.api.helpers import refused, snapshot
from tests.conftest import book, iso, soon

# Path ids that are not ids: non-ASCII digits ('١' is int() 1), too big for any table or
# for the database driver (2^63 overflowed SQLite's), and 5,000 digits (over int()'s limit).
NOT_IDS = ["²", "١", "1²", str(2**31), str(2**63), "9" * 5000, "-1", "1.0"]


def arabic(number: int) -> str:
    """The id written in Arabic-Indic digits, which str.isdigit() and int() accept."""
    return "".join(chr(0x660 + int(d)) for d in str(number))


async def jobs_of(call: Any) -> list[dict[str, Any]]:
    reply = await call("GET", "jobs")
    assert reply.status == 200, reply
    return reply.body["jobs"]


async def test_path_ids_are_ascii_digits_within_range(api: Any) -> None:
    alice, boss = api("alice"), api("boss")
    rid = (await book(alice, "mine", ["gpu1:0"], soon())).body["id"]
    job = await alice("POST", "jobs", {"name": "j", "gpus": ["gpu1:1"], "command": "true"})
    assert job.status == 201, job
    rule = await boss("POST", "rules", {"name": "all", "users": ["*"]})
    assert rule.status == 201, rule
    before = await snapshot(alice)
    lookalikes = [arabic(rid), arabic(job.body["id"]), arabic(rule.body["id"])]
    for bad in [*NOT_IDS, *lookalikes]:
        for call, method, path, body in (
            (alice, "GET", f"reservations/{bad}", None),
            (alice, "PATCH", f"reservations/{bad}", {"title": "x"}),
            (alice, "DELETE", f"reservations/{bad}", None),
            (alice, "GET", f"reservations/{bad}/usage", None),
            (alice, "GET", f"jobs/{bad}", None),
            (alice, "POST", f"jobs/{bad}/start", None),
            (alice, "GET", f"jobs/{bad}/log", None),
            (boss, "GET", f"rules/{bad}", None),
            (boss, "PUT", f"rules/{bad}", {"name": "x", "users": ["*"]}),
            (boss, "DELETE", f"rules/{bad}", None),
        ):
            reply = await call(method, path, body)
            refused(reply, 404, "There is no")
            assert len(reply.message) < 200, reply.message  # no 5,000-digit echo
    assert await snapshot(alice) == before
    assert len(await jobs_of(alice)) == 1
    assert len((await boss("GET", "rules")).body["rules"]) == 1


async def test_bytes_that_are_not_utf8_in_the_url(
    api: Any, http_server_client: Any, jp_base_url: str
) -> None:
    """A path id that is not UTF-8 names nothing (404); such a query value is malformed (400)."""
    headers = {"Authorization": "token tok-alice"}
    for url, status, words in (
        ("jobs/%FF%FE", 404, ["There is no job"]),
        ("reservations/1%ED%A0%80", 404, ["There is no reservation"]),
        ("reservations?user=%FF", 400, ["'user'", "UTF-8"]),
        ("violations?reservation=%C0%80", 400, ["'reservation'", "UTF-8"]),
    ):
        response = await http_server_client.fetch(
            f"{jp_base_url}gpuhive/api/{url}", headers=headers, raise_error=False
        )
        body = json.loads(response.body)
        assert response.code == status, (url, response.code, body)
        assert all(word in body["message"] for word in words), body


async def test_integer_query_parameters_are_ascii_and_bounded(api: Any) -> None:
    alice = api("alice")
    job = await alice("POST", "jobs", {"name": "j", "gpus": ["gpu2:0"], "command": "true"})
    assert job.status == 201, job
    log = f"jobs/{job.body['id']}/log"
    for value in ("²", "١", "1e3", "0x10", str(2**63), "9" * 5000):
        for path, name in (
            ("reservations", "limit"),
            ("violations", "limit"),
            ("violations", "reservation"),
            (log, "task"),
            (log, "offset"),
            (log, "tail"),
        ):
            reply = await alice("GET", path, params={name: value})
            refused(reply, 422, f"'{name}'", "whole number")
            assert len(reply.message) < 200, reply.message
    # A log offset or tail a shell could not count to is the client's mistake, found before
    # any host is asked (it used to be a 503 'cannot read the log on gpu2').
    for name, value in (("offset", 2**53), ("offset", -1), ("tail", 2**62), ("tail", -5)):
        refused(await alice("GET", log, params={name: str(value)}), 422, f"'{name}'", "from 0")
    ok = await alice("GET", "violations", params={"reservation": "12345", "limit": "10"})
    assert ok.status == 200, ok
    assert ok.body["violations"] == []


async def test_deeply_nested_json_is_malformed(api: Any) -> None:
    alice, boss = api("alice"), api("boss")
    deep = b"[" * 10_000 + b"]" * 10_000
    nested: Any = "x"
    for _ in range(40):
        nested = {"a": nested}
    for call, path in ((alice, "reservations"), (alice, "jobs"), (alice, "jobs/preview"),
                       (boss, "rules")):  # fmt: skip
        refused(await call("POST", path, raw=b'{"title": ' + deep + b"}"), 400, "nests")
        refused(await call("POST", path, {"name": "n", "options": nested}), 400, "32 levels")
    assert await snapshot(alice) == []
    assert await jobs_of(alice) == []


async def test_nul_characters_are_refused_before_anything_is_stored(api: Any) -> None:
    alice, boss = api("alice"), api("boss")
    job = {"name": "n", "gpus": ["gpu1:0"], "command": "echo {word}", "variables": {"word": "a"}}
    torch = {**job, "template": "pytorch", "command": "python train.py"}
    for body, field in (
        ({**job, "command": "echo a\0b"}, "'command'"),
        ({**torch, "options": {"torchrun": "torch\0run"}}, "'options.torchrun'"),
        ({**job, "variables": {"word": "a\0"}}, "'variables.word'"),
        ({**job, "env": {"KEY": "\0"}}, "'env.KEY'"),
        ({**job, "name": "n\0"}, "'name'"),
        ({**job, "gpus": ["gpu1:0\0"]}, "'gpus[0]'"),
    ):
        for path in ("jobs/preview", "jobs"):
            refused(await alice("POST", path, body), 422, field, "NUL")
    assert await jobs_of(alice) == []
    t = soon()
    booking = {"title": "t", "gpus": ["gpu1:0"], "start": iso(t), "duration": "1h"}
    refused(await alice("POST", "reservations", {**booking, "title": "a\0b"}), 422, "'title'")
    refused(await boss("POST", "rules", {"name": "r\0", "users": ["*"]}), 422, "'name'", "NUL")
    assert await snapshot(alice) == []
    assert (await boss("GET", "rules")).body["rules"] == []


async def test_lone_surrogates_are_not_text(api: Any) -> None:
    alice, boss = api("alice"), api("boss")
    rid = (await book(alice, "mine", ["gpu2:1"], soon())).body["id"]
    before = await snapshot(alice)
    start = iso(soon(days=2)).encode()
    for call, method, path, raw in (
        (alice, "POST", "reservations",
         b'{"title": "\\ud800", "gpus": ["gpu1:0"], "start": "%s", "duration": "1h"}' % start),
        (alice, "POST", "reservations",
         b'{"title": "t", "gpus": ["gpu1:0"], "start": "%s", "\\udfff": 1}' % start),
        (alice, "PATCH", f"reservations/{rid}", b'{"description": "ok \\udbff"}'),
        (alice, "POST", "jobs", b'{"name": "\\ud800x", "gpus": ["gpu1:0"], "command": "true"}'),
        (alice, "POST", "jobs/preview",
         b'{"name": "n", "gpus": ["gpu1:0"], "command": "echo \\ud83d"}'),
        (boss, "POST", "rules", b'{"name": "r", "users": ["\\udc00"]}'),
    ):  # fmt: skip
        refused(await call(method, path, raw=raw), 400, "surrogate", "valid Unicode")
    assert await snapshot(alice) == before
    assert await jobs_of(alice) == []
    assert (await boss("GET", "rules")).body["rules"] == []
    # A properly paired surrogate (an emoji written as \ud83d\ude80) is text, and kept.
    paired = await alice("PATCH", f"reservations/{rid}", raw=b'{"title": "go \\ud83d\\ude80"}')
    assert paired.status == 200, paired
    assert paired.body["title"] == "go \U0001f680"


async def test_bodies_over_the_limit_are_refused_before_parsing(api: Any) -> None:
    alice = api("alice")
    t = soon()
    booking = {"title": "", "gpus": ["gpu1:0"], "start": iso(t), "duration": "1h"}
    room = MAX_BODY_BYTES - len(json.dumps(booking).encode())
    at_limit = json.dumps({**booking, "title": "x" * room}).encode()
    assert len(at_limit) == MAX_BODY_BYTES
    # At the limit the body is read (and its absurd title refused); one byte more, it is not.
    refused(await alice("POST", "reservations", raw=at_limit), 422, "'title'")
    for raw in (at_limit + b" ", b"x" * (MAX_BODY_BYTES + 1), b"[" * (5 * MAX_BODY_BYTES)):
        refused(await alice("POST", "reservations", raw=raw), 413, str(MAX_BODY_BYTES), "limit")
    assert await snapshot(alice) == []


async def test_no_credentials_is_401_and_an_unknown_method_405(api: Any, jp_fetch: Any) -> None:
    for method, path, body in (
        ("GET", "me", None),
        ("GET", "reservations", None),
        ("POST", "reservations", {"title": "t"}),  # refused before the XSRF check speaks
        ("DELETE", "jobs/1", None),
    ):
        refused(await api(None)(method, path, body), 401, "no valid credentials", "token")
    try:
        await jp_fetch("gpuhive", "api", "me", headers={"Authorization": "token not-a-token"})
    except HTTPClientError as error:
        assert error.code == 401
        assert error.response is not None
        assert error.response.headers["WWW-Authenticate"] == "token"
    else:
        raise AssertionError("an unknown token was accepted")
    for method, path, allowed in (("PUT", "me", "GET"), ("POST", "rules/coverage", "GET"),
                                  ("GET", "jobs/1/start", "POST")):  # fmt: skip
        try:
            await jp_fetch("gpuhive", "api", *path.split("/"), method=method,
                           body=b"{}" if method != "GET" else None,
                           headers={"Authorization": "token tok-alice"})  # fmt: skip
        except HTTPClientError as error:
            assert error.code == 405, error
            assert error.response is not None
            assert allowed in error.response.headers["Allow"].split(", ")
            assert method not in error.response.headers["Allow"].split(", ")
            assert method in json.loads(error.response.body)["message"]
        else:
            raise AssertionError(f"{method} {path} was answered")


async def test_the_document_states_every_status_the_server_gives(api: Any) -> None:
    document = (await api("carol")("GET", "openapi.json")).body
    assert str(MAX_BODY_BYTES) in document["info"]["description"]
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            codes = set(operation["responses"])
            if path in PUBLIC_PATHS and "{token}" in path:  # a feed: its URL is the credential
                assert operation["security"] == [] and "404" in codes, (method, path)
                continue
            assert {"401", "403"} <= codes, (method, path)
            if "requestBody" in operation:
                assert {"400", "413", "422"} <= codes, (method, path)
            if "{id}" in path:
                assert "404" in codes, (method, path)
    for path in ("/jobs", "/jobs/preview"):  # an unknown 'reservation' is a 404
        assert "404" in document["paths"][path]["post"]["responses"]
    change = document["components"]["schemas"]["ReservationChange"]
    assert change["additionalProperties"] is False  # PATCH refuses other fields (400)
    title = document["components"]["schemas"]["NewReservation"]["properties"]["title"]
    assert title["minLength"] == 1  # an empty title is refused (422)
