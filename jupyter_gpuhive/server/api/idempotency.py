"""`Idempotency-Key` on creating POSTs: a retried request gets the first answer, not a twin.

A client sends a new key (1 to 255 visible ASCII characters; a UUID is typical) with each
creating POST and the same key with each retry of it. Per user, the first request with a key
takes it in its first write transaction, and its answer is stored (`store/idempotency.py`);
a retry of the same request (same method, path and JSON body) gets that answer again with
`Idempotent-Replayed: true`; the key with another request is a 422; a retry while the first
still runs is a 409 with `Retry-After`. A request refused without a change (a 4xx) stores
that answer too, where no retry took the key meanwhile. One that failed with a 5xx or was
dropped before it changed anything leaves the key free. Keys expire after a day.

The key is taken by the write itself, not in a transaction before the request runs: that
transaction (and its thread hop) cost every booking 4 ms at the median and 35-50 ms at the
p99 on a loaded site. A retry of a request that wrote finds the key taken at the start of
its own write, before its checks (a clash with its own booking, say) could answer otherwise.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
from datetime import datetime, timedelta
from typing import Any

from ...errors import BadRequest, Conflict, HiveError, Invalid
from ...hive import Hive
from ...model import utcnow
from ...model.errand import Errand, KeyAnswered, KeyTerms
from .admission import InProgress

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
    """One request's use of its key: carried by its errand (the store takes it in the
    request's first write), then its answer stored."""

    def __init__(self, hive: Hive, owner: str, key: str, print_: str, deadline: float) -> None:
        self.keys, self.owner, self.key = hive.identities.keys, owner, key
        stale = timedelta(seconds=max(60.0, 3 * deadline))
        self.terms = KeyTerms(owner, key, print_, TTL, stale)

    async def ready(self) -> None:
        """Wait for an answer of this key being stored by this process (it just went out):
        the retry then gets it, rather than a 409 to come back."""
        storing = _STORING.get((self.owner, self.key))
        if storing is not None:
            await asyncio.shield(storing)

    async def peek(self) -> None:
        """For a request that reaches hosts: answer from the key's row before it starts, if
        the key was used (a retry must not run its checks on hosts again)."""
        found = await self.keys.peek(self.terms)
        if found is not None:
            raise KeyAnswered(found)

    def bind(self, errand: Errand) -> None:
        """Hand the key to the request's errand: its first write transaction takes it first
        (or rolls back with KeyAnswered, and the handler answers from the key's row)."""
        errand.key = self.terms

    def settle_after(self, status: int, body: bytes, location: str | None, wrote: bool) -> None:
        """Store an answer below 500 once it went out (`settle`): it costs the client no
        wait. A retry meanwhile finds the key busy (409, `Retry-After`) on another process
        and waits for it here, so it gets the answer, never a twin."""
        mine = (self.owner, self.key)
        storing = asyncio.ensure_future(self.settle(status, body, location, wrote))
        _STORING[mine] = storing

        def done(_: asyncio.Future[None]) -> None:
            if _STORING.get(mine) is storing:
                del _STORING[mine]

        storing.add_done_callback(done)

    async def settle(self, status: int, body: bytes, location: str | None, wrote: bool) -> None:
        """Store the answer (below 500): the write's key gets it, or a request that changed
        nothing stores it as a refusal. A 5xx stores nothing: one that changed nothing left
        the key free; one that did change something leaves it taken, and a retry is told so
        once it is stale."""
        if status >= 500:
            return
        text = body.decode("utf-8", "replace")
        try:
            if wrote:
                expired = utcnow() - TTL  # purged at most once a minute per process
                await self.keys.answer(self.terms, status, text, location, expired)
            else:
                await self.keys.refusal(self.terms, status, text, location)
        except Exception:
            log.exception("gpuhive: storing the answer to an Idempotency-Key failed")


def refusal(answered: KeyAnswered) -> HiveError:
    """The error a request gets whose key was used before and not for a replay."""
    claim = answered.claim
    if claim.outcome == "mismatch":
        return Invalid(
            f"This {HEADER} was used at {_at(claim.since)} for a different request "
            "(another method, path or body). Send a new key with each new request."
        )
    if claim.outcome == "lost":
        return Conflict(
            f"The request first sent with this {HEADER} at {_at(claim.since)} was carried "
            "out, but the service stopped before it could store the answer. Look up what "
            "it made (your reservations or jobs) before sending it again with a new key."
        )
    return InProgress(
        f"The request first sent with this {HEADER} at {_at(claim.since)} is still "
        "being carried out. Retry with the same key in a moment to get its answer."
    )
