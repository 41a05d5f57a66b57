"""Poller: a supervised background thread that calls a function every few seconds."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


class Poller:
    """Runs `tick` every `interval` seconds until stopped; an exception ends one round only."""

    def __init__(
        self, tick: Callable[[], None], interval: float = 5.0, name: str = "gpuhive"
    ) -> None:
        self.tick = tick
        self.interval = interval
        self.name = name
        self.last_error = ""
        self.rounds = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        if self.running:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=f"{self.name}-poller", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
                self.last_error = ""
            except Exception as error:  # one failed round must not end the refresh
                self.last_error = str(error) or type(error).__name__
                log.warning("gpuhive: %s refresh failed: %s", self.name, self.last_error)
            self.rounds += 1
            self._stop.wait(self.interval)


class LiveSwitch:
    """A Live/Pause toggle button that starts and stops a Poller."""

    def __init__(self, poller: Poller) -> None:
        import ipywidgets as w

        self.poller = poller
        self.button = w.ToggleButton(value=False, description="Live", icon="play")
        self.button.observe(self._toggled, "value")

    def _toggled(self, change: dict[str, Any]) -> None:
        if change["new"]:
            self.poller.start()
        else:
            self.poller.stop()
        self.button.icon = "pause" if change["new"] else "play"

    def start(self) -> None:
        self.button.value = True

    def stop(self) -> None:
        self.button.value = False
