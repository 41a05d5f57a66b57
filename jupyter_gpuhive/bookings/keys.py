"""Idempotency-Keys of creating requests: their rows read and their answers stored.

The key itself is taken by the request's first write handed its errand (the store does it,
with the key the errand carries); this facade keeps the rest of the bookkeeping, which is
handed no errand (it takes no key and never waits for the Hub's confirmation) and runs
outside the request's scheduling: it is never dropped.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar

from ..model import utcnow
from ..model.errand import ERRAND, Claim, KeyTerms
from ..store import Store

T = TypeVar("T")
Run = Callable[..., Awaitable[Any]]


class RequestKeys:
    """The API's Idempotency-Keys: what a key's row says, and the answers stored under it."""

    def __init__(self, store: Store, run: Run) -> None:
        self.store, self.run = store, run

    async def peek(self, terms: KeyTerms) -> Claim | None:
        """How the key was answered before, or None where it is free."""
        found: Claim | None = await self._outside(self.store.idempotency.peek, terms, utcnow())
        return found

    async def answer(
        self, terms: KeyTerms, status: int, body: str, location: str | None, expired: datetime
    ) -> None:
        """Store the answer of a request whose write took the key (purging keys older than
        `expired`, at most once a minute per process)."""
        keys = self.store.idempotency
        await self._outside(keys.answer, terms.owner, terms.key, status, body, location, expired)

    async def refusal(self, terms: KeyTerms, status: int, body: str, location: str | None) -> None:
        """Store the answer of a request that changed nothing, where no retry took the key."""
        await self._outside(self.store.idempotency.refusal, terms, utcnow(), status, body, location)

    async def _outside(self, fn: Callable[..., T], *args: Any) -> T:
        """Run key bookkeeping outside the request's scheduling (it is never dropped)."""
        token = ERRAND.set(None)
        try:
            done: T = await self.run(fn, *args)
            return done
        finally:
            ERRAND.reset(token)
