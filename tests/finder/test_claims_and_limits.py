"""The finder respects running queued jobs' claims and the requester's fair-share limits."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import insert

from jupyter_gpuhive.bookings.finder import SlotSearch
from jupyter_gpuhive.bookings.reservations import Policy
from jupyter_gpuhive.model import GpuDecl, HostDecl, Identity
from jupyter_gpuhive.model.finder import Want
from jupyter_gpuhive.store import Store
from jupyter_gpuhive.store.schema import job_tasks, jobs
from tests.conftest import book, iso, soon


def _running_job(store: Store, uuids: list[str], started: datetime, walltime: int | None) -> None:
    """A queued job running on `uuids` since `started` (rows as the queue writes them)."""
    now = datetime.now(UTC)
    text = {"description": "", "template": "plain", "command": "train", "options": "{}",
            "variables": "{}", "sweep": "{}", "env": "{}"}  # fmt: skip

    def work(conn: Any) -> None:
        job = conn.execute(insert(jobs).values(
            name="queued", owner="bob", queued=True, walltime_s=walltime, max_retries=0,
            attempts=1, created_at=now, updated_at=now, **text)).inserted_primary_key[0]  # fmt: skip
        conn.execute(insert(job_tasks).values(
            job_id=job, idx=0, host="q", address="127.0.0.1", role="main", gpus=json.dumps(uuids),
            gpu_indices="[]", command="train", env="{}", variables="{}", session="s",
            log_path="/tmp/l", exit_path="/tmp/e", state="running", started_at=started))  # fmt: skip

    store.db.write(work)


def test_running_queued_jobs_hold_their_gpus_until_their_walltime(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'hive.sqlite'}").open()
    try:
        gpus = tuple(GpuDecl(i, f"GPU-q-{i}", "A100", 40960) for i in range(2))
        store.inventory.sync([HostDecl("q", transport="local", gpus=gpus)])
        now = datetime.now(UTC).replace(microsecond=0)
        started = now - timedelta(minutes=30)
        _running_job(store, ["GPU-q-0", "GPU-q-1"], started, walltime=3 * 3600)
        search = SlotSearch(store, Policy(ZoneInfo("UTC")), lambda: None, clock=lambda: now)
        _, slots = search.search(Identity("alice"), Want(2, 3600, 0, 0, limit=1))
        # free when the walltime runs out: 3 h after the start (the second rounded up)
        assert slots[0].start == int((started + timedelta(hours=3)).timestamp()) + 1
        _, one = search.search(Identity("alice"), Want(1, 3600, 0, 0, limit=1))
        assert one[0].start > int(now.timestamp())
    finally:
        store.close()


async def test_limits_push_the_slot_past_what_i_hold(api: Any) -> None:
    boss, alice = api("boss"), api("alice")
    limit = {"scope": "user", "name": "alice", "limits": {"gpus": 2}}
    assert (await boss("PUT", "limits", limit)).status == 200
    start = soon(6, days=4)
    await book(alice, "mine", ["gpu1:0", "gpu1:1"], start, "3h")
    found = await alice("POST", "reservations/search", {
        "count": 1, "duration": "1h", "not_before": iso(start)})  # fmt: skip
    assert found.status == 200, found
    # two GPUs held at once is alice's limit: a third only after her booking ends
    assert datetime.fromisoformat(found.body["slots"][0]["start"]) == start + timedelta(hours=3)
    others = await api("bob")("POST", "reservations/search", {
        "count": 1, "duration": "1h", "not_before": iso(start)})  # fmt: skip
    assert datetime.fromisoformat(others.body["slots"][0]["start"]) == start
    too_long = {"scope": "user", "name": "alice", "limits": {"longest": "30m"}}
    assert (await boss("PUT", "limits", too_long)).status == 200
    refused = await alice("POST", "reservations/search", {"count": 1, "duration": "1h"})
    assert refused.status == 422 and "30min" in refused.message, refused
