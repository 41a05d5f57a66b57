"""Admission control: a bound on the API requests one process serves at once.

Beyond `limit` requests in flight a new one is refused at once with 503 and `Retry-After`,
before its credentials are checked or any database work is queued: past saturation the
service keeps serving at its best rate instead of queueing work its clients give up on, and
its memory stays bounded too (benchmarks/overload_memory.py: 400 clients for 20 s took a
replica from 151 to 161 MiB with the bound, to 194-221 MiB without it, never given back;
glibc's malloc_trim and gc.collect after the burst gave back nothing measurable).
Each admitted request gets an errand with its deadline (`jupyter_gpuhive.store.errand`):
database work it has not started by then, or after its client has gone, is not started.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import Conflict, Unavailable

SETTING = "gpuhive_admission"  # the tornado setting that holds the process's Intake


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
