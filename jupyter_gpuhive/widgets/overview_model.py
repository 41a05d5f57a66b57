"""OverviewModel: GPUs (grouped by host) × time slots, from the overview endpoint.

Cells are free, reserved by others, by me, held by a running queued job (from GET jobs), or
held in shares that leave room (#44).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from datetime import date, datetime, timedelta, tzinfo
from typing import Any

import numpy as np

from ..notebook.client import HiveClientError
from ..notebook.clock import UTC, as_zone, iso, midnight, parse
from .messages import setup_notice

FREE, OTHERS, MINE, QUEUED, SHARED = 0, 1, 2, 3, 4  # cell codes; the colour scale maps
# them in order
_CODES = np.zeros(256, dtype=np.uint8)
_CODES[ord("o")], _CODES[ord("m")], _CODES[ord("q")] = OTHERS, MINE, QUEUED
_CODES[ord("s")] = SHARED


class OverviewModel:
    """Occupancy of every GPU over `days` days in slots of `slot` ('1h' or '1d')."""

    def __init__(
        self,
        client: Any,
        *,
        start: date | None = None,
        days: int = 30,
        slot: str = "1h",
        zone: tzinfo | str | None = None,
        now: Callable[[], datetime] | None = None,
    ) -> None:
        self.client = client
        self.zone = as_zone(zone)
        clock = now or (lambda: datetime.now(UTC))
        self.clock = clock
        self.start = start or clock().astimezone(self.zone).date()
        self.days = days
        self.slot = slot
        self.gpus: list[str] = []  # row order: host by host, GPUs by index
        self.hosts: dict[str, list[int]] = {}  # host -> its rows
        self.matrix = np.zeros((0, 0), dtype=np.uint8)
        self.cells: list[list[int | None]] = []
        self.reservations: dict[str, dict[str, Any]] = {}
        self.queued: dict[int, list[tuple[int, int, dict[str, Any]]]] = {}  # row -> job spans
        self.slot_seconds = 3600.0
        self.origin = midnight(self.start, self.zone)
        self.selected: list[str] = []
        self.notice = ""  # HTML: the first steps, when there are no GPUs at all
        self.listeners: list[Callable[[], None]] = []
        self.selection_listeners: list[Callable[[list[str]], None]] = []

    @property
    def window(self) -> tuple[datetime, datetime]:
        return midnight(self.start, self.zone), midnight(
            self.start + timedelta(days=self.days), self.zone
        )

    def load(self) -> None:
        """Fetch the grid for the current span."""
        start, end = self.window
        params = {"start": iso(start), "end": iso(end), "slot": self.slot}
        data = self.client.request("GET", "overview", params=params)
        self.apply(data, jobs=self.running_queued_jobs())
        self.notice = "" if data["gpus"] else setup_notice()

    def running_queued_jobs(self) -> list[dict[str, Any]]:
        """Running jobs that came from the queue (they occupy their GPUs in free time)."""
        try:
            jobs = self.client.request("GET", "jobs", params={"status": "running"})["jobs"]
        except HiveClientError:
            return []  # a server without the jobs API: reservations only
        return [j for j in jobs if j.get("queued")]

    def apply(self, data: dict[str, Any], jobs: Sequence[dict[str, Any]] = ()) -> None:
        """Build the grid from an overview reply: states decoded in bulk, rows by host."""
        rows = sorted(data["gpus"], key=lambda g: (g["host"], g["index"]))
        self.origin = parse(data["start"])
        self.slot_seconds = float(data["slot_seconds"])
        slots = int(data["slots"])
        self.gpus = [g["id"] for g in rows]
        self.hosts = {}
        for i, g in enumerate(rows):
            self.hosts.setdefault(g["host"], []).append(i)
        joined = "".join(g["states"] for g in rows).encode("ascii")
        codes = _CODES[np.frombuffer(joined, dtype=np.uint8)]
        self.matrix = codes.reshape(len(rows), slots) if rows else np.zeros((0, slots), np.uint8)
        self.cells = [g["cells"] for g in rows]
        self.reservations = data.get("reservations", {})
        self.selected = [g for g in self.selected if g in self.gpus]
        self.mark_queued(jobs)
        for listener in list(self.listeners):
            listener()

    def mark_queued(self, jobs: Sequence[dict[str, Any]]) -> int:
        """Paint free cells of running queued jobs' GPUs QUEUED, from the current slot to the
        end of the job's walltime (to the end of the span without one); returns cells painted."""
        self.queued = {}
        rows = {g: i for i, g in enumerate(self.gpus)}
        slots = self.matrix.shape[1]
        now_col = int((self.clock() - self.origin).total_seconds() // self.slot_seconds)
        painted = 0
        for job in jobs:
            end_col = slots
            started = [parse(t["started_at"]) for t in job.get("tasks", []) if t.get("started_at")]
            if job.get("walltime_s") and started:
                end = min(started) + timedelta(seconds=float(job["walltime_s"]))
                end_s = (end - self.origin).total_seconds()
                end_col = min(slots, max(now_col + 1, math.ceil(end_s / self.slot_seconds)))
            c0, c1 = max(now_col, 0), end_col
            if c0 >= c1:
                continue
            refs = {f"{t['host']}:{i}" for t in job.get("tasks", []) for i in t["gpu_indices"]}
            for ref in refs:
                row = rows.get(ref)
                if row is None:
                    continue
                cells = self.matrix[row, c0:c1]
                free = cells == FREE
                painted += int(free.sum())
                cells[free] = QUEUED
                self.queued.setdefault(row, []).append((c0, c1, job))
        return painted

    # --- reading the grid -----------------------------------------------------------

    def slot_start(self, column: int) -> datetime:
        return (self.origin + timedelta(seconds=column * self.slot_seconds)).astimezone(self.zone)

    def day_ticks(self) -> dict[float, str]:
        """Column positions of local midnights; dates on every day up to 10 days, else weekly.

        Unlabelled midnights keep their tick (an empty label), so days stay countable.
        """
        ticks = {}
        slots = self.matrix.shape[1]
        step = 1 if self.days <= 10 else 7 if self.days <= 70 else 28
        for d in range(self.days + 1):
            when = midnight(self.start + timedelta(days=d), self.zone)
            col = (when - self.origin).total_seconds() / self.slot_seconds
            if 0 <= col <= slots:
                ticks[col] = when.strftime("%d %b") if d % step == 0 else ""
        return ticks

    def describe(self, row: int, column: int) -> str:
        """What one cell holds, in words."""
        when = self.slot_start(column).strftime("%a %d %b %H:%M")
        rid = self.cells[row][column]
        if rid is None:
            for c0, c1, job in self.queued.get(row, []):
                if c0 <= column < c1:
                    return (f"{self.gpus[row]} {when}: queued job {job['id']} of "
                            f"{job.get('owner', '?')} — {job.get('name', '')}")  # fmt: skip
            return f"{self.gpus[row]} {when}: free"
        r = self.reservations.get(str(rid), {})
        return f"{self.gpus[row]} {when}: {r.get('owner', '?')} — {r.get('title', '')}"

    def busy_fraction(self) -> dict[str, float]:
        """Per GPU, the share of slots reserved by anyone."""
        if not self.gpus or not self.matrix.shape[1]:
            return {g: 0.0 for g in self.gpus}
        shares = (self.matrix != FREE).mean(axis=1)
        return {g: round(float(s), 4) for g, s in zip(self.gpus, shares, strict=True)}

    # --- selection (filters a linked calendar) ----------------------------------------

    def select(self, gpus: Iterable[str] = (), hosts: Iterable[str] = ()) -> list[str]:
        """Choose GPUs by name and/or whole hosts; listeners (e.g. a calendar) follow."""
        wanted = set(gpus)
        for host in hosts:
            wanted.update(self.gpus[i] for i in self.hosts.get(host, []))
        self.selected = [g for g in self.gpus if g in wanted]
        for listener in list(self.selection_listeners):
            listener(self.selected)
        return self.selected

    def select_rows(self, rows: Sequence[int]) -> list[str]:
        return self.select([self.gpus[r] for r in rows if 0 <= r < len(self.gpus)])

    def link(self, calendar: Any) -> None:
        """Make a CalendarModel show the GPUs selected here."""

        def follow(gpus: list[str]) -> None:
            if gpus:
                calendar.show(gpus=gpus)

        self.selection_listeners.append(follow)
