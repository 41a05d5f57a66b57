"""gpuhive in front of a real Slurm cluster, through the REST API: inventory and node states
from Slurm, bookings held as Slurm reservations for their owners, refusals rolled back, and
reservations changed or deleted behind gpuhive's back restored or released (issue #47)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from jupyter_gpuhive.hosts.slurm import SlurmReservation, parse_reservations
from jupyter_gpuhive.jobs.slurm import queued_elsewhere
from jupyter_gpuhive.model.engines import engine_name
from tests.conftest import iso, soon
from tests.slurm.conftest import ACCOUNTS, slurm_hosts
from tests.support.slurm import GPUS_PER_NODE, SlurmCluster
from tests.support.waiting import until

WHOLE_N1 = [f"n1:{i}" for i in range(GPUS_PER_NODE)]


@pytest.fixture
def hive_config(hive_config: dict[str, Any], slurm: SlurmCluster) -> dict[str, Any]:
    return {**hive_config, "hosts": slurm_hosts(slurm), "unix_users": ACCOUNTS,
            "poll_interval": 0.5}  # fmt: skip


def held(slurm: SlurmCluster) -> dict[str, SlurmReservation]:
    """Slurm's reservations now, by name (read with TZ=UTC, as gpuhive reads them)."""
    text = slurm.scontrol("show", "reservation", "-o").stdout
    return {r.name: r for r in parse_reservations(text)}


async def inventory(call: Any) -> dict[str, Any]:
    """GET hosts once both nodes show their GPUs (the first sweep read them from Slurm)."""

    async def both() -> dict[str, Any] | None:
        hosts = {h["name"]: h for h in (await call("GET", "hosts")).body["hosts"]}
        ready = all(len(h["gpus"]) == GPUS_PER_NODE for h in hosts.values())
        return hosts if ready and len(hosts) == 2 else None

    found: dict[str, Any] = await until(both, 30, "both Slurm nodes with their GPUs")
    return found


async def test_nodes_gpus_and_drains_come_from_slurm(api, running_hive, slurm) -> None:
    alice = api("alice")
    hosts = await inventory(alice)
    assert {g["model"] for g in hosts["n1"]["gpus"]} == {"a100"}
    assert {g["model"] for g in hosts["n2"]["gpus"]} == {"h100"}
    assert {g["state"] for h in hosts.values() for g in h["gpus"]} == {"free"}

    slurm.scontrol("update", "nodename=n2", "state=drain", "reason=swapping fans")

    async def states(node: str, state: str) -> list[dict[str, Any]] | None:
        hosts = {h["name"]: h for h in (await alice("GET", "hosts")).body["hosts"]}
        gpus: list[dict[str, Any]] = hosts[node]["gpus"]
        return gpus if {g["state"] for g in gpus} == {state} else None

    gpus = await until(lambda: states("n2", "drained"), 30, "n2's GPUs drained with the node")
    assert gpus[0]["health"]["drained_by"] == "Slurm"
    assert gpus[0]["health"]["drain_reason"] == "swapping fans (node n2, by root)"
    start = soon()
    refused = await alice("POST", "reservations", {"title": "t", "gpus": ["n2:0"],
                                                   "start": iso(start), "duration": "1h"})  # fmt: skip
    assert refused.status == 409, refused
    assert "drained for maintenance by Slurm: swapping fans (node n2, by root)" in refused.message
    assert held(slurm) == {}
    # a booking by count finds only n1's GPUs while n2 is drained
    found = await alice("POST", "reservations/search", {"count": 4, "duration": "1h",
                                                        "not_before": iso(start)})  # fmt: skip
    assert found.status == 200, found
    assert found.body["slots"], found
    assert {ref.split(":")[0] for slot in found.body["slots"] for ref in slot["gpus"]} == {"n1"}
    # n1 is untouched, and n2 opens again when Slurm resumes it
    assert {g["state"] for g in (await inventory(alice))["n1"]["gpus"]} == {"free"}
    slurm.scontrol("update", "nodename=n2", "state=resume")

    async def reopened() -> bool:
        hosts = {h["name"]: h for h in (await alice("GET", "hosts")).body["hosts"]}
        return {g["state"] for g in hosts["n2"]["gpus"]} == {"free"}

    await until(reopened, 30, "n2's GPUs free again after Slurm resumed it")
    # an admin's own drain of a GPU on an open node is theirs: Slurm's sweeps leave it
    drained = await api("boss")("POST", "health/drain", {"gpu": "n1:0", "reason": "testing"})
    assert drained.status == 200, drained
    sampler = running_hive.monitor.sampler
    seen = sampler.sweeps
    await until(lambda: sampler.sweeps >= seen + 2, 30, "two more sweeps")
    n1 = {h["name"]: h for h in (await alice("GET", "hosts")).body["hosts"]}["n1"]["gpus"]
    assert n1[0]["state"] == "drained" and n1[0]["health"]["drained_by"] == "boss"
    assert {g["state"] for g in n1[1:]} == {"free"}
    # a node Slurm sets down fails its GPUs, with Slurm's reason
    slurm.scontrol("update", "nodename=n1", "state=down", "reason=PSU")
    gpus = await until(lambda: states("n1", "failed"), 30, "n1's GPUs failed with the node")
    assert gpus[0]["health"]["reasons"] == ["Slurm: node n1 is down: PSU (by root)"]


