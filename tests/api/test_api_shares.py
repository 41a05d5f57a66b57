"""Shares of a GPU through the REST API of a real server, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from tests.api.helpers import booking, refused
from tests.conftest import HOSTS, iso, soon

# gpu1's GPUs are shareable (80 GiB each); gpu2's and gpu3's are booked whole only
SHARED = [
    {**HOSTS[0], "gpu_count": 0, "shareable": True,
     "gpus": [{"model": "Simulated A100", "memory_mib": 81920} for _ in range(4)]},
    *HOSTS[1:],
]  # fmt: skip


@pytest.fixture
def hive_config(hive_config: dict[str, Any]) -> dict[str, Any]:
    return {**hive_config, "hosts": SHARED}


def share_of(gpus: list[str], hours: float = 4, **asked: Any) -> dict[str, Any]:
    t = soon()
    return {**booking(gpus, t, t + timedelta(hours=hours), "notebook"), **asked}


async def test_shares_by_fraction_and_memory_up_to_one_gpu(api: Any) -> None:
    alice, bob, carol = api("alice"), api("bob"), api("carol")
    first = await alice("POST", "reservations", share_of(["gpu1:0"], share=0.25))
    assert first.status == 201, first
    assert first.body["share"] == 0.25 and first.body["share_memory_mib"] == 20480
    second = await bob("POST", "reservations", share_of(["gpu1:0"], memory="40G"))
    assert second.status == 201, second
    assert second.body["share"] == 0.5 and second.body["share_memory_mib"] == 40960
    third = await carol("POST", "reservations", share_of(["gpu1:0"], memory=20480))
    assert third.status == 201, third
    # the GPU is full: a fourth share is refused, naming who holds the shares in the way
    late = await carol("POST", "reservations", share_of(["gpu1:0"], share="1/8"))
    message = refused(late, 409, "alice", "bob", "gpu1:0")
    assert "0.25 of a GPU" in message
    assert {c["owner"] for c in late.body["conflicts"]} == {"alice", "bob", "carol"}
    assert {c["share"] for c in late.body["conflicts"]} == {0.25, 0.5}
    # so is a whole-GPU booking of it; whole bookings of whole GPUs are as before
    whole = await carol("POST", "reservations", share_of(["gpu1:0"]))
    refused(whole, 409, "gpu1:0")
    plain = await carol("POST", "reservations", share_of(["gpu1:1", "gpu2:0"]))
    assert plain.status == 201 and plain.body["share"] == 1.0, plain
    # the list and one reservation show the share
    got = await bob("GET", f"reservations/{second.body['id']}")
    assert got.body["share"] == 0.5
    # a share changes with PATCH; growing past what is free is refused
    shrunk = await bob("PATCH", f"reservations/{second.body['id']}", {"share": 0.25})
    assert shrunk.status == 200 and shrunk.body["share"] == 0.25, shrunk
    more = await carol("POST", "reservations", share_of(["gpu1:0"], memory="20G"))
    assert more.status == 201, more
    grow = await bob("PATCH", f"reservations/{second.body['id']}", {"memory": "40G"})
    refused(grow, 409, "gpu1:0")


async def test_bad_shares_are_refused_with_a_sentence(api: Any) -> None:
    alice = api("alice")
    for asked, status, words in [
        ({"share": 0}, 422, ("more than 0",)),
        ({"share": 1.5}, 422, ("at most 1",)),
        ({"share": -0.25}, 422, ("more than 0",)),
        ({"share": "a lot"}, 422, ("fraction",)),
        ({"share": True}, 422, ("fraction",)),
        ({"memory": "20T"}, 422, ("20G",)),
        ({"memory": 0}, 422, ("at least 1 MiB",)),
        ({"memory": "100G"}, 422, ("80 GiB", "does not fit")),
        ({"share": 0.25, "memory": "20G"}, 422, ("either",)),
    ]:
        reply = await alice("POST", "reservations", share_of(["gpu1:2"], **asked))
        refused(reply, status, *words)
    several = await alice("POST", "reservations", share_of(["gpu1:2", "gpu1:3"], share=0.5))
    refused(several, 422, "one GPU")
    not_shared = await alice("POST", "reservations", share_of(["gpu2:1"], share=0.5))
    refused(not_shared, 409, "gpu2:1", "not shareable")
    # no memory known for gpu3's GPUs: a fraction is the way
    unknown = await alice("POST", "reservations", share_of(["gpu3:0"], memory="1G"))
    refused(unknown, 422, "not known")
    # share 1 is a whole GPU, on any GPU
    whole = await alice("POST", "reservations", share_of(["gpu2:1"], share=1))
    assert whole.status == 201 and whole.body["share"] == 1.0, whole


async def test_get_hosts_says_which_gpus_are_shareable(api: Any) -> None:
    reply = await api("alice")("GET", "hosts")
    assert reply.status == 200, reply
    hosts = reply.body["hosts"] if isinstance(reply.body, dict) else reply.body
    shareable = {
        f"{host['name']}:{gpu['index']}": gpu["shareable"] for host in hosts for gpu in host["gpus"]
    }
    assert shareable["gpu1:0"] is True and shareable["gpu2:0"] is False
    # who holds which share now
    for who, asked in (("alice", {"share": 0.25}), ("bob", {"memory": "40G"})):
        made = await api(who)(
            "POST", "reservations", {"title": "nb", "gpus": ["gpu1:3"], "duration": "1h", **asked}
        )
        assert made.status == 201, made
    reply = await api("carol")("GET", "hosts")
    hosts = reply.body["hosts"] if isinstance(reply.body, dict) else reply.body
    gpus = {f"{h['name']}:{g['index']}": g for h in hosts for g in h["gpus"]}
    held = [(s["owner"], s["share"], s["memory_mib"]) for s in gpus["gpu1:3"]["shares"]]
    assert held == [("alice", 0.25, 20480), ("bob", 0.5, 40960)]
    assert gpus["gpu1:3"]["reservation"]["owner"] == "alice"
    assert gpus["gpu1:2"]["shares"] == [] and "shares" not in gpus["gpu2:0"]


async def test_usage_counts_a_share_as_its_part(api: Any) -> None:
    alice, boss = api("alice"), api("boss")
    t = soon(days=3)
    window = {"start": iso(t), "end": iso(t + timedelta(hours=5))}
    asked = {"title": "nb", "start": iso(t)}
    quarter = await alice(
        "POST", "reservations", {**asked, "gpus": ["gpu1:1"], "duration": "4h", "share": 0.25}
    )
    assert quarter.status == 201, quarter
    whole = await alice("POST", "reservations", {**asked, "gpus": ["gpu2:0"], "duration": "1h"})
    assert whole.status == 201, whole
    seen = (await boss("GET", "usage", params=window)).body
    assert {u["user"]: u["reserved_gpu_hours"] for u in seen["by_user"]} == {"alice": 2.0}
    assert {g["gpu"]: g["reserved_hours"] for g in seen["by_gpu"]} == {"gpu1:1": 1.0, "gpu2:0": 1.0}
    per = {r["id"]: r["reserved_gpu_hours"] for r in seen["reservations"]}
    assert per == {quarter.body["id"]: 1.0, whole.body["id"]: 1.0}
    one = (await alice("GET", f"reservations/{quarter.body['id']}/usage")).body
    assert one["reserved_gpu_hours"] == 1.0  # a quarter GPU for 4 h is 1 GPU-hour


async def test_the_overview_shows_shares_that_leave_room(api: Any) -> None:
    alice, bob = api("alice"), api("bob")
    t = soon(days=4)
    asked = {"title": "nb", "gpus": ["gpu1:2"], "start": iso(t)}
    for who, hours, share in ((bob, "3h", 0.5), (bob, "2h", 0.25), (alice, "1h", 0.25)):
        made = await who("POST", "reservations", {**asked, "duration": hours, "share": share})
        assert made.status == 201, made
    window = {"start": iso(t), "end": iso(t + timedelta(hours=4)), "host": "gpu1", "slot": "1h"}
    grid = (await api("carol")("GET", "overview", params=window)).body
    rows = {row["id"]: row for row in grid["gpus"]}
    # hour 1: a whole GPU of shares (one of them alice's); hour 2: 0.75; hour 3: 0.5; then free
    assert rows["gpu1:2"]["states"] == "ossf"
    assert (await bob("GET", "overview", params=window)).body["gpus"][2]["states"] == "mmmf"
    assert (await alice("GET", "overview", params=window)).body["gpus"][2]["states"] == "mssf"
    assert grid["legend"]["s"] == "shared, room left"


async def test_a_job_on_a_share_booking_is_capped_to_the_share(api: Any) -> None:
    """%%gpujob --reservation ID on a share: the job's task gets the share's caps (values are
    write-only in the job's JSON: the names show), and asking more memory than the share
    holds is refused."""
    alice = api("alice")
    res = await alice("POST", "reservations", share_of(["gpu1:2"], share=0.25))
    assert res.status == 201, res
    rid = res.body["id"]
    job = {"name": "j", "command": "sleep 30", "template": "pytorch",
           "options": {"mode": "env"}, "reservation": rid}  # fmt: skip
    made = await alice("POST", "jobs", {**job, "start_at": iso(soon() + timedelta(hours=1))})
    assert made.status == 201, made
    [task] = made.body["tasks"]
    assert {"XLA_PYTHON_CLIENT_MEM_FRACTION", "GPUHIVE_SHARE", "GPUHIVE_SHARE_MIB",
            "PYTORCH_CUDA_ALLOC_CONF", "GPUHIVE_CAPS_SOURCE"} <= task["env"].keys()  # fmt: skip
    assert "gpuhive-caps-" in task["command"]
    # a smaller cap of its own fits in the share; a larger one is refused
    inside = {**job, "options": {"mode": "env", "memory": "10G"}}
    smaller = await alice("POST", "jobs", {**inside, "start_at": iso(soon() + timedelta(hours=1))})
    assert smaller.status == 201, smaller
    over = {**job, "options": {"mode": "env", "memory": "30G"}}
    refused(await alice("POST", "jobs", over), 422, "more than reservation", "0.25 of a GPU")
    # a whole-GPU booking's job is not capped
    whole = await alice("POST", "reservations", share_of(["gpu2:0"]))
    plain = await alice("POST", "jobs", {**job, "reservation": whole.body["id"],
                                         "start_at": iso(soon() + timedelta(hours=1))})  # fmt: skip
    assert plain.status == 201, plain
    assert "GPUHIVE_SHARE" not in plain.body["tasks"][0]["env"]
