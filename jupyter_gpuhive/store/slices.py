"""MIG slices in the inventory: what discovery found is written under the parent GPU.

A slice is known by (parent, GPU instance, compute instance, profile): an admin who destroys
and re-creates the same slice gets it back under the same ref (its MIG UUID is updated). A
slice that is no longer there is marked removed, never deleted: reservations keep pointing at
it, and the reservation service flags them.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, insert, select, update

from ..model import SliceDecl
from .schema import gpus


def _key(gi: int | None, ci: int | None, profile: str | None) -> tuple[int, int, str]:
    return gi or 0, ci or 0, profile or ""


def sync_slices(
    conn: Connection,
    host_id: int,
    index: int,
    parent_id: int,
    found: Iterable[SliceDecl],
    now: datetime,
) -> list[int]:
    """Make the parent's live slices those `found`; return the ids of the slices removed."""
    decls = {_key(d.gpu_instance_id, d.compute_instance_id, d.profile): d for d in found}
    rows = conn.execute(select(gpus).where(gpus.c.parent_id == parent_id)).all()
    matched: dict[tuple[int, int, str], Any] = {}
    for row in sorted(rows, key=lambda r: r.removed_at is not None):  # live ones first
        key = _key(row.gpu_instance_id, row.compute_instance_id, row.profile)
        if key in decls and key not in matched:
            matched[key] = row
    keep = {row.id for row in matched.values()}
    wanted = {d.uuid: key for key, d in decls.items()}
    gone = [row.id for row in rows if row.id not in keep and row.removed_at is None]
    # A UUID moves to the slice that has it now: others holding it give it up first.
    taken = conn.execute(select(gpus.c.id, gpus.c.uuid).where(gpus.c.uuid.in_(list(wanted)))).all()
    for gid, uuid in taken:
        owner = matched.get(wanted[uuid])
        if owner is None or owner.id != gid:
            conn.execute(
                update(gpus).where(gpus.c.id == gid).values(uuid=f"removed-{gid}-{uuid}"[:96])
            )
    if gone:
        conn.execute(update(gpus).where(gpus.c.id.in_(gone)).values(removed_at=now))
    for key, decl in decls.items():
        held = matched.get(key)
        fields = {"uuid": decl.uuid, "memory_mib": decl.memory_mib}
        if held is None:
            conn.execute(
                insert(gpus).values(
                    host_id=host_id,
                    idx=index,
                    parent_id=parent_id,
                    gpu_instance_id=decl.gpu_instance_id,
                    compute_instance_id=decl.compute_instance_id,
                    profile=decl.profile,
                    **fields,
                )
            )
        elif (held.uuid, held.memory_mib, held.removed_at) != (
            decl.uuid,
            decl.memory_mib,
            None,
        ):
            conn.execute(update(gpus).where(gpus.c.id == held.id).values(removed_at=None, **fields))
    return gone
