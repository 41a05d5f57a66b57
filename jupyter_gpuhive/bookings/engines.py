"""Bookings on hosts under an engine (Slurm): each one mirrored as the engine's reservation.

The store stays the authority: a booking is written there first (overlaps are refused there),
then held in the engine for its owner's UNIX account. A booking the engine cannot hold (whole
nodes only on Slurm before 23.11, or the engine's own refusal) is rolled back and refused
(409, with the engine's words). Edits, early ends and cancellations follow. After every sweep
(`on_sweep`, so at start and every poll) the engine's reservations are compared with the
store: one deleted or changed behind gpuhive's back is restored, or the booking is released
when it cannot be; either way its owner is told (a change event with the reason).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any

from ..errors import Conflict, HiveError, NotFound
from ..model import Identity, Reservation, isoformat, utcnow
from ..model.engines import EngineRefused, Held, ReservationEngine, booking_of, engine_name
from ..model.errand import Errand
from ..model.requests import BookingChange
from .overview import FREE, OTHERS
from .service import PROTECTION as PROTECTION
from .service import Bookings

log = logging.getLogger(__name__)

# host -> (its name in the engine, the engine), or None for hosts under no engine
EngineOf = Callable[[str], "tuple[str, ReservationEngine] | None"]
BY = "engine"  # who the engine's drift and its repairs are by, in events
SLACK = timedelta(seconds=2)  # engines keep whole seconds
AHEAD = timedelta(days=3650)


class EngineBookings(Bookings):
    """Bookings whose GPUs on engine hosts are held by the engine too."""

    def __init__(self, *args: Any, engine_of: EngineOf, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.engine_of = engine_of
        # One change at a time where engines are: a reconciliation never sees a booking that
        # is in the store but not yet (or no more) in its engine.
        self._one_at_a_time = asyncio.Lock()

    def _all_engines(self) -> dict[int, ReservationEngine]:
        """Every engine under a host of the inventory."""
        found = (self.engine_of(host.name) for host in self.store.inventory.hosts())
        return {id(under[1]): under[1] for under in found if under is not None}

    @asynccontextmanager
    async def _serial(self) -> AsyncIterator[None]:
        """Hold the engines' lock, on a site with engines (elsewhere: nothing to wait for)."""
        if not self._all_engines():
            yield
            return
        async with self._one_at_a_time:
            yield

    # --- what the engines run: occupied time ---------------------------------------------

    async def overview(
        self,
        who: Identity,
        start: datetime,
        end: datetime,
        slot: timedelta,
        host: str | None = None,
        gpu: str | None = None,
    ) -> dict[str, Any]:
        """The overview, with the time that jobs the engines run now (anyone's, submitted
        outside gpuhive too) hold on their GPUs marked as others' ('o'), from each job's
        start to its end, and listed under `engine_jobs` (an override: same parameters)."""
        shown = await super().overview(who, start, end, slot, host=host, gpu=gpu)
        engines = self._all_engines()
        if not engines:
            return shown
        hosts: dict[tuple[int, str], str] = {}  # (engine, node) -> host
        for found in self.store.inventory.hosts():
            under = self.engine_of(found.name)
            if under is not None:
                hosts[(id(under[1]), under[0])] = found.name
        jobs: list[dict[str, Any]] = []
        for key, engine in engines.items():
            try:
                running = await engine.running()
            except EngineRefused as error:  # shown without them; said in the log
                log.warning("gpuhive: %s did not list its jobs: %s", engine.label, error)
                continue
            for job in running:
                refs = [f"{hosts[(key, node)]}:{index}" for node, index in job.gpus
                        if (key, node) in hosts]  # fmt: skip
                if refs:
                    jobs.append({"engine": engine.label, "job": job.job_id, "user": job.user,
                                 "gpus": refs, "start": isoformat(job.start),
                                 "end": isoformat(job.end)})  # fmt: skip
                    occupy(shown, refs, max(job.start, start), job.end, start, slot)
        shown["engine_jobs"] = jobs
        return shown

    # --- what a booking asks of each engine ----------------------------------------------

    def _engines(
        self, res: Reservation
    ) -> list[tuple[ReservationEngine, dict[str, tuple[int, int]]]]:
        """Each engine under the booking's GPUs, with {node: (GPUs booked, GPUs it has)}."""
        found: dict[int, tuple[ReservationEngine, dict[str, tuple[int, int]]]] = {}
        for host in sorted({g.host for g in res.gpus}):
            under = self.engine_of(host)
            if under is None:
                continue
            node, engine = under
            whole = self.store.inventory.host(host)
            has = len([g for g in whole.gpus if g.parent_id is None]) if whole else 0
            booked = len({g.index for g in res.gpus if g.host == host})
            if res.is_share:
                booked = 0  # a share of a GPU is never a whole node
            found.setdefault(id(engine), (engine, {}))[1][node] = (booked, has)
        return list(found.values())

    def _held(self, res: Reservation, nodes: dict[str, tuple[int, int]]) -> Held:
        account = self._unix_user(res.owner)
        gpus = tuple(sorted((node, booked) for node, (booked, _) in nodes.items()))
        return Held(engine_name(res.id), res.start, res.end, gpus, (account,))

    async def _hold(self, res: Reservation) -> None:
        """Hold the booking in every engine under it; on a refusal, let go of what was held."""
        done: list[ReservationEngine] = []
        try:
            for engine, nodes in self._engines(res):
                why = await engine.why_not(nodes)
                if why is not None:
                    raise EngineRefused(why)
                await engine.hold(self._held(res, nodes), utcnow())
                done.append(engine)
        except EngineRefused:
            for engine in done:
                await self._let_go(engine, engine_name(res.id))
            raise

    async def _let_go(self, engine: ReservationEngine, name: str) -> None:
        try:
            await engine.release(name)
        except EngineRefused as error:  # the next reconciliation deletes it
            log.warning("gpuhive: %s kept reservation %s: %s", engine.label, name, error)

    # --- the booking's life ----------------------------------------------------------------

    async def _mirror(self, who: Identity, made: Reservation) -> None:
        """Hold the new booking in its engines; a refusal cancels it (no event) and says why.
        A tentative booking (it waits for approval) is held in gpuhive's store only: an engine
        reservation would let its holder run there before anyone approved it."""
        if made.tentative:
            return
        try:
            await self._hold(made)
        except EngineRefused as error:
            await self.run(self.reservations.cancel, who, made.id)  # rolled back, no event
            raise Conflict(f"The booking was not made: {error}") from None

    async def update(
        self,
        who: Identity,
        reservation_id: int,
        change: BookingChange,
        reason: str | None = None,
        errand: Errand | None = None,
    ) -> Reservation:
        async with self._serial():
            if change.gpus is not None:  # a new set of GPUs must still be whole nodes
                await self._still_whole(reservation_id, change.gpus)
            changed = await super().update(who, reservation_id, change, reason, errand)
            await self._follow(changed)
        return changed

    async def _still_whole(self, reservation_id: int, refs: tuple[str, ...]) -> None:
        """Refuse (409) new GPUs that an engine under them cannot hold."""
        old = await self.get(reservation_id)
        gpus = await self.run(self.reservations.resolve_gpus, refs)
        trial = Reservation(old.id, old.owner, old.title, old.description, old.start,
                            old.end, tuple(gpus), old.created_at)  # fmt: skip
        for engine, nodes in self._engines(trial):
            why = await engine.why_not(nodes)
            if why is not None:
                raise Conflict(f"The booking was not changed: {why}")

    async def answer(
        self, who: Identity, reservation_id: int, outcome: str, note: str | None = None
    ) -> Reservation:
        """An approved booking is held in its engines from now on (a refusal there is the
        reconciliation's to repair or release, like a reservation deleted behind gpuhive)."""
        async with self._serial():
            done = await super().answer(who, reservation_id, outcome, note)
            if not done.cancelled:
                try:
                    await self._hold(done)
                except EngineRefused as error:
                    log.warning("gpuhive: approved booking %s not held yet: %s", done.id, error)
        return done

    async def cancel(
        self, who: Identity, reservation_id: int, errand: Errand | None = None
    ) -> Reservation:
        async with self._serial():
            done = await super().cancel(who, reservation_id, errand)
            await self._follow(done)
        return done

    async def end(self, reservation_id: int, by: str, reason: str) -> Reservation | None:
        async with self._serial():
            ended = await super().end(reservation_id, by, reason)
            if ended is not None:
                await self._follow(ended)
        return ended

    async def _follow(self, res: Reservation) -> None:
        """Make every engine under the booking hold what the store now says (or nothing)."""
        now = utcnow()
        for engine, nodes in self._engines(res):
            name = engine_name(res.id)
            if res.cancelled or res.end <= now or res.tentative:
                await self._let_go(engine, name)
                continue
            try:
                await engine.change(self._held(res, nodes), now)
            except EngineRefused as error:  # the owner is told; reconciliation tries again
                self._changed("changed", res, BY, f"{engine.label} refused the change: {error}")

    # --- reconciliation --------------------------------------------------------------------

    async def on_sweep(self, _sweep: Any = None) -> None:
        """After each sweep: compare every engine's reservations with the store."""
        try:
            async with self._serial():
                await self.reconcile()
        except EngineRefused as error:
            log.warning("gpuhive: reservations not reconciled: %s", error)

    async def reconcile(self) -> list[tuple[int, str]]:
        """Restore or release each booking whose engine reservation drifted; delete engine
        reservations of gpuhive's that no live booking has. What was done, by booking."""
        wanted: dict[int, tuple[ReservationEngine, dict[str, tuple[Reservation, Held]]]] = {
            key: (engine, {}) for key, engine in self._all_engines().items()
        }  # every engine, with a live booking or not
        if not wanted:
            return []  # no host under an engine: nothing to read
        now = utcnow()
        live = await self.run(self.store.reservations.window, now, now + AHEAD)
        for res in live:
            if res.cancelled or res.end <= now or res.tentative:  # tentative: store only
                continue
            for engine, nodes in self._engines(res):
                entry = wanted.setdefault(id(engine), (engine, {}))
                entry[1][engine_name(res.id)] = (res, self._held(res, nodes))
        done: list[tuple[int, str]] = []
        for engine, mine in wanted.values():
            listed = await engine.listing()
            for name, (res, held) in mine.items():
                drift = _drift(listed.get(name), held, now)
                if drift is not None:
                    done.append((res.id, await self._repair(engine, res, held, drift, now)))
            for name in set(listed) - set(mine):
                await self._stale(engine, name, now)
        return done

    async def _repair(
        self, engine: ReservationEngine, res: Reservation, held: Held, drift: str, now: datetime
    ) -> str:
        what = f"Its {engine.label} reservation {held.name} {drift} outside gpuhive"
        try:
            if "was deleted" in drift:
                await engine.hold(held, now)
            else:
                await engine.change(held, now)
        except EngineRefused as error:
            said = f"{what}, and could not be restored ({error}): the booking is released."
            owner = self.reservations.identity_of(res.owner)
            try:
                gone = await self.run(self.reservations.cancel, owner, res.id)
            except HiveError as why:  # it ended or was cancelled meanwhile
                return f"{what}; not restored: {why.message}"
            self._changed("cancelled", gone, BY, said)
            log.warning("gpuhive: reservation %s: %s", res.id, said)
            return said
        said = f"{what}; gpuhive restored it."
        self._changed("changed", res, BY, said)
        log.warning("gpuhive: reservation %s: %s", res.id, said)
        return said

    async def _stale(self, engine: ReservationEngine, name: str, now: datetime) -> None:
        """An engine reservation of gpuhive's no live booking wants (checked again: a booking
        made since the store was read is kept)."""
        rid = booking_of(name)
        if rid is None:
            return
        try:
            res = await self.get(rid)
        except NotFound:  # no such booking (any more)
            res = None
        if res is None or res.cancelled or res.end <= now or not self._engines(res):
            await self._let_go(engine, name)


