"""Loaded by every Python process of `make test-dates` (tests/dates.py puts this folder first on
PYTHONPATH): time.sleep() that works under libfaketime with FAKETIME_DONT_FAKE_MONOTONIC=1.

Python 3.11+ sleeps with clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, ...), which libfaketime
0.9.10 (Debian 12) shifts by the fake offset although the monotonic clock is not faked, so every
time.sleep() fails with EINVAL (wolfcw/libfaketime#426). select() sleeps for a relative timeout,
which libfaketime leaves alone, and Python retries it with the time left after a signal.
"""

from __future__ import annotations

import os
import select
import time

if os.environ.get("FAKETIME") and "libfaketime" in os.environ.get("LD_PRELOAD", ""):

    def _sleep(seconds: float) -> None:
        """time.sleep() through select(): relative, so libfaketime does not touch it."""
        if seconds < 0:
            raise ValueError("sleep length must be non-negative")
        select.select([], [], [], seconds)

    time.sleep = _sleep  # type: ignore[assignment]
