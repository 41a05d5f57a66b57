"""Calendar feeds: RFC 5545 for two parsers, every field, SEQUENCE, rotation, who may read."""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta
from typing import Any

import pytest

from tests.conftest import TOKENS, UTC, book, iso, soon
from tests.integrations.helpers import fetch, new_feed, parse_strictly

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")
# Characters that RFC 5545 TEXT must escape, and a title long enough to be folded mid-UTF-8.
NASTY = 'Łódź; "quotes", back\\slash\nsecond line'
LONG_TITLE = "Trening modelu — żółć " * 6


@pytest.fixture
def hive_config(hive_config: dict[str, Any]) -> dict[str, Any]:
    return {**hive_config, "feed_keep_cancelled": "3s"}


async def test_personal_feed_has_every_field_for_two_parsers(api: Any, jp_serverapp: Any) -> None:
    alice, bob, anonymous = api("alice"), api("bob"), api(None)
    start = soon(days=2)
    plain = (await book(alice, "plain", ["gpu3:0"], start)).body
    long = (await book(alice, LONG_TITLE.strip(), ["gpu3:1", "gpu3:2"], start, "3h")).body
    described = await alice(
        "POST", "reservations",
        {"title": "with, text; here", "description": NASTY, "gpus": ["gpu2:3"],
         "start": iso(start + timedelta(hours=5)), "duration": "2h"},
    )  # fmt: skip
    assert described.status == 201, described
    gone = (await book(alice, "gone", ["gpu3:3"], start + timedelta(hours=8))).body
    # Edits are recorded in batches every 50 ms: once this one is, the cancel is a second edit.
    await jp_serverapp.web_app.settings["gpuhive"].integrations.settle()
    assert (await alice("DELETE", f"reservations/{gone['id']}")).status == 200
    await book(bob, "bob's", ["gpu1:0"], start)

    token = await new_feed(alice)
    reply = await fetch(anonymous, token)
    assert reply.status == 200, reply
    events = parse_strictly(reply.body)
    assert len(events) == 4  # alice's four (the cancelled one too), not bob's
    by_title = {e["summary"].split(" (")[0]: e for e in events.values()}
    for uid in events:
        assert UUID.fullmatch(uid), uid
    for res in (plain, long, described.body, gone):
        event = by_title[res["title"]]
        assert event["start"].isoformat() == res["start"]
        assert event["end"].isoformat() == res["end"]
        hosts = sorted({g.split(":")[0] for g in res["gpus"]})
        assert event["location"] == ", ".join(hosts)
        assert f"({len(res['gpus'])} GPU" in event["summary"]
        assert event["summary"].endswith(", alice)")
        description = event["description"]
        assert "Owner: alice" in description
        assert f"GPUs: {', '.join(res['gpus'])}" in description
        assert f"Host: {', '.join(hosts)}" in description
        assert event["status"] == ("CANCELLED" if res is gone else "CONFIRMED")
        assert event["sequence"] == (1 if res is gone else 0)
        assert event["stamp"] <= soon(hours=0, days=0) + timedelta(hours=1)
    assert NASTY in by_title["with, text; here"]["description"]
    assert by_title[LONG_TITLE.strip()]["summary"].startswith(LONG_TITLE.strip())
    # the raw text: escaped specials, folded long lines
    raw = reply.body
    assert "SUMMARY:with\\, text\\; here" in raw
    assert "back\\\\slash\\nsecond line" in raw.replace("\r\n ", "")
    assert "\r\n " in raw