def _drift(have: Held | None, want: Held, now: datetime) -> str | None:
    """How the engine's reservation differs from the booking, in words (None: it does not)."""
    if have is None:
        return "was deleted"
    said = []
    if set(have.users) != set(want.users):
        said.append(f"users {', '.join(have.users) or 'none'} instead of {', '.join(want.users)}")
    if set(have.nodes) != set(want.nodes):
        said.append(f"nodes {', '.join(have.nodes) or 'none'} instead of {', '.join(want.nodes)}")
    if want.start > now and abs(have.start - want.start) > SLACK:
        said.append(
            f"start {have.start:%Y-%m-%d %H:%M:%S} instead of {want.start:%Y-%m-%d %H:%M:%S}"
        )
    if abs(have.end - want.end) > SLACK:
        said.append(f"end {have.end:%Y-%m-%d %H:%M:%S} instead of {want.end:%Y-%m-%d %H:%M:%S}")
    return f"was changed ({'; '.join(said)} UTC)" if said else None


def occupy(
    shown: dict[str, Any], refs: list[str], since: datetime, until: datetime,
    start: datetime, slot: timedelta,
) -> None:  # fmt: skip
    """Mark the free slots of GPUs `refs` in [since, until) of an overview as others'."""
    first = max(0, math.floor((since - start) / slot))
    for row in shown["gpus"]:
        if row["id"] not in refs:
            continue
        states = list(row["states"])
        last = min(len(states), math.ceil((until - start) / slot))
        for i in range(first, last):
            if states[i] == FREE:
                states[i] = OTHERS
        row["states"] = "".join(states)