async def test_a_booking_becomes_a_slurm_reservation_and_follows_edits(
    api, running_hive, slurm
) -> None:
    alice = api("alice")
    await inventory(alice)
    start = soon()
    made = await alice("POST", "reservations", {"title": "train", "gpus": WHOLE_N1,
                                                "start": iso(start), "duration": "2h"})  # fmt: skip
    assert made.status == 201, made
    name = engine_name(made.body["id"])
    mine = held(slurm)[name]
    assert mine.users == (ACCOUNTS["alice"],)  # the owner's UNIX account
    assert mine.nodes == ("n1",)
    assert (mine.start, mine.end) == (start, start + timedelta(hours=2))

    later = start + timedelta(hours=3)
    moved = await alice("PATCH", f"reservations/{made.body['id']}", {"end": iso(later)})
    assert moved.status == 200, moved
    assert held(slurm)[name].end == later

    # a partial node: Slurm 22.05 reserves whole nodes only -> 409 in words, nothing left
    partial = await alice("POST", "reservations", {"title": "small", "gpus": ["n2:0", "n2:1"],
                                                   "start": iso(start), "duration": "1h"})  # fmt: skip
    assert partial.status == 409, partial
    assert "whole nodes only" in partial.message and "23.11" in partial.message
    assert "2 of 4 GPUs of n2" in partial.message
    assert set(held(slurm)) == {name}
    listed = await alice("GET", "reservations", params={"start": iso(start - timedelta(hours=1)),
                                                        "end": iso(later)})  # fmt: skip
    assert [r["id"] for r in listed.body["reservations"]] == [made.body["id"]]
    # changing a whole-node booking into a partial one is refused the same way
    shrink = await alice("PATCH", f"reservations/{made.body['id']}", {"gpus": ["n1:0"]})
    assert shrink.status == 409 and "whole nodes only" in shrink.message

    gone = await alice("DELETE", f"reservations/{made.body['id']}")
    assert gone.status == 200, gone
    assert held(slurm) == {}


async def test_slurm_refusing_rolls_the_booking_back(api, running_hive, slurm) -> None:
    bob = api("bob")
    await inventory(bob)
    start = soon(days=2)
    # an admin's own reservation on n2 that gpuhive does not know of
    slurm.scontrol(
        "create", "reservation", "reservationname=maintenance", "users=root", "nodes=n2",
        f"starttime={start:%Y-%m-%dT%H:%M:%S}", "duration=120",
    )  # fmt: skip
    whole = [f"n2:{i}" for i in range(GPUS_PER_NODE)]
    refused = await bob("POST", "reservations", {"title": "x", "gpus": whole,
                                                 "start": iso(start), "duration": "1h"})  # fmt: skip
    assert refused.status == 409, refused
    assert refused.message.startswith("The booking was not made: ")
    assert "busy" in refused.message.lower() or "overlap" in refused.message.lower()
    listed = await bob("GET", "reservations", params={"start": iso(start),
                                                      "end": iso(start + timedelta(hours=1))})  # fmt: skip
    assert listed.body["reservations"] == []
    assert set(held(slurm)) == {"maintenance"}
    # the same GPUs an hour after the admin's reservation are booked and held
    after = start + timedelta(hours=3)
    made = await bob("POST", "reservations", {"title": "y", "gpus": whole, "start": iso(after),
                                              "duration": "1h"})  # fmt: skip
    assert made.status == 201, made
    assert held(slurm)[engine_name(made.body["id"])].users == (ACCOUNTS["bob"],)