async def test_edits_that_keep_coming_never_hold_a_feed_back(
    api: Any, jp_serverapp: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A feed read records the edits made before it, then answers: it does not wait for a
    stream of later edits to end (here a new edit arrives while each batch is written, so
    the batches never run dry until the stream stops)."""
    alice, anonymous = api("alice"), api(None)
    made = (await book(alice, "streamed", ["gpu3:0"], soon(days=3))).body
    token = await new_feed(alice)
    integrations = jp_serverapp.web_app.settings["gpuhive"].integrations
    loop = asyncio.get_running_loop()
    streaming = True
    write = integrations.feeds.touch

    def write_while_edits_arrive(ids: list[int]) -> None:
        write(ids)
        if streaming:  # (a thread of the pool) the next edit, recorded as the API records it
            loop.call_soon_threadsafe(integrations._touch, made["id"])

    monkeypatch.setattr(integrations.feeds, "touch", write_while_edits_arrive)
    assert (await alice("PATCH", f"reservations/{made['id']}", {"title": "edited"})).status == 200
    try:
        reply = await asyncio.wait_for(fetch(anonymous, token), timeout=30)
    finally:
        streaming = False
        await integrations.settle()
    (event,) = parse_strictly(reply.body).values()
    assert event["summary"].startswith("edited (") and event["sequence"] == 1


async def test_sequence_grows_on_every_edit_and_uid_stays(api: Any) -> None:
    alice, anonymous = api("alice"), api(None)
    made = (await book(alice, "v1", ["gpu3:0"], soon(days=3))).body
    token = await new_feed(alice)
    ((uid, first),) = parse_strictly((await fetch(anonymous, token)).body).items()
    assert first["sequence"] == 0
    sequences = []
    for change in ({"title": "v2"}, {"duration": "2h"}, {"gpus": ["gpu3:1"]}):
        assert (await alice("PATCH", f"reservations/{made['id']}", change)).status == 200
        events = parse_strictly((await fetch(anonymous, token)).body)
        assert list(events) == [uid]
        sequences.append(events[uid]["sequence"])
    assert sequences == [1, 2, 3]
    assert events[uid]["summary"].startswith("v2 (1 GPU on gpu3")
    assert "GPUs: gpu3:1" in events[uid]["description"]
    assert events[uid]["end"] - events[uid]["start"] == timedelta(hours=2)
    # reading again changes nothing
    again = parse_strictly((await fetch(anonymous, token)).body)
    assert again[uid]["sequence"] == 3


async def test_cancellations_stay_for_a_while_then_leave(api: Any) -> None:
    alice, anonymous = api("alice"), api(None)
    made = (await book(alice, "soon gone", ["gpu3:0"], soon(days=4))).body
    token = await new_feed(alice)
    assert (await alice("DELETE", f"reservations/{made['id']}")).status == 200
    (event,) = parse_strictly((await fetch(anonymous, token)).body).values()
    assert event["status"] == "CANCELLED"
    await asyncio.sleep(3.5)  # feed_keep_cancelled is 3 s here
    assert parse_strictly((await fetch(anonymous, token)).body) == {}


async def test_rotation_and_the_token_reads_one_feed_only(api: Any, jp_fetch: Any) -> None:
    alice, bob, anonymous = api("alice"), api("bob"), api(None)
    await book(alice, "alice's", ["gpu3:0"], soon(days=5))
    await book(bob, "bob's", ["gpu3:1"], soon(days=5))
    old = await new_feed(alice)
    new = await new_feed(alice)  # rotation
    assert old != new
    gone = await fetch(anonymous, old)
    assert gone.status == 404 and "no such feed" in gone.message
    titles = [e["summary"] for e in parse_strictly((await fetch(anonymous, new)).body).values()]
    assert len(titles) == 1 and titles[0].startswith("alice's")
    bobs = await new_feed(bob)
    titles = [e["summary"] for e in parse_strictly((await fetch(anonymous, bobs)).body).values()]
    assert len(titles) == 1 and titles[0].startswith("bob's")
    # a made-up or mangled token opens nothing
    for wrong in ("gpf_" + "A" * 43, new[:-1], "tok-alice", new.upper()):
        assert (await fetch(anonymous, wrong)).status == 404, wrong
    # the feed token is no credential anywhere else: header, query parameter, either API
    for path in ("me", "reservations", "feeds", "webhooks"):
        for header in (f"token {new}", f"Bearer {new}"):
            from tornado.httpclient import HTTPClientError

            try:
                response = await jp_fetch("gpuhive", "api", path, headers={"Authorization": header})
            except HTTPClientError as error:
                response = error.response
            assert response is not None and response.code in (401, 403), (path, header)
        refused = await anonymous("GET", path, params={"token": new})
        assert refused.status in (401, 403), (path, refused)
    try:
        response = await jp_fetch("api", "contents", headers={"Authorization": f"token {new}"})
    except HTTPClientError as error:
        response = error.response
    assert response is not None and response.code in (401, 403)
    # a Jupyter token does not open a feed either
    assert (await fetch(anonymous, TOKENS["alice"])).status == 404
    # the status shows the feed without its token; turning it off makes the URL 404
    status = await alice("GET", "feeds")
    assert status.status == 200 and status.body["personal"]["token_hint"] == "…" + new[-4:]
    assert new not in str(status.body) and status.body["site"] == []
    assert (await alice("DELETE", "feeds/personal")).status == 200
    assert (await fetch(anonymous, new)).status == 404
    again = await alice("DELETE", "feeds/personal")
    assert again.status == 404 and "no calendar feed" in again.message


async def test_site_feeds_are_admin_opt_in_per_host(api: Any) -> None:
    alice, boss, anonymous = api("alice"), api("boss"), api(None)
    start = soon(days=6)
    on3 = (await alice(
        "POST", "reservations",
        {"title": "on gpu3", "description": "secret plan", "gpus": ["gpu3:0"],
         "start": iso(start), "duration": "1h"},
    )).body  # fmt: skip
    await book(api("bob"), "on gpu1", ["gpu1:0"], start)
    refused = await alice("POST", "feeds/site", {})
    assert refused.status == 403 and "admins" in refused.message
    assert (await boss("POST", "feeds/site", {"host": "gpu9"})).status == 422
    assert (await boss("POST", "feeds/site", {"colour": "red"})).status == 400
    everything = await boss("POST", "feeds/site", {})
    only3 = await boss("POST", "feeds/site", {"host": "gpu3"})
    assert everything.status == only3.status == 201
    all_events = parse_strictly(
        (await fetch(anonymous, everything.body["url"].rsplit("/", 1)[1][:-4])).body
    )
    assert sorted(e["summary"].split(" (")[0] for e in all_events.values()) == [
        "on gpu1",
        "on gpu3",
    ]
    token3 = only3.body["url"].rsplit("/", 1)[1][:-4]
    (event,) = parse_strictly((await fetch(anonymous, token3)).body).values()
    assert event["start"].isoformat() == on3["start"] and "Owner: alice" in event["description"]
    assert "secret plan" not in event["description"]  # descriptions are not public here
    listed = await boss("GET", "feeds")
    assert [f["host"] for f in listed.body["site"]] == [None, "gpu3"]
    assert (await alice("GET", "feeds")).body["site"] == []
    assert (await alice("DELETE", f"feeds/site/{only3.body['id']}")).status == 403
    assert (await boss("DELETE", f"feeds/site/{only3.body['id']}")).status == 200
    assert (await fetch(anonymous, token3)).status == 404
    assert (await boss("DELETE", f"feeds/site/{only3.body['id']}")).status == 404
    assert (await boss("DELETE", "feeds/site/x")).status == 404
    assert UTC  # times above compared as UTC instants


async def test_concurrent_first_reads_of_a_feed_all_answer(api: Any) -> None:
    """Renders that record the same new reservations at once (PostgreSQL) never collide."""
    alice, anonymous = api("alice"), api(None)
    start = soon(days=5)
    for n in range(12):
        await book(alice, f"r{n}", [f"gpu{n % 3 + 1}:{n % 4}"], start + timedelta(hours=n))
    token = await new_feed(alice)
    replies = await asyncio.gather(*(fetch(anonymous, token) for _ in range(8)))
    assert [r.status for r in replies] == [200] * 8, [r for r in replies if r.status != 200]
    uids = {frozenset(parse_strictly(r.body)) for r in replies}
    assert len(uids) == 1 and len(next(iter(uids))) == 12  # one UID per reservation, for all
