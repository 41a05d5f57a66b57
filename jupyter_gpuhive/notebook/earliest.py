"""%gpureserve --earliest: the best slots the server's finder offers (POST reservations/search),
shown as a table or, with --book, the first one booked; and what --wait can expect."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from IPython.core.error import UsageError

from ..model import describe_duration, parse_ref
from .args import parse_gpu_args, parse_when
from .client import HiveClientError
from .lending import lending_body
from .magicviews import ReservationResult, Rows, local

UTC = timezone.utc
Magics = Any  # notebook.magics.GpuHiveMagics (it imports this module)


def search_body(magics: Magics, args: Any, limit: int = 5) -> dict[str, Any]:
    """The search request of a %gpureserve command line (a count, or host:indices)."""
    gpus, count = parse_gpu_args(args.gpus)
    if not gpus and count is None:
        raise UsageError("Name GPUs (gpu1:0,1) or a count (4); see %gpureserve --help.")
    start, end = magics._span(args)
    body: dict[str, Any] = {"duration": (end - start).total_seconds(), "limit": limit}
    if args.start:
        body["not_before"] = start.isoformat()
    if gpus:
        refs = [parse_ref(g) for g in gpus]
        whole = [r for r in refs if r is not None and not r.is_slice]
        if len(whole) != len(refs):
            raise UsageError(
                "--earliest names whole GPUs as host:index (gpu1:0,1), not MIG slices or UUIDs; "
                "for slices give a count with --slices or --profile, e.g. 1 --slices --host gpu1."
            )
        hosts = {r.host for r in whole}
        if len(hosts) != 1:
            raise UsageError("--earliest with named GPUs needs GPUs of one host (gpu1:0,1).")
        body["host"] = hosts.pop()
        body["indices"] = [r.index for r in whole]
    else:
        body["count"] = count
    if args.host:
        body["host"] = args.host
    if getattr(args, "before", None):
        body["deadline"] = parse_when(args.before, datetime.now(UTC)).isoformat()
    for flag, field in (("nvlink", "nvlink"), ("same_host", "same_host"), ("numa", "same_numa"),
                        ("slices", "slices")):  # fmt: skip
        if getattr(args, flag, False):
            body[field] = True
    for field in ("profile", "vendor", "model"):
        if getattr(args, field, None):
            body[field] = getattr(args, field)
    return body


def search(magics: Magics, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The finder's answers for `body`."""
    found = magics._call(magics.client.request, "POST", "reservations/search", body=body)
    return list(found["slots"])


def earliest(magics: Magics, args: Any) -> Any:
    """Show the best slots, or book the first (--book) and pin to it like a plain booking."""
    slots = search(magics, search_body(magics, args, limit=1 if args.book else 5))
    if not slots:
        raise UsageError(
            "No slot fits that request before the deadline (the booking horizon, or --before); "
            "try fewer GPUs, fewer constraints or a shorter --for."
        )
    if not args.book:
        columns = [("start", lambda s: local(s["start"])), ("end", lambda s: local(s["end"])),
                   ("GPUs", lambda s: ", ".join(s["gpus"]))]  # fmt: skip
        return Rows(slots, columns, "No slot fits.")
    first = slots[0]
    body = {"title": args.title, "gpus": first["gpus"], "start": first["start"],
            "end": first["end"], **lending_body(args)}  # fmt: skip
    try:
        done = magics.client.reserve(**body)
    except HiveClientError as error:
        raise UsageError(f"The slot was found but not booked: {error.message}") from None
    headline = (
        f"Reserved {', '.join(done['gpus'])} from {local(done['start'])} to "
        f"{local(done['end'])} (reservation {done['id']}), the earliest slot that fits."
    )
    notes = [] if args.no_pin else [magics._pin(done)]
    return ReservationResult(done, headline, notes)


def expected_wait(magics: Magics, args: Any) -> str | None:
    """For --wait: when the finder expects the GPUs to be bookable, in words (None: unknown)."""
    try:
        body = search_body(magics, args, limit=1)
        body.pop("not_before", None)
        slots = search(magics, body)
    except (UsageError, HiveClientError):
        return None
    if not slots:
        return "The finder sees no slot for this within the booking horizon."
    start = datetime.fromisoformat(slots[0]["start"])
    ahead = start - datetime.now(UTC)
    if ahead.total_seconds() <= 60:
        return None
    return (
        f"The earliest slot for this starts {local(slots[0]['start'])} (in "
        f"{describe_duration(ahead)}, on {', '.join(slots[0]['gpus'])}): the wait will probably "
        "end then, unless someone cancels sooner."
    )
