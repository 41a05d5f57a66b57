"""Kernelspecs 'Python on my reservation …': one per active or upcoming reservation of the user."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_gpuhive.kernels.specs import display_name, reservation_of, spec_name
from tests.conftest import TOKENS, UTC, book, soon

SQLITE = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # the store is not the point


async def specs_of(jp_fetch: Any, user: str) -> dict[str, Any]:
    """GET /api/kernelspecs as `user`: the kernelspecs Jupyter's launcher would show."""
    reply = await jp_fetch("api", "kernelspecs", headers={"Authorization": f"token {TOKENS[user]}"})
    return json.loads(reply.body)["kernelspecs"]  # type: ignore[no-any-return]


@SQLITE
async def test_each_active_or_upcoming_reservation_is_a_kernelspec(jp_fetch: Any, api: Any) -> None:
    now = datetime.now(UTC)
    active = (await book(api("alice"), "now", ["gpu1:0", "gpu1:1"], now, "2h")).body
    later = (await book(api("alice"), "later", ["gpu2:3"], soon(3), "1h")).body
    theirs = (await book(api("bob"), "bob's", ["gpu3:0"], now, "1h")).body
    gone = (await book(api("alice"), "gone", ["gpu3:1"], soon(5), "1h")).body
    assert (await api("alice")("DELETE", f"reservations/{gone['id']}")).status == 200

    mine = await specs_of(jp_fetch, "alice")
    assert "python3" in mine  # the configured kernels stay
    ours = {name: s for name, s in mine.items() if reservation_of(name) is not None}
    assert set(ours) == {spec_name(active["id"]), spec_name(later["id"])}
    now_spec = ours[spec_name(active["id"])]["spec"]
    assert now_spec["display_name"].startswith("Python on my reservation: gpu1:0,1 until ")
    assert now_spec["metadata"]["kernel_provisioner"] == {
        "provisioner_name": "gpuhive",
        "config": {"reservation_id": active["id"]},
    }
    assert now_spec["language"] == "python"
    assert "from " in ours[spec_name(later["id"])]["spec"]["display_name"]  # upcoming: from … until

    bobs = await specs_of(jp_fetch, "bob")
    assert [n for n in bobs if reservation_of(n) is not None] == [spec_name(theirs["id"])]


@SQLITE
async def test_one_spec_by_name_and_an_unknown_name(jp_fetch: Any, api: Any) -> None:
    made = (await book(api("alice"), "now", ["gpu1:2"], datetime.now(UTC), "1h")).body
    headers = {"Authorization": f"token {TOKENS['alice']}"}
    await specs_of(jp_fetch, "alice")  # the list names it; the single spec keeps that name
    one = json.loads(
        (await jp_fetch("api", "kernelspecs", spec_name(made["id"]), headers=headers)).body
    )
    assert one["spec"]["display_name"].startswith("Python on my reservation: gpu1:2 until ")
    with pytest.raises(HTTPClientError) as missing:
        await jp_fetch("api", "kernelspecs", "no-such-kernel", headers=headers)
    assert missing.value.code == 404


@SQLITE
async def test_an_ended_reservation_is_no_longer_offered(jp_fetch: Any, api: Any) -> None:
    made = (await book(api("carol"), "short", ["gpu2:0"], datetime.now(UTC), "1h")).body
    assert spec_name(made["id"]) in await specs_of(jp_fetch, "carol")
    assert (await api("carol")("DELETE", f"reservations/{made['id']}")).status == 200  # ends now
    assert spec_name(made["id"]) not in await specs_of(jp_fetch, "carol")


def test_display_names_say_gpus_and_times() -> None:
    from zoneinfo import ZoneInfo

    from jupyter_gpuhive.model import Gpu, Reservation

    zone = ZoneInfo("Europe/Warsaw")
    now = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)  # a Monday
    gpus = tuple(
        Gpu(id=i, host=h, index=x, uuid=f"GPU-{i}")
        for i, (h, x) in enumerate([("a", 0), ("a", 1), ("b", 2)])
    )
    res = Reservation(
        1, "alice", "t", "", now - timedelta(hours=1), now + timedelta(hours=5), gpus, now
    )
    assert display_name(res, now, zone) == "Python on my reservation: a:0,1 b:2 until 16:00"
    later = Reservation(
        2, "alice", "t", "", now + timedelta(days=1), now + timedelta(days=1, hours=2), gpus, now
    )
    assert (
        display_name(later, now, zone)
        == "Python on my reservation: a:0,1 b:2 from Tue 11:00 until Tue 13:00"
    )