async def test_drift_in_slurm_is_restored_or_released_and_told(api, running_hive, slurm) -> None:
    alice = api("alice")
    await inventory(alice)
    told: list[tuple[str, int, str | None]] = []
    bookings = running_hive.bookings
    original = bookings._changed
    bookings._changed = lambda kind, res, by, why: (told.append((kind, res.id, why)),
                                                     original(kind, res, by, why))  # fmt: skip
    start = soon(days=3)
    made = await alice("POST", "reservations", {"title": "t", "gpus": WHOLE_N1,
                                                "start": iso(start), "duration": "2h"})  # fmt: skip
    assert made.status == 201, made
    rid, name = made.body["id"], engine_name(made.body["id"])

    # deleted behind gpuhive's back: restored at the next poll, and the owner told
    slurm.scontrol("delete", f"reservationname={name}")
    await until(lambda: name in held(slurm), 30, "the deleted reservation restored")
    await until(lambda: any(r == rid and "was deleted" in (w or "") for _, r, w in told), 10)
    # changed behind its back (a later end, another user): changed back
    slurm.scontrol("update", f"reservationname={name}", "users=gh-bob",
                   f"endtime={start + timedelta(hours=5):%Y-%m-%dT%H:%M:%S}")  # fmt: skip

    def restored() -> bool:
        now = held(slurm).get(name)
        return bool(now and now.users == ("gh-alice",) and now.end == start + timedelta(hours=2))

    await until(restored, 30, "the changed reservation put back")

    def changed() -> list[str]:
        return [w for _, r, w in told if r == rid and w is not None and "was changed" in w]

    # Slurm shows it put back as soon as scontrol has run, a moment before gpuhive tells
    said = await until(changed, 10, "the owner told of the change")
    assert "gh-bob instead of gh-alice" in said[0] and "restored" in said[0]

    # deleted, and the nodes taken meanwhile: it cannot come back, so the booking is released
    async with bookings._one_at_a_time:  # both before the next reconciliation
        slurm.scontrol("delete", f"reservationname={name}")
        slurm.scontrol(
            "create", "reservation", "reservationname=urgent", "users=root", "nodes=n1",
            f"starttime={start:%Y-%m-%dT%H:%M:%S}", "duration=60",
        )  # fmt: skip

    async def released() -> bool:
        one = await alice("GET", f"reservations/{rid}")
        return one.body.get("cancelled_at") is not None

    await until(released, 30, "the booking released")

    def cancelled() -> list[str]:
        return [w for kind, r, w in told if r == rid and kind == "cancelled" and w is not None]

    why = await until(cancelled, 10, "the owner told of the release")
    assert "could not be restored" in why[0] and "released" in why[0]
    assert set(held(slurm)) == {"urgent"}


async def test_gpuhives_queue_starts_nothing_on_slurm_nodes(api, running_hive, slurm) -> None:
    """Slurm's own queue runs the cluster's jobs: a count-only job queued in gpuhive waits,
    and says why, instead of starting on a node where gpuhive runs no commands."""
    alice = api("alice")
    await inventory(alice)
    body = {"name": "c", "command": "sleep 30", "options": {"gpu_count": 1}, "queued": True,
            "walltime": "10m"}  # fmt: skip
    job = await alice("POST", "jobs", body)
    assert job.status == 201, job
    sampler = running_hive.monitor.sampler
    seen = sampler.sweeps

    async def explained() -> dict[str, Any] | None:
        queue = {j["id"]: j for j in (await alice("GET", "queue")).body["jobs"]}
        shown = queue.get(job.body["id"])
        ready = shown and shown.get("waiting_for") and sampler.sweeps >= seen + 2
        return shown if ready else None

    shown = await until(explained, 30, "the queued job's reason, two sweeps on")
    assert shown["status"] == "pending", shown
    assert shown["tasks"] == []
    assert shown["waiting_for"].startswith("waiting for 1 free GPU"), shown
    assert queued_elsewhere(running_hive.jobs.launcher.pool, "n1") == (
        "n1 is a slurm node: its own queue runs jobs there, not gpuhive's"
    )
    assert (await alice("POST", f"jobs/{job.body['id']}/stop")).status == 200
