"""`gpu.health` events: the holders of reservations on a GPU whose health or drain changed."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from ..model.health import GpuCondition
from ..store import Store
from .webhooks import Webhooks

AHEAD = timedelta(days=7)  # reservations active now or starting within this are told


async def tell_holders(
    store: Store,
    run: Callable[..., Awaitable[Any]],
    webhooks: Webhooks,
    changed: dict[int, GpuCondition],
    now: datetime,
    offers: Mapping[int, Any] | None = None,
) -> None:
    """One `gpu.health` event per holder (with their reservations and, from `offers`, the
    finder's best alternative for each) and one for the site."""
    held = await run(store.reservations.window, now, now + AHEAD, gpu_ids=list(changed))
    for gpu_id, condition in changed.items():
        gpu = store.inventory.gpu_by_id(gpu_id)
        if gpu.is_slice:
            continue  # told once, for the whole GPU
        mine = [r for r in held if any(g.id == gpu_id or g.parent_id == gpu_id for g in r.gpus)]
        state = "drained" if condition.drained else condition.state
        text = f"{gpu.ref} is {state}" + (
            f": {'; '.join(condition.reasons)}" if condition.reasons else ""
        )
        public = {"gpu": gpu.ref, "uuid": gpu.uuid, **condition.to_json()}
        for owner in sorted({r.owner for r in mine}):
            ids = [r.id for r in mine if r.owner == owner]
            found = [{"reservation": i, **offers[i]} for i in ids if offers and offers.get(i)]
            said = text + "." + (
                f" The earliest alternative: {', '.join(found[0]['gpus'])} from "
                f"{found[0]['start']} to {found[0]['end']}." if found else ""
            )  # fmt: skip
            data = {**public, "reservations": ids, "alternatives": found}
            await webhooks.emit("gpu.health", data, [owner], said, None)
        await webhooks.emit("gpu.health", public, [], text + ".", public)
