"""The read side of protection: violation history, reports and what is open now.

Admins (and the server itself) see everything; another user sees the violations they are
involved in (as holder, or as the offender's UNIX user), and with public violations all the
others too, but without their PIDs, command lines and action details.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from datetime import datetime
from typing import Any

from ..errors import Invalid, NotFound
from ..model import Identity, Reservation
from ..model.violations import OFFENCES
from ..privacy import violation_brief
from ..store import Store
from .actions import Run
from .escalation import Case
from .handlers import Incident
from .violations import KINDS

MAX_QUERY = 10_000
OPEN_FOR = 1.0  # seconds the open violations read from the store serve all requests


class Reports:
    """Stored and live violations, as a viewer may see them."""

    def __init__(
        self,
        store: Store,
        run: Run,
        unix_user: Callable[[str], str],
        cases: Mapping[Hashable, Case],
        public: bool = False,
    ) -> None:
        self.store = store
        self._run = run
        self._unix_user = unix_user
        self._cases = cases  # the escalation's open cases (live state)
        self.public = public  # every violation listed to every user (details: involved only)
        self._open: tuple[float, list[dict[str, Any]]] = (0.0, [])  # (read at, open ones)
        self._reading = asyncio.Lock()

    async def history(
        self,
        start: datetime,
        end: datetime,
        *,
        user: str | None = None,
        host: str | None = None,
        reservation_id: int | None = None,
        kinds: Sequence[str] | None = None,
        limit: int = 1000,
        viewer: Identity | None = None,
        public: bool = False,
    ) -> list[dict[str, Any]]:
        """Stored violations overlapping [start, end), newest first, as `viewer` may see them.

        A non-admin viewer gets the violations they are involved in (holder or offender);
        with `public`, every violation, the others without PIDs, commands and action details.
        """
        if end <= start:
            raise Invalid("The end of the window must be after its start.")
        if not 0 < limit <= MAX_QUERY:
            raise Invalid(f"'limit' must be between 1 and {MAX_QUERY}.")
        unknown = sorted(set(kinds or ()) - set(KINDS))
        if unknown:
            raise Invalid(f"Unknown violation kind(s) {unknown}; known: {', '.join(KINDS)}.")
        involving = None
        if viewer is not None and not viewer.is_admin and not public:
            involving = (viewer.name, self._unix_user(viewer.name))
        found = await self._run(
            self.store.violations.query, start, end, user=user, host=host,
            reservation_id=reservation_id, kinds=kinds, limit=limit, involving=involving,
        )  # fmt: skip
        return self._visible([v.to_json() for v in found], viewer, public)

    async def report(
        self,
        viewer: Identity,
        start: datetime,
        end: datetime,
        *,
        user: str | None = None,
        host: str | None = None,
        reservation_id: int | None = None,
        kinds: Sequence[str] | None = None,
        limit: int = 1000,
    ) -> dict[str, Any]:
        """The violations of [start, end) and those open now, as `viewer` may see them."""
        found = await self.history(
            start, end, user=user, host=host, reservation_id=reservation_id, kinds=kinds,
            limit=limit, viewer=viewer, public=self.public,
        )  # fmt: skip
        return {
            "start": start.isoformat(),
            "end": end.isoformat(),
            "ongoing": await self.open_now(viewer, self.public),
            "violations": found,
        }

    async def for_reservation(
        self, reservation_id: int, viewer: Identity | None = None, public: bool = False
    ) -> list[dict[str, Any]]:
        """A reservation's violations and idle notices, oldest first, as `viewer` may see them."""
        found = await self._run(self.store.violations.for_reservation, reservation_id)
        return self._visible([v.to_json() for v in found], viewer, public)

    def ongoing(self, viewer: Identity | None = None, public: bool = False) -> list[dict[str, Any]]:
        """The violations open right now (live state, no database), as `viewer` may see them."""
        return self._visible(
            [{**c.incident.to_json(), "since": c.since.isoformat()} for c in self._cases.values()],
            viewer,
            public,
        )

    async def open_now(
        self, viewer: Identity | None = None, public: bool = False
    ) -> list[dict[str, Any]]:
        """The violations open now as the store has them, so the same on every replica (the
        leader records each sweep's), as `viewer` may see them. Read at most once in OPEN_FOR
        seconds, shared by the requests meanwhile."""
        if time.monotonic() - self._open[0] >= OPEN_FOR:
            async with self._reading:
                if time.monotonic() - self._open[0] >= OPEN_FOR:
                    self._open = (time.monotonic(), await self._run(self._read_open))
        return self._visible(self._open[1], viewer, public)

    def _read_open(self) -> list[dict[str, Any]]:
        """(Blocking) the open violations as `ongoing` lists them, from the store."""
        found = [r for r in self.store.violations.still_open() if r.kind in OFFENCES]
        held: dict[int, Reservation] = {}
        for rid in {r.reservation_id for r in found if r.reservation_id is not None}:
            with contextlib.suppress(NotFound):
                held[rid] = self.store.reservations.get(rid)
        out = []
        for r in found:
            res = held.get(r.reservation_id) if r.reservation_id is not None else None
            title, end = (res.title, res.end) if res else (None, None)
            incident = Incident.of(r.id, r, None, title, end)
            out.append({**incident.to_json(), "since": r.started_at.isoformat()})
        return out

    def involves(self, viewer: Identity, holder: str | None, offender: str | None) -> bool:
        """Whether `viewer` holds the reserved GPU or (as their UNIX user) is the offender."""
        return holder == viewer.name or (
            offender is not None and offender == self._unix_user(viewer.name)
        )

    def _visible(
        self, items: list[dict[str, Any]], viewer: Identity | None, public: bool
    ) -> list[dict[str, Any]]:
        """Admins (and None: the server itself) see all; others their own, or all if public
        but then without the PIDs, command lines and action details of other people's."""
        if viewer is None or viewer.is_admin:
            return items
        shown = []
        for item in items:
            if self.involves(viewer, item.get("holder"), item.get("offender")):
                shown.append(item)
            elif public:
                shown.append(violation_brief(item))
        return shown
