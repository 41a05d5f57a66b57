"""MIG slices through the REST API, on SQLite and PostgreSQL: naming, booking, clashes."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from jupyter_gpuhive.hosts.probe import HostSample
from jupyter_gpuhive.hosts.vendors.nvidia_smi import GpuMetrics, MigDevice
from jupyter_gpuhive.monitor.sampler import Sweep
from tests.api.helpers import booking, refused
from tests.conftest import HOSTS, book, soon
from tests.mig.helpers import SLICES, mig_host


@pytest.fixture
def hive_config(hive_config: dict[str, Any]) -> dict[str, Any]:
    mig = {"name": "mig1", "address": "127.0.0.1", "transport": "local", "gpu_count": 2}
    return {**hive_config, "hosts": [*HOSTS, mig]}


@pytest.fixture
def hive(jp_serverapp: Any) -> Any:
    """The server's Hive, with GPU 0 of mig1 split into the sample's three slices."""
    running = jp_serverapp.web_app.settings["gpuhive"]
    running.store.inventory.sync([mig_host("mig1")])
    return running


async def test_slices_are_booked_by_ref_or_mig_uuid(api: Any, hive: Any) -> None:
    alice, bob = api("alice"), api("bob")
    t = soon(3)
    made = await book(alice, "small", ["mig1:0/mig13"], t)
    assert made.body["gpus"] == ["mig1:0/mig13"]
    assert made.body["gpu_uuids"] == [SLICES[2].uuid]
    # the neighbour, by MIG UUID, and a whole GPU next to it: both fine
    other = await book(bob, "mid", [SLICES[1].uuid, "mig1:1"], t)
    assert other.body["gpus"] == ["mig1:0/mig5", "mig1:1"]
    # the whole GPU clashes with both slices: 409 names the reservations
    reply = await bob("POST", "reservations", booking(["mig1:0"], t, t + timedelta(hours=1)))
    refused(reply, 409, "mig1:0/mig13 is reserved by alice", "mig1:0/mig5")
    assert {c["reservation"] for c in reply.body["conflicts"]} == {
        made.body["id"],
        other.body["id"],
    }
    # and the same slice again
    reply = await bob("POST", "reservations", booking(["mig1:0/mig13"], t, t + timedelta(hours=1)))
    refused(reply, 409, "alice")
    # a GPU's reservations include those of its slices
    listed = await alice("GET", "reservations", params={"gpu": "mig1:0"})
    assert {r["id"] for r in listed.body["reservations"]} == {made.body["id"], other.body["id"]}


async def test_a_whole_gpu_keeps_its_slices_out(api: Any, hive: Any) -> None:
    alice, bob = api("alice"), api("bob")
    t = soon(6)
    whole = await book(alice, "all of it", ["mig1:0"], t, "2h")
    for ref in ("mig1:0/mig1", "mig1:0/mig5", SLICES[2].uuid):
        reply = await bob("POST", "reservations", booking([ref], t + timedelta(hours=1),
                                                          t + timedelta(hours=3)))  # fmt: skip
        refused(reply, 409, "mig1:0 is reserved by alice")
        assert reply.body["conflicts"][0]["reservation"] == whole.body["id"]
    # right after it: fine; moving it back onto the whole GPU's time: 409
    later = await book(bob, "after", ["mig1:0/mig1"], t + timedelta(hours=2))
    moved = await bob("PATCH", f"reservations/{later.body['id']}", {"start": (t).isoformat(),
                                                                     "duration": "1h"})  # fmt: skip
    refused(moved, 409, "alice")


@pytest.mark.parametrize(
    ("gpus", "words"),
    [
        (["mig1:0/mig99"], ("Unknown MIG slice 'mig1:0/mig99'", "host:index/migGI")),
        (["mig1:1/mig1"], ("Unknown MIG slice 'mig1:1/mig1'",)),
        (["mig1:0/slice"], ("Unknown MIG slice",)),
        (["MIG-00000000-0000-0000-0000-000000000000"], ("Unknown GPU",)),
        (["mig1:0", "mig1:0/mig5"], ("mig1:0/mig5 is a slice of mig1:0",)),
    ],
)
async def test_bad_slice_refs_are_refused_in_words(
    api: Any, hive: Any, gpus: list[str], words: tuple[str, ...]
) -> None:
    t = soon(9)
    reply = await api("alice")("POST", "reservations", booking(gpus, t, t + timedelta(hours=1)))
    refused(reply, 422, *words)


async def test_hosts_list_slices_and_a_repartition_flags_their_reservations(
    api: Any, hive: Any
) -> None:
    alice = api("alice")
    hosts = (await alice("GET", "hosts")).body["hosts"]
    [mig] = [h for h in hosts if h["name"] == "mig1"]
    parts = mig["gpus"][0]["slices"]
    assert [(p["id"], p["profile"], p["kind"]) for p in parts] == [
        ("mig1:0/mig1", "3g.40gb", "slice"),
        ("mig1:0/mig5", "2g.20gb", "slice"),
        ("mig1:0/mig13", "1g.10gb", "slice"),
    ]
    assert all(p["util"] is None and p["util_label"] == "not reported" for p in parts)
    assert mig["gpus"][1]["slices"] == []

    t = soon(12)
    doomed = await book(alice, "on 2g", ["mig1:0/mig5"], t)
    kept = await book(alice, "on 3g", ["mig1:0/mig1"], t)
    # The next sweep finds GPU 0 re-partitioned: the 2g.20gb and 1g.10gb slices are gone.
    gpu0 = GpuMetrics(0, mig_host("mig1").gpus[0].uuid, "NVIDIA A100-SXM4-80GB", None, None, 0,
                      81920, 30, 55.0, None, mig_enabled=True)  # fmt: skip
    gpu1 = GpuMetrics(1, mig_host("mig1").gpus[1].uuid, "NVIDIA A100-SXM4-80GB", 0, 0, 4,
                      81920, 30, 55.0, None, mig_enabled=False)  # fmt: skip
    left = MigDevice(0, 1, 0, 0, 40192, 42, SLICES[0].uuid, "3g.40gb")
    sample = HostSample("mig1", hive.now(), (gpu0, gpu1), slices={gpu0.uuid: (left,)})
    await hive.monitor._discover(Sweep(hive.now(), 1.0, {"mig1": sample}))

    gone = (await alice("GET", f"reservations/{doomed.body['id']}")).body
    assert gone["flagged"] and "mig1:0/mig5 (2g.20gb) no longer exists" in gone["flag_reason"]
    still = (await alice("GET", f"reservations/{kept.body['id']}")).body
    assert not still["flagged"]
    hosts = (await alice("GET", "hosts")).body["hosts"]
    [mig] = [h for h in hosts if h["name"] == "mig1"]
    assert [p["id"] for p in mig["gpus"][0]["slices"]] == ["mig1:0/mig1"]
    reply = await alice("POST", "reservations", booking(["mig1:0/mig5"], t, t + timedelta(hours=1)))
    refused(reply, 422, "Unknown MIG slice", "re-partition")


async def test_the_overview_has_a_row_per_slice_and_blocks_what_clashes(
    api: Any, hive: Any
) -> None:
    alice, bob = api("alice"), api("bob")
    t = soon(15)
    await book(alice, "slice", ["mig1:0/mig5"], t, "1h")
    await book(bob, "whole", ["mig1:0"], t + timedelta(hours=2), "1h")
    window = {"start": t.isoformat(), "end": (t + timedelta(hours=4)).isoformat(), "slot": "1h"}
    grid = await alice("GET", "overview", params={**window, "host": "mig1"})
    assert grid.status == 200, grid
    rows = {row["id"]: row["states"] for row in grid.body["gpus"]}
    assert rows == {
        "mig1:0": "mfof",  # a slice of it is mine, then bob has it whole
        "mig1:0/mig1": "ffof",
        "mig1:0/mig5": "mfof",
        "mig1:0/mig13": "ffof",
        "mig1:1": "ffff",
    }


async def test_a_job_may_not_start_on_a_slice_or_gpu_someone_else_holds(
    api: Any, hive: Any
) -> None:
    alice, bob = api("alice"), api("bob")
    await book(bob, "mine now", ["mig1:0/mig5"], hive.now(), "1h")
    job = {"name": "j", "template": "plain", "command": "true", "start": True}
    for gpus in (["mig1:0/mig5"], ["mig1:0"], [SLICES[1].uuid]):
        reply = await alice("POST", "jobs", {**job, "gpus": gpus})
        refused(reply, 409, "mig1:0/mig5 is reserved by bob")
    assert (await alice("GET", "jobs")).body["jobs"] == []
