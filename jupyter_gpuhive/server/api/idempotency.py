"""`Idempotency-Key` on creating POSTs: a retried request gets the first answer, not a twin.

A client sends a new key (1 to 255 visible ASCII characters; a UUID is typical) with each
creating POST and the same key with each retry of it. Per user, the first request with a key
claims it and its answer is stored (`store/idempotency.py`); a retry of the same request
(same method, path and JSON body) gets that answer again with `Idempotent-Replayed: true`;
the key with another request is a 422; a retry while the first still runs is a 409 with
`Retry-After`. A first request that failed with a 5xx or was dropped before it changed
anything frees its key. Keys expire after a day.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

from ...errors import BadRequest, Conflict, Invalid
from ...hive import ERRAND, Errand, Hive
from ...model import utcnow
from .admission import InProgress

T = TypeVar("T")
log = logging.getLogger(__name__)
HEADER = "Idempotency-Key"
REPLAYED = "Idempotent-Replayed"  # on an answer given again for a retried key
TTL = timedelta(hours=24)
_KEY = re.compile(r"[\x21-\x7e]{1,255}")


def fingerprint(method: str, path: str, body: bytes) -> str:
    """What makes two requests the same: method, path and body (JSON compared as data)."""
    try:
        data: Any = json.loads(body) if body else None
        canonical = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    except (ValueError, UnicodeDecodeError, RecursionError):
        canonical = body
    return hashlib.sha256(f"{method} {path}\n".encode() + canonical).hexdigest()


def valid_key(raw: str) -> str:
    """The header's value, or a 400 that says what a key may be."""
    if not _KEY.fullmatch(raw):
        raise BadRequest(
            f"The {HEADER} header must be 1 to 255 visible ASCII characters (no spaces); "
            "a new UUID per request is typical."
        )
    return raw


def _at(when: datetime | None) -> str:
    return when.strftime("%H:%M:%S UTC") if when is not None else "earlier"


# Answers being stored after they went out, by (owner, key), in this process: a retry that
# reaches the same process waits for its key's answer instead of being told to come back.
_STORING: dict[tuple[str, str], asyncio.Future[None]] = {}


async def answers_stored() -> None:
    """Wait for the answers still being stored (before the store closes, at shutdown)."""
    while _STORING:
        await asyncio.gather(*list(_STORING.values()), return_exceptions=True)


class KeyUse:
    """One request's use of its key: claimed, bound to its errand, then settled."""

    def __init__(self, hive: Hive, owner: str, key: str) -> None:
        self.hive, self.owner, self.key = hive, owner, key

    async def claim(self, print_: str, deadline: float) -> Any:
        """Claim the key; a 409 or 422 if it cannot be used now; the stored answer to replay."""
        storing = _STORING.get((self.owner, self.key))
        if storing is not None:
            await asyncio.shield(storing)  # its answer went out and is being stored
        stale = timedelta(seconds=max(60.0, 3 * deadline))
        keys = self.hive.store.idempotency
        claim = await self._outside(keys.claim, self.owner, self.key, print_, utcnow(), TTL, stale)
        if claim.outcome == "mismatch":
            raise Invalid(
                f"This {HEADER} was used at {_at(claim.since)} for a different request "
                "(another method, path or body). Send a new key with each new request."
            )
        if claim.outcome == "busy":
            raise InProgress(
                f"The request first sent with this {HEADER} at {_at(claim.since)} is still "
                "being carried out. Retry with the same key in a moment to get its answer."
            )
        if claim.outcome == "lost":
            raise Conflict(
                f"The request first sent with this {HEADER} at {_at(claim.since)} was carried "
                "out, but the service stopped before it could store the answer. Look up what "
                "it made (your reservations or jobs) before sending it again with a new key."
            )
        return claim

    def bind(self, errand: Errand) -> None:
        """Mark the key applied inside the request's first write transaction."""
        keys, owner, key = self.hive.store.idempotency, self.owner, self.key
        errand.on_write = lambda connection: keys.applied(connection, owner, key)

    def settle_after(self, status: int, body: bytes, location: str | None) -> None:
        """Store an answer below 500 once it went out (`settle`): it costs the client no
        wait. A retry meanwhile finds the key busy (409, `Retry-After`) on another process
        and waits for it here, so it gets the answer, never a twin."""
        mine = (self.owner, self.key)
        storing = asyncio.ensure_future(self.settle(status, body, location, wrote=True))
        _STORING[mine] = storing

        def done(_: asyncio.Future[None]) -> None:
            if _STORING.get(mine) is storing:
                del _STORING[mine]

        storing.add_done_callback(done)

    async def settle(self, status: int, body: bytes, location: str | None, wrote: bool) -> None:
        """Store the answer, or free the key of a request that failed and changed nothing."""
        keys = self.hive.store.idempotency
        try:
            if status < 500:
                text = body.decode("utf-8", "replace")
                await self._outside(keys.answer, self.owner, self.key, status, text, location)
            elif not wrote:
                await self._outside(keys.release, self.owner, self.key)
            # else it changed something, then failed: a retry is told so once the claim is stale
        except Exception:
            log.exception("gpuhive: storing the answer to an Idempotency-Key failed")

    async def release(self) -> None:
        """Free the key of a request that changed nothing (its identity was not confirmed)."""
        await self._outside(self.hive.store.idempotency.release, self.owner, self.key)

    async def _outside(self, fn: Callable[..., T], *args: Any) -> T:
        """Run key bookkeeping outside the request's errand (it is never dropped)."""
        token = ERRAND.set(None)
        try:
            return await self.hive.run(fn, *args)
        finally:
            ERRAND.reset(token)
