"""What the database work of one API request may still do: its errand (request state, not
storage: the store only reads what a write is handed).

The web layer opens an errand per request. Its writes get it explicitly, along the request
path (handler → service → store → `Database.write(work, errand=...)`): a keyed request's
Idempotency-Key (`key`, the terms the server read from the request) is taken first in the
first write handed the errand, so the booking and its key commit together, and a retry of a
request that already wrote is told so before its own checks could answer otherwise; no
write handed it commits before the Hub confirmed the request's identity (`gate`), and its
first one rolls back when the client stopped waiting (`writing`).

Scheduling alone goes through a ContextVar (`ERRAND`, read by `in_executor` only): the Hive
consults the errand in the executor thread right before each piece of blocking work starts
(`Errand.check`), so work queued behind a busy pool is dropped once its client has gone or
its deadline has passed. Once the request has committed a write (any of its work's: the
executor counts the database's commits, `in_executor`'s `commits`), nothing more is dropped:
its answer must be given (and stored under its idempotency key), since the change stays. A
request that reaches hosts (`whole`: a job's launch, a brokered kernel) runs to its end once
its work has started: what it did on a host must be recorded.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import time
from collections.abc import Callable
from concurrent.futures import Executor
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal, TypeVar

from ..errors import HiveError, Unavailable, Unconfirmed

T = TypeVar("T")

# A first write is rolled back this long before its client's deadline: the commit and the
# answer's way back take time too (milliseconds here; a slow disk's fsync is longer).
COMMIT_MARGIN = 0.1

# The longest a write waits at its commit for the Hub's confirmation (its own request to
# the Hub ends long before: HubAuth's timeout).
GATE_WAIT = 60.0
_UNCONFIRMED = "The Hub did not confirm your token in time; nothing was changed. Retry."

ERRAND: ContextVar[Errand | None] = ContextVar("gpuhive_errand", default=None)


# --- a request's Idempotency-Key (the store takes it in the request's first write) ---

Outcome = Literal["claimed", "replay", "mismatch", "busy", "lost"]


@dataclass(frozen=True)
class Claim:
    """What taking a key found: the request runs ('claimed'), or how to answer instead."""

    outcome: Outcome
    status: int | None = None  # 'replay': the stored answer
    body: str | None = None
    location: str | None = None
    since: datetime | None = None  # when the key was first used


class KeyAnswered(HiveError):
    """A write found its request's key taken: the request is answered from the key's row
    (`claim`) instead, its transaction rolled back (server/api/idempotency.py words it)."""

    status = 409

    def __init__(self, claim: Claim) -> None:
        super().__init__(f"This Idempotency-Key was used before ({claim.outcome}).")
        self.claim = claim


@dataclass(frozen=True)
class KeyTerms:
    """One request's key: whose, which, for what request, and how long claims live."""

    owner: str
    key: str
    fingerprint: str
    ttl: timedelta  # a key older than this counts as new
    stale: timedelta  # an earlier-scheme claim older than this, with no write, is taken over


class Dropped(Unavailable):
    """The request's work was not started: its client went away or its deadline passed."""

    retry_after = 1


