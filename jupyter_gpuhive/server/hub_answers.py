"""The Hub's last answer about each token, remembered by the service for a few seconds.

gpuhive asks the Hub through HubAuth's public `user_for_token(token, use_cache=False)` and
keeps the answers itself: reads use one for `token_cache_seconds`, a write asks afresh and
its answer replaces the one reads use, and a write that changes only the database runs on
it while the Hub confirms (server/hub.py). HubAuth's own cache, and the format of its
keys, stay HubAuth's business (docs/explanation/upstream-notes.md).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from typing import Any

Answer = dict[str, Any] | None  # the Hub's user model, or None: it does not know the token
SETTING = "gpuhive_hub_answers"


class HubAnswers:
    """Answers about tokens (keyed by the token's SHA-256), each for `seconds`."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self._clock = clock
        self._answers: dict[str, tuple[float, Answer]] = {}
        self._purged = clock()

    def get(self, token: str) -> tuple[bool, Answer]:
        """(whether an answer younger than `seconds` is remembered, that answer)."""
        found = self._answers.get(_key(token))
        if found is None or self._clock() - found[0] >= self.seconds:
            return False, None
        return True, found[1]

    def put(self, token: str, answer: Answer) -> None:
        """Remember the Hub's answer about `token` from now on."""
        now = self._clock()
        if now - self._purged >= self.seconds:  # old answers go, at most once a period
            self._answers = {k: v for k, v in self._answers.items() if now - v[0] < self.seconds}
            self._purged = now
        self._answers[_key(token)] = (now, answer)


def _key(token: str) -> str:
    return hashlib.sha256(token.encode("utf8", "replace")).hexdigest()
