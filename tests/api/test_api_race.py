"""50 clients racing through the REST API for overlapping slots on the same GPUs."""

from __future__ import annotations

import asyncio
import random
from datetime import timedelta
from typing import Any

from sqlalchemy import create_engine, text

from tests.api.helpers import booking, overlaps, snapshot
from tests.conftest import soon

OVERLAPPING_PAIRS = text(
    """
    SELECT count(*) FROM reservation_gpus AS a
    JOIN reservation_gpus AS b
      ON a.gpu_id = b.gpu_id AND a.reservation_id < b.reservation_id
    WHERE NOT a.cancelled AND NOT b.cancelled
      AND a.start_at < b.end_at AND b.start_at < a.end_at
    """
)


async def test_fifty_clients_race_for_the_same_gpus(api: Any, db_url: str) -> None:
    users = ["alice", "bob", "carol", "boss"]
    gpus = ["gpu1:0", "gpu1:1", "gpu1:2", "gpu1:3"]
    rng = random.Random(20261122)
    t = soon()
    requests = []
    for i in range(50):
        start = t + timedelta(minutes=30 * rng.randrange(8))
        length = timedelta(minutes=30 * rng.randrange(1, 5))
        chosen = rng.sample(gpus, 1 if i % 3 else rng.randrange(2, 4))
        requests.append((users[i % 4], booking(chosen, start, start + length, f"race {i}")))

    replies = await asyncio.gather(
        *(api(user)("POST", "reservations", body) for user, body in requests)
    )

    assert {r.status for r in replies} <= {201, 409}, [
        r for r in replies if r.status not in (201, 409)
    ]
    winners = [r.body for r in replies if r.status == 201]
    losers = [(body, r) for (_, body), r in zip(requests, replies, strict=True) if r.status == 409]
    assert len(winners) + len(losers) == 50
    assert winners, "the first request to reach the database must win"
    assert losers, "the slots were chosen to clash; someone must have lost"
    # the winners never overlap each other ...
    for i, a in enumerate(winners):
        for b in winners[i + 1 :]:
            assert not overlaps(a, b), (a, b)
    # ... and every loser really clashed with a winner, and was told which one
    by_id = {w["id"]: w for w in winners}
    for body, reply in losers:
        assert "not free" in reply.message
        assert reply.body["conflicts"], reply
        for conflict in reply.body["conflicts"]:
            winner = by_id[conflict["reservation"]]
            assert conflict["gpu"] in body["gpus"]
            assert conflict["gpu"] in winner["gpus"]
            assert conflict["owner"] == winner["owner"]
        assert any(overlaps(body, w) for w in winners)

    # the database holds exactly the winners, and no overlapping rows at all
    stored = await snapshot(api("boss"))
    assert sorted(r["id"] for r in stored) == sorted(by_id)
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            assert conn.execute(OVERLAPPING_PAIRS).scalar() == 0
            live = conn.execute(
                text("SELECT count(*) FROM reservation_gpus WHERE NOT cancelled")
            ).scalar()
            assert live == sum(len(w["gpus"]) for w in winners)
    finally:
        engine.dispose()
