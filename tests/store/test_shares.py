"""Shares of a GPU in the store, on real SQLite and PostgreSQL: the database itself keeps the
shares live on a GPU at or under one whole GPU at every instant (migration 0022)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import bindparam, select, text
from sqlalchemy.exc import IntegrityError

from jupyter_gpuhive.cli.demo import SHARED_HOST, demo_hosts, host_config
from jupyter_gpuhive.errors import Conflict, Invalid
from jupyter_gpuhive.hosts.config import parse_hosts
from jupyter_gpuhive.integrations import _gpus as integrations_gpus
from jupyter_gpuhive.model import UTC, Gpu
from jupyter_gpuhive.model.shares import WHOLE
from jupyter_gpuhive.store import Changes, Store
from jupyter_gpuhive.store.schema import UTCDateTime, reservation_gpus
from tests.store.test_store_db import _NEW_RESERVATION, gpu

BASE = datetime(2030, 1, 7, 10, tzinfo=UTC)
H = timedelta(hours=1)
QUARTER, HALF = WHOLE // 4, WHOLE // 2
# gpu1: all four GPUs shareable (80 GiB each); gpu2: only GPU 1 (host list) and GPU 3 (its
# own entry); gpu3: none
SHARED_HOSTS = [
    {"name": "gpu1", "address": "127.0.0.1", "transport": "local", "shareable": True,
     "gpus": [{"model": "A100", "memory_mib": 81920} for _ in range(4)]},
    {"name": "gpu2", "address": "127.0.0.1", "transport": "local", "shareable": [1],
     "gpus": [{"memory_mib": 40960}, {"memory_mib": 40960}, {"memory_mib": 40960},
              {"memory_mib": 40960, "shareable": True}]},
    {"name": "gpu3", "address": "127.0.0.1", "transport": "local", "gpu_count": 2},
]  # fmt: skip


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    opened = Store(db_url).open()
    opened.inventory.sync(parse_hosts(SHARED_HOSTS))
    yield opened
    opened.close()


def book(store: Store, owner: str, ref: str, share: int, start: datetime, hours: float) -> int:
    made = store.reservations.create(
        owner, f"{owner}'s notebook", "", start, start + hours * H, [gpu(store, ref).id],
        share=share,
    )  # fmt: skip
    return made.id


def test_the_site_says_which_gpus_are_shareable(store: Store) -> None:
    shared = {g.ref for g in store.inventory.gpus() if g.shareable}
    assert shared == {"gpu1:0", "gpu1:1", "gpu1:2", "gpu1:3", "gpu2:1", "gpu2:3"}
    assert gpu(store, "gpu1:0").to_json()["shareable"] is True
    assert gpu(store, "gpu3:0").to_json()["shareable"] is False
    # a new configuration changes it; discovery (which knows nothing of it) keeps it
    changed = [dict(SHARED_HOSTS[0], shareable=False), *SHARED_HOSTS[1:]]
    store.inventory.sync(parse_hosts(changed))
    assert not gpu(store, "gpu1:0").shareable
    store.inventory.sync(parse_hosts(SHARED_HOSTS))
    found = store.inventory.gpu_by_id(gpu(store, "gpu1:0").id)
    from jupyter_gpuhive.model import GpuDecl

    store.inventory.record_discoveries({"gpu1": [GpuDecl(0, found.uuid, "A100", 81920)]})
    assert gpu(store, "gpu1:0").shareable


def test_four_quarters_fit_and_a_fifth_is_refused_naming_the_holders(store: Store) -> None:
    ids = [book(store, f"s{i}", "gpu1:0", QUARTER, BASE, 4) for i in range(4)]
    assert len(set(ids)) == 4
    got = store.reservations.get(ids[0])
    assert got.share_ppm == QUARTER and got.is_share and got.share == 0.25
    assert got.share_memory_mib() == 20480
    assert got.to_json()["share"] == 0.25 and got.to_json()["share_memory_mib"] == 20480
    assert got.gpu_hours() == pytest.approx(1.0)  # a quarter GPU for 4 h is 1 GPU-hour
    assert got.held_text() == "0.25 of a GPU (20 GiB)"  # feeds, notices and webhooks say so
    assert "0.25 of a GPU (20 GiB) on gpu1 (gpu1:0)" in integrations_gpus(got)
    with pytest.raises(Conflict) as refused:
        book(store, "late", "gpu1:0", QUARTER, BASE + 2 * H, 1)
    assert {c["owner"] for c in refused.value.details["conflicts"]} == {"s0", "s1", "s2", "s3"}
    assert "holds 0.25 of a GPU" in refused.value.message
    # a whole GPU is a share of 1: refused too, and so is a share over a whole booking
    with pytest.raises(Conflict):
        book(store, "whole", "gpu1:0", WHOLE, BASE + 3 * H, 2)
    book(store, "whole", "gpu1:1", WHOLE, BASE, 4)
    with pytest.raises(Conflict) as over_whole:
        book(store, "small", "gpu1:1", 1, BASE + H, 1)
    assert [c["owner"] for c in over_whole.value.details["conflicts"]] == ["whole"]


def test_the_sum_counts_at_each_instant_not_over_the_span(store: Store) -> None:
    # a half for 6 h, and two halves one after the other inside it: at most 1 at any instant
    book(store, "long", "gpu1:2", HALF, BASE, 6)
    book(store, "early", "gpu1:2", HALF, BASE, 3)
    book(store, "late", "gpu1:2", HALF, BASE + 3 * H, 3)  # back-to-back with 'early'
    with pytest.raises(Conflict) as refused:
        book(store, "more", "gpu1:2", QUARTER, BASE + 2 * H, 2)
    # both instants are full: the holders at each are named
    assert {c["owner"] for c in refused.value.details["conflicts"]} == {"long", "early", "late"}
    book(store, "after", "gpu1:2", HALF, BASE + 6 * H, 1)


def test_shares_edit_cancel_and_end(store: Store) -> None:
    first = book(store, "a", "gpu1:3", HALF, BASE, 4)
    second = book(store, "b", "gpu1:3", QUARTER, BASE, 4)
    # growing the second to a half fits; to more than that does not
    grown = store.reservations.modify(second, lambda _: Changes(share=HALF))
    assert grown.share_ppm == HALF
    with pytest.raises(Conflict) as refused:
        store.reservations.modify(second, lambda _: Changes(share=HALF + 1))
    assert [c["owner"] for c in refused.value.details["conflicts"]] == ["a"]
    assert store.reservations.get(second).share_ppm == HALF  # rolled back
    # moving the first later frees its half at the start
    with pytest.raises(Conflict):
        book(store, "c", "gpu1:3", HALF, BASE, 1)
    store.reservations.modify(first, lambda _: Changes(start=BASE + H, end=BASE + 5 * H))
    book(store, "c", "gpu1:3", HALF, BASE, 1)
    # a cancelled share stops counting at once
    store.reservations.modify(second, lambda _: Changes(cancelled_at=BASE - H))
    book(store, "d", "gpu1:3", HALF, BASE + 2 * H, 1)


_NEW_ROW = text(
    "INSERT INTO reservation_gpus "
    "(reservation_id, gpu_id, device_id, start_at, end_at, cancelled, share_ppm) "
    "VALUES (:rid, :gid, :did, :s, :e, false, :share)"
).bindparams(bindparam("s", type_=UTCDateTime), bindparam("e", type_=UTCDateTime))


def raw_insert(store: Store, unit: Gpu, start: datetime, end: datetime, share: int = WHOLE) -> int:
    """A reservation and its row written with plain SQL, past every check of the app."""
    with store.db.writer.begin() as conn:
        conn.execute(_NEW_RESERVATION, {"s": start, "e": end})
        rid = int(conn.execute(text("SELECT max(id) FROM reservations")).scalar_one())
        conn.execute(
            _NEW_ROW,
            {"rid": rid, "gid": unit.id, "did": unit.device_id, "s": start, "e": end,
             "share": share},
        )  # fmt: skip
    return rid


def live_shares(store: Store, unit: Gpu) -> list[tuple[datetime, datetime, int]]:
    rg = reservation_gpus
    with store.db.read() as conn:
        rows = conn.execute(
            select(rg.c.start_at, rg.c.end_at, rg.c.share_ppm)
            .where(rg.c.device_id == unit.device_id, rg.c.cancelled.is_(False))
            .order_by(rg.c.start_at, rg.c.reservation_id)
        ).all()
    return [tuple(row) for row in rows]  # type: ignore[misc]


def test_database_refuses_shares_over_a_whole_gpu_written_behind_the_apps_back(
    store: Store,
) -> None:
    g = gpu(store, "gpu2:1")
    raw_insert(store, g, BASE, BASE + 4 * H, HALF)
    raw_insert(store, g, BASE, BASE + 2 * H, QUARTER)
    before = live_shares(store, g)
    for start, end, share in [
        (BASE + H, BASE + 3 * H, HALF),  # 1.25 at BASE+1h
        (BASE - H, BASE + H, QUARTER + 1),  # just over at BASE
        (BASE + 3 * H, BASE + 5 * H, HALF + 1),  # over the first half's tail
        (BASE - H, BASE + 9 * H, WHOLE),  # a whole GPU over shares
    ]:
        with pytest.raises(IntegrityError):
            raw_insert(store, g, start, end, share)
    assert live_shares(store, g) == before  # every refused transaction rolled back
    raw_insert(store, g, BASE + 2 * H, BASE + 4 * H, HALF)  # fits exactly: 1.0
    raw_insert(store, g, BASE, BASE + 2 * H, QUARTER)  # fits exactly: 1.0
    # a share of a GPU its site does not share, of a slice-less share range, or out of range
    for unit, share in [(gpu(store, "gpu2:0"), QUARTER), (g, 0), (g, WHOLE + 1)]:
        with pytest.raises(IntegrityError):
            raw_insert(store, unit, BASE + 10 * H, BASE + 11 * H, share)
    # updates are checked too: growing a share, or moving one under others
    rg = reservation_gpus
    grow = text("UPDATE reservation_gpus SET share_ppm = :p WHERE reservation_id = :r")
    small = raw_insert(store, g, BASE + 6 * H, BASE + 7 * H, QUARTER)
    move = text("UPDATE reservation_gpus SET start_at = :s WHERE reservation_id = :r")
    with pytest.raises(IntegrityError), store.db.writer.begin() as conn:  # noqa: PT012
        conn.execute(grow, {"p": QUARTER, "r": small})
        conn.execute(move.bindparams(bindparam("s", type_=UTCDateTime)), {"s": BASE, "r": small})
    raw_insert(store, g, BASE + 6 * H, BASE + 7 * H, HALF)
    with pytest.raises(IntegrityError), store.db.writer.begin() as conn:
        conn.execute(grow, {"p": HALF + 1, "r": small})  # a half is there already
    with store.db.read() as conn:
        kept = conn.execute(
            select(rg.c.start_at, rg.c.share_ppm).where(rg.c.reservation_id == small)
        ).one()
    assert tuple(kept) == (BASE + 6 * H, QUARTER)


def test_whole_bookings_still_refuse_each_other_in_the_database(store: Store) -> None:
    g = gpu(store, "gpu3:0")
    raw_insert(store, g, BASE, BASE + 2 * H)
    with pytest.raises(IntegrityError):
        raw_insert(store, g, BASE + H, BASE + 3 * H)
    raw_insert(store, g, BASE + 2 * H, BASE + 3 * H)  # back-to-back


def test_threaded_race_for_shares_never_overcommits(store: Store) -> None:
    g = gpu(store, "gpu1:0")
    barrier = threading.Barrier(16)
    won: list[int] = []
    lost: list[Conflict] = []
    failed: list[BaseException] = []
    lock = threading.Lock()
    sizes = [QUARTER, HALF, WHOLE // 3, WHOLE // 10, WHOLE]

    def contender(i: int) -> None:
        barrier.wait()
        try:
            made = book(store, f"u{i}", "gpu1:0", sizes[i % 5], BASE + i * timedelta(minutes=7), 2)
            with lock:
                won.append(made)
        except Conflict as error:
            with lock:
                lost.append(error)
        except BaseException as error:
            with lock:
                failed.append(error)

    threads = [threading.Thread(target=contender, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failed
    assert won and lost and len(won) + len(lost) == 16
    assert all(error.details.get("conflicts") for error in lost)
    rows = live_shares(store, g)
    for at in {start for start, _, _ in rows}:
        assert sum(share for start, end, share in rows if start <= at < end) <= WHOLE


def test_the_demo_shares_gpu3(db_url: str, tmp_path: Path) -> None:
    hosts = demo_hosts(tmp_path / "demo")
    opened = Store(db_url).open()
    try:
        opened.inventory.sync(parse_hosts([host_config(h) for h in hosts]))
        shared = {g.ref for g in opened.inventory.gpus() if g.shareable}
        assert shared == {f"{SHARED_HOST}:{i}" for i in range(4)}
        quarter = opened.reservations.create(
            "alice", "nb", "", BASE, BASE + H, [gpu(opened, "gpu3:0").id], share=QUARTER
        )
        assert quarter.share_memory_mib() == 10240  # a quarter of a 40 GiB A100
    finally:
        opened.close()


def test_holders_now_are_every_share_held_not_the_last_begun(store: Store) -> None:
    g = gpu(store, "gpu1:1")
    long = book(store, "alice", "gpu1:1", QUARTER, BASE, 4)
    short = book(store, "bob", "gpu1:1", HALF, BASE + H, 1)
    later = book(store, "carol", "gpu1:1", QUARTER, BASE + 5 * H, 1)
    at = BASE + H + H / 2  # both held
    holders, shares = store.holders.at_with_shares(at, at + 24 * H)
    assert [(r.id, r.share_ppm) for r in shares[g.id]] == [(long, QUARTER), (short, HALF)]
    # after bob's share ended, the one begun last, alice's is still held
    holders, shares = store.holders.at_with_shares(BASE + 3 * H, BASE + 24 * H)
    current, following = holders[g.id]
    assert current is not None and current.id == long
    assert following is not None and following.id == later
    assert [r.owner for r in shares[g.id]] == ["alice"]
    assert store.holders.at(BASE + 3 * H, BASE + 24 * H)[g.id][0].id == long  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ({"name": "h", "shareable": "yes"}, "true, false or a list of GPU indexes"),
        ({"name": "h", "shareable": [0, -1]}, "true, false or a list of GPU indexes"),
        ({"name": "h", "shareable": [True]}, "true, false or a list of GPU indexes"),
        ({"name": "h", "gpus": [{"shareable": 1}]}, "GPU 0: 'shareable' must be true or false"),
    ],
)
def test_a_bad_shareable_setting_is_refused_when_config_is_read(entry: dict, words: str) -> None:
    with pytest.raises(Invalid) as refused:
        parse_hosts([entry])
    assert words in refused.value.message and refused.value.message.startswith("Host h")
