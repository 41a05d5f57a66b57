"""CalendarModel: the state of the reservation calendar, without any widget.

A lane per GPU (y = its position, lane i spans i..i+1, top to bottom); x is hours on the local
clock from the first day's midnight (day d, hour h → d * 24 + h). A brush in those coordinates
becomes a Draft; a Draft becomes the exact request the dialog sends. The pixels (lane heights,
which labels fit) are in calendar_lanes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta, tzinfo
from typing import Any

from ..notebook.client import HiveClientError
from ..notebook.clock import (
    UTC,
    as_zone,
    day_segments,
    hours_into,
    iso,
    local_text,
    midnight,
    parse,
)
from ..notebook.lending import lent_text
from . import calendar_lanes as lanes
from . import palette
from .messages import error_text, hosts_notice

PAD = 0.1  # gap between neighbouring lanes, in lane heights


@dataclass(frozen=True)
class Box:
    """One reservation drawn in one GPU's lane."""

    reservation_id: int
    gpu: str
    lane: int
    x0: float
    x1: float
    y0: float
    y1: float
    owner: str
    title: str
    mine: bool
    colour: str
    status: str  # the reservation's, or 'tentative' while it waits for approval (#46)
    lent: str = ""  # 'lent to job 42 (preemptible) until you start', or ""
    share: float = 1.0  # the part of the GPU it holds (#44): drawn as that part of the lane

    @property
    def label(self) -> str:
        lent = f" · {self.lent}" if self.lent else ""
        part = f" · {self.share:g} GPU" if self.share < 1 else ""
        waits = " (tentative: waits for approval)" if self.status == "tentative" else ""
        return f"{self.owner}: {self.title}{waits}{part}{lent}"

    def contains(self, x: float, y: float) -> bool:
        return self.x0 <= x <= self.x1 and self.y0 <= y <= self.y1


@dataclass(frozen=True)
class Span:
    """A painted rectangle without an owner (an allowed window, a GPU that cannot be booked)."""

    lane: int
    x0: float
    x1: float
    y0: float
    y1: float


@dataclass
class Draft:
    """What the reservation dialog holds: a new booking or an edit of an own one."""

    title: str
    description: str
    gpus: list[str]
    start: datetime
    end: datetime
    reservation_id: int | None = None
    status: str = "upcoming"
    original: dict[str, Any] = field(default_factory=dict)

    @property
    def is_new(self) -> bool:
        return self.reservation_id is None

    def request(self) -> tuple[str, str, dict[str, Any]]:
        """(method, path, body) that submitting this dialog sends."""
        if self.start.tzinfo is None or self.end.tzinfo is None:
            raise ValueError("The start and end must carry a time zone.")
        body: dict[str, Any] = {
            "title": self.title.strip(),
            "description": self.description,
            "gpus": list(self.gpus),
            "start": iso(self.start),
            "end": iso(self.end),
        }
        if self.is_new:
            return "POST", "reservations", body
        old = self.original
        changed = {}
        for key in ("title", "description"):
            if body[key] != old.get(key):
                changed[key] = body[key]
        if sorted(body["gpus"]) != sorted(old.get("gpus", [])):
            changed["gpus"] = body["gpus"]
        for key in ("start", "end"):
            if key not in old or parse(old[key]) != parse(body[key]):
                changed[key] = body[key]
        return "PATCH", f"reservations/{self.reservation_id}", changed


def blocked_by(health: Sequence[dict[str, Any]]) -> dict[str, str]:
    """GPUs that cannot be booked (GET health's answer) → 'failed' or 'drained'."""
    out = {}
    for h in health:
        if h.get("state") == "failed":
            out[h["gpu"]] = "failed"
        elif h.get("drained"):
            out[h["gpu"]] = "drained"
    return out


def gpus_of(hosts: Sequence[dict[str, Any]]) -> list[str]:
    """GPU refs ('host:index') of the hosts endpoint, host by host in index order."""
    return [g["id"] for h in hosts for g in sorted(h.get("gpus", []), key=lambda g: g["index"])]


