"""Whether a process of the test machine still runs (for tests that end processes)."""

from __future__ import annotations

import os


def alive(pid: int) -> bool:
    """Whether process `pid` exists (a zombie counts until it is reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
