"""Lending reserved GPUs to preemptible jobs (#31) in the magics and widgets: a booking's
lending fields, and how a loan and a reclaim are worded."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from IPython.core.error import UsageError

from ..model.jobs import PREEMPT_SIGNALS as SIGNALS
from .clock import local_zone

__all__ = ["SIGNALS", "lending_body", "lending_choice", "lent_text", "reclaimed_text"]


def lent_text(reservation: Mapping[str, Any], mine: bool = True) -> str | None:
    """'lent to job 42 (preemptible) until you start', from the reservation's `lent_to`
    (for someone else's reservation: '… until its holder starts')."""
    loans: Sequence[Mapping[str, Any]] = reservation.get("lent_to") or []
    if not loans:
        return None
    ids = [str(loan["job"]) for loan in loans]
    jobs = f"job {ids[0]}" if len(ids) == 1 else f"jobs {', '.join(ids)}"
    return f"lent to {jobs} (preemptible) until {'you start' if mine else 'its holder starts'}"


def lending_choice(reservation: Mapping[str, Any]) -> str | None:
    """The holder's lending choice when it is not the default (lend until used)."""
    if reservation.get("lend") is False:
        return "never lent"
    if reservation.get("reclaim_before_start"):
        return "lent only until shortly before its start"
    return None


def lending_body(args: Any) -> dict[str, bool]:
    """The booking's lending fields, only when they differ from the defaults."""
    body: dict[str, bool] = {}
    if args.no_lend:
        body["lend"] = False
    if args.reclaim_before_start:
        if args.no_lend:
            raise UsageError("--no-lend never lends them: --reclaim-before-start has no use.")
        body["reclaim_before_start"] = True
    return body


def reclaimed_text(reservation_id: int, answer: Mapping[str, Any]) -> str:
    """What `POST reservations/{id}/reclaim` did, in one sentence."""
    jobs = [str(job) for job in answer.get("reclaimed") or []]
    if not jobs:
        return f"Reservation {reservation_id}: nothing was running on its GPUs; they are yours."
    which = f"job {jobs[0]}" if len(jobs) == 1 else f"jobs {', '.join(jobs)}"
    return (
        f"Reservation {reservation_id}: preemptible {which} signalled to save and stop; "
        f"your GPUs are free by {_clock(answer['free_by'])}."
    )


def _clock(iso: str) -> str:
    return datetime.fromisoformat(iso).astimezone(local_zone()).strftime("%H:%M:%S")
