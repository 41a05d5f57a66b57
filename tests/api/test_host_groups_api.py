"""Host groups' own settings (#46 item 2): a group's administrators set the limits of the
bookings on their group's hosts and the no-show times there, and nowhere else; site admins
everywhere; by real requests to a real server (gpu1, gpu2: physics, administered by
hedy as a member of physics-heads; gpu3: chemistry, administered by carl). The limits'
tests run on SQLite and PostgreSQL (the booking guard's reads and the upsert)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from jupyter_gpuhive.model import Reservation
from jupyter_gpuhive.protection.noshow import NoShows
from tests.api.helpers import booking, refused
from tests.api.test_authorization import GROUPED, SITE_USERS
from tests.conftest import book, soon

sqlite_only = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
H = timedelta(hours=1)


@pytest.fixture
def hive_config(hive_config: dict[str, Any]) -> dict[str, Any]:
    return {**hive_config, **GROUPED, "noshow_after": "15m"}


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    jp_server_config["TokenUsersIdentityProvider"] = {"users": SITE_USERS}
    return jp_server_config


@sqlite_only
async def test_everyone_sees_the_groups_their_administrators_and_settings(api: Any) -> None:
    listed = await api("alice")("GET", "host-groups")
    assert listed.status == 200, listed
    groups = {g["name"]: g for g in listed.body["host_groups"]}
    assert set(groups) == {"physics", "chemistry"}
    assert groups["physics"]["hosts"] == ["gpu1", "gpu2"]
    assert groups["physics"]["admin_groups"] == ["physics-heads"]
    assert groups["chemistry"]["admins"] == ["carl"]
    physics = groups["physics"]
    assert physics["noshow"] == {"after_s": None, "release_after_s": None}  # the site's
    assert physics["noshow_in_force"]["after_s"] == 900
    assert physics["limits"]["gpus"] is None
    refused(await api("alice")("GET", "host-groups/biology"), 404, "no host group 'biology'",
            "chemistry, physics")  # fmt: skip


async def test_group_limits_bind_bookings_on_the_groups_hosts_only(api: Any) -> None:
    hedy, alice = api("hedy"), api("alice")
    set_ = await hedy("PUT", "host-groups/physics/limits", {"gpus": 2, "longest": "3h"})
    assert set_.status == 200, set_
    assert set_.body["limits"]["gpus"] == 2 and set_.body["limits"]["longest"] == 3 * 3600
    assert set_.body["updated_by"] == "hedy"
    t = soon(hours=2)
    await book(alice, "two", ["gpu1:0", "gpu1:1"], t, "1h")
    # a third GPU of physics at the same time is over its limit; gpu3 (chemistry) is not
    refused(await alice("POST", "reservations", booking(["gpu2:0"], t, t + H)), 409,
            "You would hold 3 GPUs at once", "your limit is 2",
            "the limit of host group physics, on its hosts")  # fmt: skip
    assert (await book(alice, "chem", ["gpu3:0", "gpu3:1", "gpu3:2"], t, "1h")).status == 201
    refused(await alice("POST", "reservations", booking(["gpu2:1"], t + 2 * H, t + 6 * H)),
            422, "host group physics")  # fmt: skip
    # a site admin and the group's own administrator are not bound on its hosts
    assert (await book(hedy, "mine", ["gpu2:0", "gpu2:1", "gpu2:2"], t, "1h")).status == 201
    # forgotten: alice books the third GPU
    cleared = await hedy("DELETE", "host-groups/physics/limits")
    assert cleared.status == 200 and cleared.body["limits"]["gpus"] is None, cleared
    assert (await book(alice, "three", ["gpu1:2"], t, "1h")).status == 201


@sqlite_only
async def test_cross_group_changes_are_refused_and_say_who_may(api: Any) -> None:
    hedy, carl, boss, alice = api("hedy"), api("carl"), api("boss"), api("alice")
    for path, body in (("limits", {"gpus": 1}), ("noshow", {"after": "5m"})):
        words = refused(await hedy("PUT", f"host-groups/chemistry/{path}", body), 403,
                        "hedy may not set a host group's limits or no-show settings",
                        "gpu3 belongs to host group chemistry",
                        "Who may: chemistry's administrators (carl), gpuhive admins")  # fmt: skip
        assert "physics" not in words
        refused(await hedy("DELETE", f"host-groups/chemistry/{path}"), 403, "carl")
        refused(await carl("PUT", f"host-groups/physics/{path}", body), 403,
                "members of physics-heads")  # fmt: skip
        refused(await alice("PUT", f"host-groups/physics/{path}", body), 403,
                "Only gpuhive admins may")  # fmt: skip
        assert (await carl("PUT", f"host-groups/chemistry/{path}", body)).status == 200
        assert (await boss("PUT", f"host-groups/physics/{path}", body)).status == 200
    refused(await boss("PUT", "host-groups/biology/limits", {"gpus": 1}), 404, "biology")


@sqlite_only
async def test_bad_settings_are_refused(api: Any) -> None:
    hedy = api("hedy")
    cases = [
        ("limits", {"gpus": -1}, 422, "gpus"),
        ("limits", {"gpus": "two"}, 400, "gpus"),
        ("limits", {"colour": "red"}, 400, "Unknown limit"),
        ("limits", [1], 400, ""),
        ("noshow", {"after": "soon"}, 422, "after"),
        ("noshow", {"after": -5}, 422, "after"),
        ("noshow", {"release_after": 0}, 422, "release_after"),
        ("noshow", {"later": "5m"}, 400, "Unknown field"),
    ]
    for path, body, status, words in cases:
        reply = await hedy("PUT", f"host-groups/physics/{path}", body)
        assert reply.status == status, (path, body, reply)
        assert words in reply.message, reply.message


@sqlite_only
async def test_a_groups_noshow_times_replace_the_sites_on_its_hosts(
    api: Any, jp_serverapp: Any
) -> None:
    hedy, carl = api("hedy"), api("carl")
    off = await hedy("PUT", "host-groups/physics/noshow", {"after": "off"})
    assert off.status == 200, off
    assert off.body["noshow"]["after_s"] == 0
    assert off.body["noshow_in_force"]["words"] == "no-shows are not watched"
    quick = await carl("PUT", "host-groups/chemistry/noshow",
                       {"after": "5m", "release_after": "10m"})  # fmt: skip
    assert quick.status == 200 and quick.body["noshow_in_force"]["after_s"] == 300, quick
    hive = jp_serverapp.web_app.settings["gpuhive"]
    noshows: NoShows = hive.protection.noshows
    assert await noshows.refresh() is True
    t = soon()
    ours = await book(api("alice"), "physics", ["gpu1:0"], t, "1h")
    theirs = await book(api("alice"), "chemistry", ["gpu3:0"], t, "1h")
    get = hive.store.reservations.get
    physics: Reservation = get(ours.body["id"])
    chemistry: Reservation = get(theirs.body["id"])
    assert noshows.times(physics) == (timedelta(0), timedelta(minutes=30))  # not watched
    assert noshows.times(chemistry) == (timedelta(minutes=5), timedelta(minutes=10))
    # forgotten: the site's 15 minutes again
    assert (await hedy("DELETE", "host-groups/physics/noshow")).status == 200
    await noshows.refresh()
    assert noshows.times(physics) == (timedelta(minutes=15), timedelta(minutes=30))


async def test_a_lowered_group_limit_flags_the_bookings_over_it_never_deletes(api: Any) -> None:
    hedy, alice = api("hedy"), api("alice")
    t = soon(hours=2)
    first = (await book(alice, "first", ["gpu1:0"], t, "1h")).body["id"]
    second = (await book(alice, "second", ["gpu2:0"], t, "1h")).body["id"]
    elsewhere = (await book(alice, "chem", ["gpu3:0", "gpu3:1"], t, "1h")).body["id"]
    lowered = await hedy("PUT", "host-groups/physics/limits", {"gpus": 1})
    assert lowered.status == 200, lowered
    flags = lowered.body["flag_changes"]
    assert set(flags) == {str(second)}, flags  # the later one on physics's hosts
    assert "over the limit of 1 (host group physics's limit)" in flags[str(second)], flags
    shown = await alice("GET", f"reservations/{second}")
    assert shown.status == 200 and shown.body["status"] != "cancelled", shown
    for rid in (first, elsewhere):
        assert (await alice("GET", f"reservations/{rid}")).status == 200
    cleared = await hedy("DELETE", "host-groups/physics/limits")
    assert cleared.body["flag_changes"] == {str(second): None}, cleared.body
