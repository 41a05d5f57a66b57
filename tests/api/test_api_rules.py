"""Access rules through the REST API: enforcement, visibility, coverage, flagging."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from tests.api.helpers import WARSAW, at_local, booking, next_local, refused, snapshot
from tests.conftest import iso

OFFICE = {"days": ["mon-fri"], "start": "08:00", "end": "16:00"}


async def test_no_rules_everyone_books_everything(api: Any) -> None:
    assert (await api("boss")("GET", "rules")).body == {"rules": []}
    sat = next_local("sat", 1)
    for user, gpu in (("alice", "gpu1:0"), ("carol", "gpu2:0"), ("bob", "gpu3:3")):
        made = await api(user)(
            "POST", "reservations", booking([gpu], sat, sat + timedelta(hours=30))
        )
        assert made.status == 201, made
    coverage = await api("carol")("GET", "rules/coverage", params={"gpu": "gpu1:0"})
    assert coverage.status == 200
    assert coverage.body["unrestricted"] is True
    assert len(coverage.body["gpus"]["gpu1:0"]) == 1


async def test_rules_decide_who_may_book_what_and_when(api: Any) -> None:
    alice, bob, carol, boss = api("alice"), api("bob"), api("carol"), api("boss")
    office = await boss(
        "POST", "rules", {"name": "phd office hours", "groups": ["phd"], "windows": [OFFICE]}
    )
    assert office.status == 201, office
    assert office.body["windows"] == [
        {"days": ["mon", "tue", "wed", "thu", "fri"], "start": "08:00", "end": "16:00"}
    ]
    assert office.body["groups"] == ["phd"]
    nights = await boss(
        "POST",
        "rules",
        {"name": "carol nights", "users": ["carol"], "hosts": ["gpu3"],
         "windows": [{"days": "mon-sun", "start": "22:00", "end": "06:00"}]},
    )  # fmt: skip
    assert nights.status == 201, nights
    shared = await boss(
        "POST",
        "rules",
        {
            "name": "shared card",
            "users": ["*"],
            "gpus": ["gpu2:3"],
            "valid_from": "2026-01-01",
            "valid_until": "2099-12-31",
        },
    )
    assert shared.status == 201, shared

    tue = next_local("tue", 9)
    day = tue.astimezone(WARSAW).date()
    ok = await alice("POST", "reservations", booking(["gpu1:0", "gpu2:1"], tue, at_local(day, 12)))
    assert ok.status == 201, ok
    before = await snapshot(boss)
    late = await bob(
        "POST", "reservations", booking(["gpu1:1"], at_local(day, 15), at_local(day, 17))
    )
    message = refused(late, 403, "bob", "gpu1:1", "16:00", "17:00", "Tue", "Europe/Warsaw")
    assert late.body["gpus"] == ["gpu1:1"]
    assert "15:00" not in message  # only the part that is not covered is named
    weekend = next_local("sat", 10)
    refused(
        await alice(
            "POST", "reservations", booking(["gpu1:0"], weekend, weekend + timedelta(hours=1))
        ),
        403,
        "alice",
        "Sat",
    )
    # carol: nights on gpu3 only
    refused(
        await carol("POST", "reservations", booking(["gpu1:0"], tue, at_local(day, 12))),
        403,
        "carol",
        "gpu1:0",
    )
    night = await carol(
        "POST",
        "reservations",
        booking(["gpu3:0"], at_local(day, 23), at_local(day, 23) + timedelta(hours=6)),
    )
    assert night.status == 201, night
    refused(
        await carol(
            "POST", "reservations", booking(["gpu3:1"], at_local(day, 21), at_local(day, 23))
        ),
        403,
        "gpu3:1",
        "21:00",
        "22:00",
    )
    # everyone may use the shared card any time
    anytime = await carol(
        "POST", "reservations", booking(["gpu2:3"], weekend, weekend + timedelta(hours=2))
    )
    assert anytime.status == 201, anytime
    # admins are not restricted
    by_admin = await boss(
        "POST", "reservations", booking(["gpu1:1"], weekend, weekend + timedelta(hours=2))
    )
    assert by_admin.status == 201, by_admin
    # an admin booking for alice is checked against alice's rules
    refused(
        await boss(
            "POST",
            "reservations",
            {**booking(["gpu1:2"], weekend, weekend + timedelta(hours=1)), "owner": "alice"},
        ),
        403,
        "alice",
    )
    after = await snapshot(boss)
    assert {r["id"] for r in after} - {r["id"] for r in before} == {
        night.body["id"],
        anytime.body["id"],
        by_admin.body["id"],
    }

    # extending alice's reservation past 16:00 is refused; shortening is fine
    rid = ok.body["id"]
    refused(
        await alice("PATCH", f"reservations/{rid}", {"end": iso(at_local(day, 17))}), 403, "16:00"
    )
    assert (
        await alice("PATCH", f"reservations/{rid}", {"end": iso(at_local(day, 11))})
    ).status == 200

    # each user reads the rules that apply to them; admins read all
    def names(reply: Any) -> list[str]:
        assert reply.status == 200, reply
        return [r["name"] for r in reply.body["rules"]]

    assert names(await alice("GET", "rules")) == ["phd office hours", "shared card"]
    assert names(await carol("GET", "rules")) == ["carol nights", "shared card"]
    assert names(await boss("GET", "rules")) == ["phd office hours", "carol nights", "shared card"]
    one = await alice("GET", f"rules/{office.body['id']}")
    assert one.status == 200
    assert one.body["name"] == "phd office hours"
    refused(await alice("GET", f"rules/{nights.body['id']}"), 404, "no access rule")

    # coverage: the spans alice may book gpu1:0 on that Tuesday, and on gpu2:3 all day
    coverage = await alice(
        "GET",
        "rules/coverage",
        params={"start": iso(at_local(day, 0)), "end": iso(at_local(day, 24)), "host": "gpu2"},
    )
    assert coverage.status == 200, coverage
    assert coverage.body["unrestricted"] is False
    assert coverage.body["timezone"] == "Europe/Warsaw"
    spans = coverage.body["gpus"]
    assert sorted(spans) == ["gpu2:0", "gpu2:1", "gpu2:2", "gpu2:3"]
    assert [[datetime.fromisoformat(a), datetime.fromisoformat(b)] for a, b in spans["gpu2:0"]] == [
        [at_local(day, 8), at_local(day, 16)]
    ]
    assert [[datetime.fromisoformat(a), datetime.fromisoformat(b)] for a, b in spans["gpu2:3"]] == [
        [at_local(day, 0), at_local(day, 24)]
    ]
    carol_cov = await carol("GET", "rules/coverage", params={"gpu": "gpu1:0"})
    assert carol_cov.body["gpus"] == {"gpu1:0": []}
    assert (await boss("GET", "rules/coverage", params={"gpu": "gpu1:0"})).body[
        "unrestricted"
    ] is True


async def test_rule_changes_flag_and_unflag_future_reservations(api: Any) -> None:
    alice, boss = api("alice"), api("boss")
    sat = next_local("sat", 10)
    tue = next_local("tue", 10)
    weekend = await alice(
        "POST", "reservations", booking(["gpu1:0"], sat, sat + timedelta(hours=2))
    )
    weekday = await alice(
        "POST", "reservations", booking(["gpu1:1"], tue, tue + timedelta(hours=2))
    )
    assert (weekend.status, weekday.status) == (201, 201)
    wid, did = weekend.body["id"], weekday.body["id"]

    added = await boss("POST", "rules", {"name": "office", "groups": ["phd"], "windows": [OFFICE]})
    assert added.status == 201, added
    assert set(added.body["flag_changes"]) == {str(wid)}
    flagged = await alice("GET", f"reservations/{wid}")
    assert flagged.body["flagged"] is True
    assert "alice" in flagged.body["flag_reason"]
    assert "gpu1:0" in flagged.body["flag_reason"]
    assert "no longer allow" in flagged.body["flag_reason"]
    assert (await alice("GET", f"reservations/{did}")).body["flagged"] is False
    listed = {r["id"]: r for r in await snapshot(alice)}
    assert listed[wid]["flagged"] is True
    assert listed[wid]["status"] == "upcoming"  # flagged, never deleted

    rule_id = added.body["id"]
    widened = await boss("PUT", f"rules/{rule_id}", {"name": "office", "groups": ["phd"]})
    assert widened.status == 200, widened
    assert widened.body["windows"] == []
    assert widened.body["flag_changes"] == {str(wid): None}
    assert (await alice("GET", f"reservations/{wid}")).body["flagged"] is False

    narrowed = await boss(
        "PUT",
        f"rules/{rule_id}",
        {"name": "office", "groups": ["phd"], "windows": [OFFICE], "hosts": ["gpu2"]},
    )
    assert narrowed.status == 200, narrowed
    assert set(narrowed.body["flag_changes"]) == {str(wid), str(did)}
    for rid in (wid, did):
        assert (await alice("GET", f"reservations/{rid}")).body["flagged"] is True

    deleted = await boss("DELETE", f"rules/{rule_id}")
    assert deleted.status == 200, deleted
    assert deleted.body["deleted"] == rule_id
    assert set(deleted.body["flag_changes"]) == {str(wid), str(did)}
    assert all(v is None for v in deleted.body["flag_changes"].values())
    after = {r["id"]: r for r in await snapshot(alice)}
    assert set(after) == {wid, did}
    assert not any(r["flagged"] or r["flag_reason"] for r in after.values())
    assert {r["status"] for r in after.values()} == {"upcoming"}
    assert (await boss("GET", "rules")).body == {"rules": []}
