"""The violation history: one write per sweep, queries by window, user, host, reservation."""

from __future__ import annotations

from datetime import timedelta

from jupyter_gpuhive.model import GpuDecl, HostDecl, utcnow
from jupyter_gpuhive.model.violations import Violation
from jupyter_gpuhive.store import Store


def new(kind: str, host: str, offender: str | None, holder: str | None, rid: int | None,
        at) -> Violation:  # fmt: skip
    return Violation(
        kind, host, f"{host}:0", f"GPU-{host}", offender, holder, rid, 1, (1, 2), ("x",), None, at
    )


def test_history_is_recorded_and_queried(store: Store) -> None:
    store.inventory.sync([HostDecl("h1", gpus=(GpuDecl(0, "GPU-h1"),))])
    gpu = store.inventory.gpu("h1:0")
    assert gpu is not None
    t0 = utcnow() - timedelta(hours=2)
    res = store.reservations.create("alice", "t", "", t0, t0 + timedelta(hours=3), [gpu.id])
    v = store.violations
    a, b = v.sync(t0, [new("foreign", "h1", "bob", "alice", res.id, t0),
                       new("unreserved", "h2", "carol", None, None, t0)])  # fmt: skip
    assert v.sync(t0 + timedelta(minutes=5), (), {a: ((1, 2, 3), ("x", "y", "z"))}, [b]) == []
    v.add_action(a, t0, 0, "terminal", True, "wrote to pts/1 of bob")
    v.add_action(a, t0, 1, "email", False, "SMTP down")
    (c,) = v.sync(t0 + timedelta(hours=1), [new("ghost", "h1", None, "alice", res.id,
                                                 t0 + timedelta(hours=1))])  # fmt: skip

    now = utcnow()
    every = v.query(t0 - timedelta(hours=1), now)
    assert [r.id for r in every] == [c, b, a]  # newest first
    first = every[-1]
    assert first.pids == (1, 2, 3) and first.ended_at is None
    assert [(x.handler, x.outcome) for x in first.actions] == [
        ("terminal", "ok"),
        ("email", "failed"),
    ]
    assert first.to_json()["actions"][1]["detail"] == "SMTP down"
    assert [r.id for r in v.query(t0, now, user="alice")] == [c, a]  # holder
    assert [r.id for r in v.query(t0, now, user="carol")] == [b]  # offender
    assert [r.id for r in v.query(t0, now, host="h2")] == [b]
    assert [r.id for r in v.query(t0, now, reservation_id=res.id, kinds=["ghost"])] == [c]
    # b ended at t0+5min: a window after that leaves it out.
    assert b not in [r.id for r in v.query(t0 + timedelta(minutes=10), now)]
    assert [r.id for r in v.for_reservation(res.id)] == [a, c]

    assert v.close_stale() == 2  # a and c were left open
    assert all(r.ended_at is not None for r in v.query(t0, now))
    stale = v.get(a)
    assert stale is not None and stale.ended_at == first.last_seen_at
