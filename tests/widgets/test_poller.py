"""Poller: a failing round is reported and the refresh goes on."""

from __future__ import annotations

from jupyter_gpuhive.widgets.poller import Poller
from tests.support.waiting import wait_for


def test_a_failed_round_does_not_end_the_refresh() -> None:
    calls: list[int] = []

    def tick() -> None:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("server restarting")

    poller = Poller(tick, interval=0.01)
    poller.start()
    wait_for(lambda: len(calls) >= 4, 5, "4 rounds", interval=0.01)
    poller.stop()
    assert len(calls) >= 4 and not poller.running
    assert poller.last_error == ""  # cleared by the next good round
