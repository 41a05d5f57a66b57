"""Approvals (#46, item 4), by real requests to a real server on SQLite and PostgreSQL.

gpu1 and gpu2 belong to host group physics (administered by the members of physics-heads:
hedy), gpu3 to chemistry (carl). Bookings of more than 2 GPUs or 6 GPU-hours on physics's
hosts, and of more than 1 GPU on gpu3, wait for approval; a tentative booking is held 2 h.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from jupyter_gpuhive.errors import Invalid
from jupyter_gpuhive.integrations.subscriptions import AVAILABILITY_SCHEMA_ID
from jupyter_gpuhive.model import Gpu, Reservation
from jupyter_gpuhive.model.approvals import Threshold, parse_approvals
from tests.conftest import HOSTS, USERS, book, iso, soon
from tests.integrations.helpers import fetch, new_feed, parse_strictly
from tests.integrations.receiver import Receiver, receiving
from tests.integrations.test_webhooks import add_hook
from tests.protection import conftest as mailing
from tests.protection.conftest import Mailbox
from tests.support.waiting import until

SITE_USERS = {
    **USERS,
    "tok-hedy": {"name": "hedy", "groups": ["physics-heads"]},
    "tok-carl": {"name": "carl", "groups": []},
}
GROUPED_HOSTS = [
    {**host, "group": "chemistry" if host["name"] == "gpu3" else "physics"} for host in HOSTS
]
HOLD = timedelta(hours=2)
smtp_server = mailing.smtp_server  # a real SMTP server (aiosmtpd)


@pytest.fixture
def hive_config(hive_config: dict[str, Any], smtp_server: Mailbox) -> dict[str, Any]:
    return {
        **hive_config,
        "hosts": GROUPED_HOSTS,
        "host_groups": {
            "physics": {"admin_groups": ["physics-heads"]},
            "chemistry": {"admins": ["carl"]},
        },
        "approvals": {"physics": {"gpus": 2, "gpu_hours": 6}, "gpu3": {"gpus": 1}},
        "approval_hold": "2h",
        "notify_email": {
            "host": "127.0.0.1",
            "port": smtp_server.port,
            "sender": "gpuhive@example.org",
            "address_template": "{user}@example.org",
        },
        "webhook_allow_private": True,  # the receivers listen on 127.0.0.1
    }


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    jp_server_config["TokenUsersIdentityProvider"] = {"users": SITE_USERS}
    return jp_server_config


async def test_a_big_booking_holds_its_slot_until_an_administrator_of_its_group_approves(
    api: Any,
) -> None:
    alice, bob, hedy, carl = api("alice"), api("bob"), api("hedy"), api("carl")
    t = soon()
    big = (await book(alice, "big", ["gpu1:0", "gpu1:1", "gpu1:2"], t)).body
    assert big["tentative"] is True and big["status"] == "upcoming", big
    assert big["may_approve"] is False
    held = big["tentative_until"]
    assert held is not None
    small = (await book(alice, "small", ["gpu1:3"], t)).body
    assert small["tentative"] is False and small["tentative_until"] is None
    # its slot is held: nobody else can book it meanwhile
    taken = await bob("POST", "reservations",
                      {"title": "x", "gpus": ["gpu1:1"], "start": iso(t), "duration": "1h"})  # fmt: skip
    assert taken.status == 409, taken
    # shown as tentative in listings and the overview; hedy may answer it, alice may not
    window = {"start": iso(t - timedelta(hours=1)), "end": iso(t + timedelta(hours=2))}
    listed = {r["id"]: r for r in (await hedy("GET", "reservations", params=window)).body[
        "reservations"]}  # fmt: skip
    assert listed[big["id"]]["tentative"] and listed[big["id"]]["may_approve"]
    assert not listed[small["id"]]["tentative"]
    overview = await alice("GET", "overview", params={**window, "host": "gpu1"})
    assert overview.status == 200, overview
    assert overview.body["reservations"][str(big["id"])]["tentative"] is True
    assert overview.body["reservations"][str(small["id"])]["tentative"] is False
    # who may not answer: the holder herself, another group's administrator (who says who may)
    own = await alice("POST", f"reservations/{big['id']}/approve")
    assert own.status == 403 and "alice may not approve or decline this booking" in own.message
    other = await carl("POST", f"reservations/{big['id']}/approve")
    assert other.status == 403, other
    assert "gpu1 belongs to host group physics" in other.message
    assert "physics's administrators (members of physics-heads), gpuhive admins" in other.message
    # hedy and the site admin answer at once: one answer counts, the other is a 409
    done, late = await asyncio.gather(
        hedy("POST", f"reservations/{big['id']}/approve", {"reason": "go ahead"}),
        api("boss")("POST", f"reservations/{big['id']}/approve"),
    )
    if done.status != 200:
        done, late = late, done
    assert done.status == 200, done
    assert late.status == 409 and "it is confirmed" in late.message, late
    assert done.body["tentative"] is False and done.body["status"] == "upcoming"
    assert done.body["may_approve"] is False
    # approving again, or a booking that never waited, is a 409
    again = await hedy("POST", f"reservations/{big['id']}/decline")
    assert again.status == 409 and "it is confirmed" in again.message, again
    never = await api("boss")("POST", f"reservations/{small['id']}/approve")
    assert never.status == 409 and "does not wait for approval" in never.message
    # unknown ids
    assert (await hedy("POST", "reservations/987654/approve")).status == 404
    assert (await hedy("POST", "reservations/abc/decline")).status == 404


async def test_a_declined_booking_frees_its_slot_and_bad_answers_are_refused(api: Any) -> None:
    alice, bob, carl = api("alice"), api("bob"), api("carl")
    t = soon(3)
    wanted = ["gpu3:0", "gpu3:1"]
    big = (await book(alice, "two on gpu3", wanted, t)).body
    assert big["tentative"], big
    rid = big["id"]
    bad = await carl("POST", f"reservations/{rid}/decline", {"reason": 5})
    assert bad.status == 400 and "reason" in bad.message, bad
    long = await carl("POST", f"reservations/{rid}/decline", {"reason": "x" * 1001})
    assert long.status == 422, long
    extra = await carl("POST", f"reservations/{rid}/decline", {"why": "no"})
    assert extra.status == 400, extra
    # physics's administrator is not chemistry's
    hedy = await api("hedy")("POST", f"reservations/{rid}/decline")
    assert hedy.status == 403 and "chemistry's administrators (carl)" in hedy.message
    declined = await carl("POST", f"reservations/{rid}/decline", {"reason": "term is full"})
    assert declined.status == 200, declined
    assert declined.body["status"] == "cancelled" and declined.body["tentative"] is False
    assert (await carl("POST", f"reservations/{rid}/approve")).status == 409
    # the slot is free again
    await book(bob, "after the decline", wanted[:1], t)


async def test_nothing_runs_on_a_tentative_booking(api: Any, jp_serverapp: Any) -> None:
    alice = api("alice")
    hive = jp_serverapp.web_app.settings["gpuhive"]
    big = (await book(alice, "long", ["gpu2:0"], hive.now(), "8h")).body  # 8 GPU-hours > 6
    assert big["tentative"] and big["status"] == "active", big
    job = await alice("POST", "jobs", {"name": "j", "command": "true", "reservation": big["id"]})
    assert job.status == 409, job
    assert f"Reservation {big['id']} is tentative" in job.message
    assert "approval" in job.message
    with pytest.raises(Exception, match="tentative"):
        await hive.kernels.place(big["id"], None, None)
    # a confirmed booking grown past the threshold waits again
    small = (await book(alice, "short", ["gpu2:1"], hive.now() + timedelta(days=2))).body
    assert not small["tentative"]
    grown = await alice("PATCH", f"reservations/{small['id']}", {"duration": "7h"})
    assert grown.status == 200 and grown.body["tentative"] is True, grown


async def test_an_unanswered_booking_is_released_when_its_hold_ends(
    api: Any, jp_serverapp: Any, smtp_server: Mailbox
) -> None:
    alice, bob = api("alice"), api("bob")
    hive = jp_serverapp.web_app.settings["gpuhive"]
    t = soon(5)
    big = (await book(alice, "unanswered", ["gpu3:2", "gpu3:3"], t)).body
    now = hive.now()
    # not yet: the hold has not ended
    assert await hive.bookings.release_unanswered(now + HOLD - timedelta(minutes=1)) == []
    assert (await alice("GET", f"reservations/{big['id']}")).body["tentative"] is True
    released = await hive.bookings.release_unanswered(now + HOLD + timedelta(seconds=1))
    assert [r.id for r in released] == [big["id"]]
    shown = (await alice("GET", f"reservations/{big['id']}")).body
    assert shown["status"] == "cancelled" and shown["tentative"] is False
    assert await hive.bookings.release_unanswered(now + 2 * HOLD) == []  # once
    await book(bob, "the freed slot", ["gpu3:2"], t)
    # the holder is told, by mail too
    await until(lambda: any("alice@example.org" in m["to"] for m in smtp_server.messages))
    (mail,) = [m for m in smtp_server.messages if m["to"] == ["alice@example.org"]]
    assert "was not approved in time" in mail["data"]
    assert "Nobody approved alice's booking" in mail["data"]


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_approvers_and_the_holder_are_told_on_every_channel(
    api: Any, jp_serverapp: Any, smtp_server: Mailbox
) -> None:
    alice, hedy = api("alice"), api("hedy")
    notices: list[dict[str, Any]] = []

    async def listen(logger: Any, schema_id: str, data: dict[str, Any]) -> None:
        notices.append(dict(data))

    jp_serverapp.event_logger.add_listener(schema_id=AVAILABILITY_SCHEMA_ID, listener=listen)
    assert (await hedy("GET", "me")).status == 200  # gpuhive knows her groups from now on
    with receiving(Receiver()) as mine, receiving(Receiver()) as hers:
        await add_hook(alice, mine, events=["reservation.approved", "reservation.tentative"])
        await add_hook(hedy, hers, events=["reservation.tentative"])
        big = (await book(alice, "asks", ["gpu2:0", "gpu2:1", "gpu2:2"], soon(7))).body
        await hers.until(1)
        await until(lambda: any(n["user"] == "hedy" for n in notices) and smtp_server.messages)
        asked = hers.new_events[0]
        assert asked["data"]["reservation"]["id"] == big["id"]
        assert asked["data"]["approvers"] == ["hedy"]
        (to_hedy,) = [n for n in notices if n["user"] == "hedy"]
        assert "waits for your approval" in to_hedy["message"]
        assert to_hedy["offer"] == {"approval": "tentative", "reservation": big["id"]}
        (mail,) = smtp_server.messages
        assert mail["to"] == ["hedy@example.org"] and "Approval asked" in mail["data"]
        assert (await hedy("POST", f"reservations/{big['id']}/approve")).status == 200
        await mine.until(2)  # tentative, then approved
        kinds = [e["event"] for e in mine.new_events]
        assert kinds == ["reservation.tentative", "reservation.approved"], kinds
        await until(lambda: any(n["user"] == "alice" for n in notices))
        await until(lambda: len(smtp_server.messages) == 2)
    (to_alice,) = [n for n in notices if n["user"] == "alice"]
    assert to_alice["message"].startswith("hedy approved alice's booking")
    assert smtp_server.messages[1]["to"] == ["alice@example.org"]


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_the_calendar_feed_says_tentative_then_confirmed(api: Any) -> None:
    alice, hedy, anonymous = api("alice"), api("hedy"), api(None)
    token = await new_feed(alice)
    big = (await book(alice, "feed", ["gpu1:0", "gpu1:1", "gpu1:2"], soon(9))).body
    small = (await book(alice, "small", ["gpu1:3"], soon(9))).body
    events = parse_strictly((await fetch(anonymous, token)).body)
    by_title = {str(e["summary"]).split(" (")[0]: e for e in events.values()}
    assert by_title["feed"]["status"] == "TENTATIVE"
    assert by_title["small"]["status"] == "CONFIRMED"
    before = by_title["feed"]["sequence"]
    assert (await hedy("POST", f"reservations/{big['id']}/approve")).status == 200
    events = parse_strictly((await fetch(anonymous, token)).body)
    by_title = {str(e["summary"]).split(" (")[0]: e for e in events.values()}
    assert by_title["feed"]["status"] == "CONFIRMED"
    assert by_title["feed"]["sequence"] > before  # calendars take the change
    assert small["id"] != big["id"]


def test_thresholds_are_read_strictly_and_weigh_shares() -> None:
    hosts, groups = ["gpu1", "gpu3"], ["physics"]
    rules = parse_approvals({"physics": {"gpu_hours": 4}}, HOLD, hosts, groups)
    assert rules.thresholds == {"physics": Threshold(gpu_hours=4.0)}
    for bad, words in (
        ({"nowhere": {"gpus": 1}}, "neither a configured host nor a host group"),
        ({"gpu1": {"gpu": 1}}, "must be"),
        ({"gpu1": {}}, "must be"),
        ({"gpu1": {"gpus": -1}}, "at least 0"),
        ({"gpu1": {"gpus": True}}, "a number"),
        ({"gpu1": {"gpus": 1.5}}, "whole number"),
    ):
        with pytest.raises(Invalid, match=words):
            parse_approvals(bad, HOLD, hosts, groups)
    with pytest.raises(Invalid, match="approval_hold"):
        parse_approvals({}, timedelta(0), hosts, groups)
    # a quarter of a GPU for 12 h is 3 GPU-hours: under 4; the whole GPU is 12
    start = soon()
    gpu = Gpu(id=1, host="gpu1", index=0, uuid="u")
    quarter = Reservation(1, "a", "t", "", start, start + timedelta(hours=12), (gpu,), start,
                          share_ppm=250_000)  # fmt: skip
    assert rules.needed(quarter, lambda host: "physics") is None
    whole = Reservation(2, "a", "t", "", start, start + timedelta(hours=12), (gpu,), start)
    needed = rules.needed(whole, lambda host: "physics")
    assert needed == ("12 GPU-hours is more than 4 on host group physics", frozenset({"gpu1"}))
    assert rules.needed(whole, lambda host: None) is None  # a host in no group: no threshold
