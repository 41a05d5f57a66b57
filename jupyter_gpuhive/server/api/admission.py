"""Admission control: a bound on the API requests one process serves at once.

Beyond `limit` requests in flight a new one is refused at once with 503 and `Retry-After`,
before its credentials are checked or any database work is queued: past saturation the
service keeps serving at its best rate instead of queueing work its clients give up on, and
its memory stays bounded too (benchmarks/overload_memory.py: 400 clients for 20 s took a
replica from 151 to 161 MiB with the bound, to 194-221 MiB without it, never given back;
glibc's malloc_trim and gc.collect after the burst gave back nothing measurable).
Each admitted request gets an errand with its deadline (`jupyter_gpuhive.model.errand`):
database work it has not started by then, or after its client has gone, is not started.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ...errors import BadRequest, Conflict, Unavailable

SETTING = "gpuhive_admission"  # the tornado setting that holds the process's Intake
# How long the client waits for this answer, in seconds (HiveClient sends its timeout):
# after it, the request's work is not started and its first write is not committed.
TIMEOUT_HEADER = "Gpuhive-Client-Timeout"
# When the load balancer received the request (haproxy: `t=` and microseconds; see
# examples/deploy/haproxy.cfg): the client's wait began then, not when a replica got it.
START_HEADER = "X-Request-Start"
LONGEST_TIMEOUT = 3600.0


class Overloaded(Unavailable):
    """More requests are in flight than the process serves at once."""

    retry_after = 1


class InProgress(Conflict):
    """A request with the same Idempotency-Key is still running."""

    retry_after = 1


@dataclass
class Intake:
    """The requests in flight in one process (the event loop's thread only)."""

    limit: int = 64  # 0: no bound
    deadline: float = 20.0  # seconds a request may take to start its database work
    in_flight: int = 0
    refused: int = 0  # requests refused for the bound
    gone: int = 0  # requests whose client closed the connection before the answer

    def enter(self) -> None:
        """Count a new request in, or raise Overloaded."""
        if self.limit and self.in_flight >= self.limit:
            self.refused += 1
            raise Overloaded(
                f"The service is busy: {self.in_flight} requests are in flight, the most it "
                f"serves at once (max_requests_in_flight). Retry in a moment."
            )
        self.in_flight += 1

    def leave(self) -> None:
        """Count a request out."""
        self.in_flight -= 1


def client_deadline(request: Any) -> float | None:
    """The time.monotonic() at which the request's client stops waiting, or None (it did
    not say). Raises BadRequest for a timeout that is not a number of seconds in range."""
    raw = request.headers.get(TIMEOUT_HEADER)
    if raw is None:
        return None
    try:
        timeout = float(raw)
    except ValueError:
        timeout = float("nan")
    if not 0 < timeout <= LONGEST_TIMEOUT:  # also false for nan
        raise BadRequest(
            f"The {TIMEOUT_HEADER} header must be the seconds the client waits for the "
            f"answer, more than 0 and at most {LONGEST_TIMEOUT:g} (got {raw[:40]!r})."
        )
    now = time.time()
    began = _balancer_start(request.headers.get(START_HEADER), now)
    if began is None:
        began = now - request.request_time()  # when this process began reading it
    return time.monotonic() + (began + timeout - now)


def _balancer_start(raw: str | None, now: float) -> float | None:
    """The load balancer's reception time (epoch seconds) from `t=NUMBER` in seconds,
    milliseconds or microseconds; None when absent, unreadable or not in the last minute
    (a clock that disagrees is not believed: this process's own time is used instead)."""
    if not raw:
        return None
    text = raw.strip().removeprefix("t=")
    try:
        number = float(text)
    except ValueError:
        return None
    for scale in (1.0, 1e3, 1e6):  # seconds, milliseconds, microseconds since the epoch
        seconds = number / scale
        if now - 60 <= seconds <= now + 1:
            return seconds
    return None