def _stacked(boxes: list[Box], shared: dict[int, list[int]]) -> list[Box]:
    """`boxes` with each share drawn as its part of its lane, stacked (lanes.share_bands)."""
    inner = 1 - 2 * PAD
    for lane, found in shared.items():
        found.sort(key=lambda i: (boxes[i].x0, i))
        tops = lanes.share_bands([(boxes[i].x0, boxes[i].x1, boxes[i].share) for i in found])
        for i, top in zip(found, tops, strict=True):
            y0 = lane + PAD + top * inner
            boxes[i] = replace(boxes[i], y0=y0, y1=y0 + boxes[i].share * inner)
    return boxes


class CalendarModel:
    """Seven (or `days`) local days from a start date, a lane per selected GPU."""

    def __init__(
        self,
        client: Any,
        *,
        start: date | None = None,
        days: int = 7,
        gpus: Sequence[str] | None = None,
        zone: tzinfo | str | None = None,
        snap_minutes: int = 15,
        now: Callable[[], datetime] | None = None,
    ) -> None:
        self.client = client
        self.zone = as_zone(zone)
        self.clock = now or (lambda: datetime.now(UTC))
        self.start = start or self.clock().astimezone(self.zone).date()
        self.days = days
        self.snap = snap_minutes
        self.me: str = ""
        self.all_gpus: list[str] = []
        self.gpus: list[str] = list(gpus or [])
        self.reservations: dict[int, dict[str, Any]] = {}
        self.boxes: list[Box] = []
        self.allowed: list[Span] = []
        self.blocked: dict[str, str] = {}  # GPU → why it cannot be booked ('failed', 'drained')
        self.unbookable: list[Span] = []  # their lanes, the whole week
        self.unrestricted = True
        self.draft: Draft | None = None
        self.error = ""  # shown in the dialog, in words
        self.message = ""  # the last thing that happened, for the status line
        self.notice = ""  # HTML: what to do with no hosts, or about hosts that are down
        self.listeners: list[Callable[[], None]] = []

    # --- geometry ------------------------------------------------------------------

    @property
    def dates(self) -> list[date]:
        return [self.start + timedelta(days=i) for i in range(self.days)]

    @property
    def window(self) -> tuple[datetime, datetime]:
        return midnight(self.start, self.zone), midnight(self.dates[-1] + timedelta(1), self.zone)

    @property
    def hours(self) -> float:
        """The x axis' length: 24 local hours per shown day."""
        return self.days * 24.0

    def x_of(self, day: int, hours: float) -> float:
        return day * 24 + hours

    def lane_names(self) -> list[str]:
        """The lane axis' labels: the GPU, and why it cannot be booked if it cannot."""
        return [f"{g} · {self.blocked[g]}" if g in self.blocked else g for g in self.gpus]

    @property
    def hosts(self) -> list[str]:
        """The hosts of all GPUs, in their order (the host filter's choices)."""
        return list(dict.fromkeys(g.rsplit(":", 1)[0] for g in self.all_gpus))

    def focus(self, host: str | None) -> None:
        """Show one host's GPUs only (None: every GPU), then reload."""
        chosen = [g for g in self.all_gpus if host is None or g.rsplit(":", 1)[0] == host]
        self.show(gpus=chosen or self.all_gpus)

    def frame(self, width_px: int) -> lanes.Frame:
        return lanes.frame_for(self.lane_names(), self.hours, width_px)

    def labels(self, frame: lanes.Frame) -> list[lanes.Placed]:
        """The boxes' labels as drawn in `frame`: cut to their boxes, none over another."""
        return lanes.place([(b.x0, b.x1, b.lane, b.label, b.y0, b.y1) for b in self.boxes], frame)

    def now_line(self) -> tuple[list[float], list[float]] | None:
        """x and y of the now-line, across every lane (None if today is not shown)."""
        now = self.clock().astimezone(self.zone)
        if now.date() not in self.dates or not self.gpus:
            return None
        x = self.x_of(
            self.dates.index(now.date()), hours_into(now, midnight(now.date(), self.zone))
        )
        return [x, x], [0.0, float(len(self.gpus))]

    # --- loading -------------------------------------------------------------------

    def load(self) -> None:
        """Fetch who I am, the GPUs, and this week's reservations and allowed windows."""
        if not self.me:
            self.me = self.client.request("GET", "me")["name"]
        if not self.all_gpus:
            hosts = self.client.request("GET", "hosts")
            self.notice = hosts_notice(hosts)
            self.all_gpus = gpus_of(hosts["hosts"])
            self.gpus = [g for g in self.gpus if g in self.all_gpus] or list(self.all_gpus)
        start, end = self.window
        window = {"start": iso(start), "end": iso(end)}
        found = self.client.request("GET", "reservations", params={**window, "limit": 10000})
        coverage = self.client.request("GET", "rules/coverage", params=window)
        self.blocked = blocked_by(self.client.request("GET", "health")["gpus"])
        self.apply(found["reservations"], coverage)

    def apply(self, reservations: Sequence[dict[str, Any]], coverage: dict[str, Any]) -> None:
        """Recompute the boxes and painted windows from API replies."""
        self.reservations = {r["id"]: r for r in reservations}
        position = {g: i for i, g in enumerate(self.gpus)}
        colours: dict[str, str] = {}
        boxes: list[Box] = []
        shared: dict[int, list[int]] = {}  # lane -> its share boxes, by start
        for r in reservations:
            shown = [g for g in r["gpus"] if g in position]
            x = self.span_of(r["start"], r["end"])
            if not shown or r.get("status") == "cancelled" or x is None:
                continue
            owner = r["owner"]
            colour = colours.get(owner) or colours.setdefault(
                owner, palette.user_colour(owner, self.me)
            )
            mine = owner == self.me
            lent = lent_text(r, mine) or ""
            part = float(r.get("share") or 1.0)
            for gpu in shown:
                lane = position[gpu]
                if part < 1:
                    shared.setdefault(lane, []).append(len(boxes))
                boxes.append(
                    Box(r["id"], gpu, lane, x[0], x[1], lane + PAD, lane + 1 - PAD, owner,
                        r["title"], mine, colour, lanes.status_of(r), lent, part)
                )  # fmt: skip
        self.boxes = _stacked(boxes, shared)
        self.unrestricted = bool(coverage.get("unrestricted", True))
        spans = []
        for gpu, ranges in coverage.get("gpus", {}).items():
            for a, b in ranges if gpu in position else ():
                x = self.span_of(a, b)
                if x is not None:
                    lane = position[gpu]
                    spans.append(Span(lane, x[0], x[1], float(lane), lane + 1.0))
        self.allowed = spans
        self.unbookable = [
            Span(i, 0.0, self.hours, float(i), i + 1.0)
            for i, g in enumerate(self.gpus)
            if g in self.blocked
        ]
        self._changed()

    def span_of(self, start: str, end: str) -> tuple[float, float] | None:
        """From and to of an interval along x, cut to the days shown (None: outside them)."""
        cut = day_segments(parse(start), parse(end), self.dates, self.zone)
        if not cut:
            return None
        return self.x_of(cut[0][0], cut[0][1]), self.x_of(cut[-1][0], cut[-1][2])

    def _changed(self) -> None:
        for listener in list(self.listeners):
            listener()

    # --- navigation -----------------------------------------------------------------

    def show(self, start: date | None = None, gpus: Sequence[str] | None = None) -> None:
        """Move the week and/or choose the GPUs, then reload."""
        if start is not None:
            self.start = start
        if gpus is not None:
            self.gpus = (
                [g for g in self.all_gpus if g in set(gpus)] if self.all_gpus else list(gpus)
            )
        self.load()

    def shift(self, days: int) -> None:
        self.show(self.start + timedelta(days=days))

    # --- selection and dialog --------------------------------------------------------

    def _instant(self, x: float) -> datetime:
        """The local instant at x (hours from the first day's midnight), snapped."""
        x = min(self.hours, max(0.0, x))
        day = min(self.days - 1, math.floor(x / 24))
        step = self.snap / 60
        hours = min(24.0, max(0.0, round((x - day * 24) / step) * step))
        base = midnight(self.dates[day], self.zone)
        return (base + timedelta(hours=hours)).astimezone(self.zone)

    def select(self, x0: float, x1: float, y0: float, y1: float) -> Draft | None:
        """A brushed rectangle → a new-reservation draft (GPUs of the lanes, snapped times).

        The GPUs are those of the lanes covered, less any that cannot be booked (failed or
        drained: the status line says so); the times are the left and right edges.
        """
        self.error = ""
        x0, x1 = sorted((x0, x1))
        y0, y1 = sorted((y0, y1))
        first = max(0, math.floor(y0))
        last = min(len(self.gpus) - 1, math.ceil(y1) - 1)
        if not self.gpus or last < first or x1 <= 0 or x0 >= self.hours:
            return None
        covered = self.gpus[first : last + 1]
        gpus = [g for g in covered if g not in self.blocked]
        skipped = [f"{g} ({self.blocked[g]})" for g in covered if g in self.blocked]
        self.message = (
            f"Left out, as they cannot be booked: {', '.join(skipped)}." if skipped else ""
        )
        if not gpus:
            self._changed()
            return None
        start, end = self._instant(x0), self._instant(x1)
        if end <= start:
            end = start + timedelta(minutes=self.snap)
        self.draft = Draft("", "", gpus, start, end)
        self._changed()
        return self.draft

    def box_at(self, x: float, y: float) -> Box | None:
        return next((b for b in reversed(self.boxes) if b.contains(x, y)), None)

    def open(self, reservation_id: int) -> Draft | None:
        """An own reservation → an edit draft; someone else's → only a message."""
        self.error = ""
        r = self.reservations.get(reservation_id)
        if r is None:
            return None
        if r["owner"] != self.me:
            self.message = (
                f"{r['owner']}: {r['title']} ({local_text(parse(r['start']), self.zone)} – "
                f"{local_text(parse(r['end']), self.zone)})"
            )
            self.draft = None
        elif r.get("status") == "ended":
            self.message = f"Your reservation {r['id']} has ended; it cannot be changed."
            self.draft = None
        else:
            self.draft = Draft(
                r["title"], r.get("description", ""), list(r["gpus"]),
                parse(r["start"]).astimezone(self.zone), parse(r["end"]).astimezone(self.zone),
                r["id"], r.get("status", "upcoming"), dict(r),
            )  # fmt: skip
        self._changed()
        return self.draft

    def click(self, x: float, y: float) -> Draft | None:
        box = self.box_at(x, y)
        return self.open(box.reservation_id) if box else None

    def edit(self, **values: Any) -> Draft:
        """Change fields of the open draft (title, description, gpus, start, end)."""
        if self.draft is None:
            raise RuntimeError("No dialog is open.")
        self.draft = replace(self.draft, **values)
        return self.draft

    def close(self) -> None:
        self.draft, self.error = None, ""
        self._changed()

    def submit(self) -> dict[str, Any] | None:
        """Send the draft; on success reload and close, on failure keep it open with `error`."""
        draft = self.draft
        if draft is None:
            return None
        if not draft.title.strip():
            self.error = "Give the reservation a title."
            self._changed()
            return None
        method, path, body = draft.request()
        if not body:
            self.error = "Nothing was changed."
            self._changed()
            return None
        action = "reserve" if draft.is_new else "change the reservation"
        try:
            done: dict[str, Any] = self.client.request(method, path, body=body)
        except HiveClientError as error:
            self.error = error_text(error, action)
            self._changed()
            return None
        verb = "Reserved" if draft.is_new else "Changed"
        self.message = (
            f"{verb} {', '.join(done['gpus'])} from {local_text(parse(done['start']), self.zone)}"
            f" to {local_text(parse(done['end']), self.zone)} (reservation {done['id']})."
        )
        self.draft, self.error = None, ""
        self.load()
        return done

    def end_or_cancel(self) -> dict[str, Any] | None:
        """Cancel the open own reservation if upcoming, or end it now if running."""
        draft = self.draft
        if draft is None or draft.reservation_id is None:
            return None
        try:
            done: dict[str, Any] = self.client.request(
                "DELETE", f"reservations/{draft.reservation_id}"
            )
        except HiveClientError as error:
            self.error = error_text(error, "cancel the reservation")
            self._changed()
            return None
        what = "cancelled" if done.get("status") == "cancelled" else "ended early"
        self.message = f"Reservation {done['id']} {what}."
        self.draft, self.error = None, ""
        self.load()
        return done