@dataclass
class Errand:
    """One request's liveness, as its database work sees it (thread-safe enough: flags)."""

    deadline: float  # time.monotonic() after which no new work starts
    seconds: float  # the deadline as configured (for the message)
    closed: bool = False  # the client closed its connection
    finished: bool = False  # the answer went out: background work it spawned may run
    wrote: bool = False  # a write of this request committed
    took_key: bool = False  # a write handed this errand committed with its key taken
    whole: bool = False  # once its work has started, it runs to the end
    started: bool = False  # a piece of its work has started
    key: KeyTerms | None = None  # its Idempotency-Key, taken in the first write handed it
    # Set while the request runs on an identity remembered from the Hub's last answer and
    # the Hub is asked afresh meanwhile (server/hub.py): True once the Hub confirmed it.
    # No write of the request commits before that, and none at all unless it is True.
    gate: concurrent.futures.Future[bool] | None = field(default=None, repr=False)
    # time.monotonic() after which the client no longer listens (it said how long it waits,
    # `Gpuhive-Client-Timeout`): no work starts, and no first write commits, after it
    client_deadline: float | None = None

    @classmethod
    def starting(cls, seconds: float, whole: bool = False) -> Errand:
        return cls(time.monotonic() + seconds, seconds, whole=whole)

    def check(self) -> None:
        """Raise Dropped if work for this request must not start now."""
        if self._bound():
            return
        if self.closed:
            raise Dropped("The client closed its connection; the request was not carried out.")
        if self._client_gone():
            raise Dropped(_CLIENT_GONE)
        if time.monotonic() > self.deadline:
            raise Dropped(
                f"The service is busy: the request waited past its deadline of "
                f"{self.seconds:g} s and was not carried out. Retry in a moment.",
            )

    def unkeyed(self) -> bool:
        """Whether its writes take no key now: it has none, or a write already took it."""
        return self.key is None or self.took_key or self.finished

    def writing(self, connection: Any) -> None:
        """Inside each write transaction handed this errand (before its commit).

        The request's first write is rolled back (Dropped) when its client stopped waiting
        before the commit: applied, it could never be acknowledged; rolled back, the
        client's retry with the same Idempotency-Key carries it out once."""
        self.confirmed()  # first: the client may stop waiting while the Hub is asked
        if not self._bound() and self._client_gone(COMMIT_MARGIN):
            raise Dropped(_CLIENT_GONE)

    def confirmed(self) -> None:
        """Wait until the Hub confirmed the identity the request runs on (`gate`), or raise
        Unconfirmed; at once without a gate."""
        if self.gate is None:
            return
        try:
            confirmed = self.gate.result(timeout=GATE_WAIT)
        except concurrent.futures.TimeoutError:
            confirmed = False
        if not confirmed:
            raise Unconfirmed(_UNCONFIRMED)

    def _bound(self) -> bool:
        """Its answer must be given: it went out, a write committed, or host work started."""
        return self.finished or self.wrote or (self.whole and self.started)

    def _client_gone(self, margin: float = 0.0) -> bool:
        if self.client_deadline is None:
            return False
        return time.monotonic() > self.client_deadline - margin

    def committed(self, took_key: bool = False) -> None:
        """A write of the request committed (`took_key`: with the request's key taken)."""
        self.wrote = True
        self.took_key = self.took_key or took_key


_CLIENT_GONE = (
    "The service is busy: this request could not be carried out within the time its client "
    "said it waits (Gpuhive-Client-Timeout), so nothing was changed. Retry in a moment."
)


def current() -> Errand | None:
    """The errand of the request this code runs for, if any."""
    return ERRAND.get()


async def in_executor(
    executor: Executor, work: Callable[[], T], commits: Callable[[], int] | None = None
) -> T:
    """Run blocking `work` in `executor`; an API request's only while its errand allows,
    checked in the executor thread right before it starts (and in the request's context,
    so work it schedules in turn is checked too). `commits`: the executor thread's count of
    committed writes (`Database.commits`); one more after `work` marks the request written."""
    loop = asyncio.get_running_loop()
    errand = current()
    if errand is None:
        return await loop.run_in_executor(executor, work)
    errand.check()  # before queueing as well: no thread for work already void
    return await loop.run_in_executor(
        executor, contextvars.copy_context().run, _checked, errand, work, commits
    )


def _checked(errand: Errand, work: Callable[[], T], commits: Callable[[], int] | None) -> T:
    errand.check()
    errand.started = True
    before = commits() if commits is not None else 0
    try:
        return work()
    finally:
        if commits is not None and commits() != before:
            errand.committed()  # its change stays, whatever follows: the answer must be given
