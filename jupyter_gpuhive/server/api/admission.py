"""Admission control: a bound on the API requests one process serves at once.

Beyond `limit` requests in flight a new one is refused at once with 503 and `Retry-After`,
before its credentials are checked or any database work is queued: past saturation the
service keeps serving at its best rate instead of queueing work its clients give up on.
Each admitted request gets an errand with its deadline (`jupyter_gpuhive.store.errand`):
database work it has not started by then, or after its client has gone, is not started.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from ...errors import Conflict, Unavailable

log = logging.getLogger(__name__)
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
    peak: int = field(default=0, repr=False)  # the most in flight since the last burst ended

    def enter(self) -> None:
        """Count a new request in, or raise Overloaded."""
        if self.limit and self.in_flight >= self.limit:
            self.refused += 1
            raise Overloaded(
                f"The service is busy: {self.in_flight} requests are in flight, the most it "
                f"serves at once (max_requests_in_flight). Retry in a moment."
            )
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)

    def leave(self) -> None:
        """Count a request out; after a burst, give memory back (`trim`)."""
        self.in_flight -= 1
        if self.in_flight == 0 and self.limit and self.peak >= self.limit // 2:
            self.peak = 0
            trim()


def trim() -> None:
    """Collect garbage and hand freed heap pages back to the OS (glibc's malloc_trim)."""
    gc.collect()
    _malloc_trim(0)


def _load_malloc_trim() -> Callable[[int], int]:
    import ctypes
    import ctypes.util

    try:
        trim_heap: Callable[[int], int] = ctypes.CDLL(
            ctypes.util.find_library("c") or "libc.so.6"
        ).malloc_trim
        return trim_heap
    except (OSError, AttributeError):  # not glibc
        return lambda _pad: 0


_malloc_trim = _load_malloc_trim()
