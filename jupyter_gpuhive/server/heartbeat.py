"""The service's event-loop heartbeat, and a health check served from a thread of its own.

A load balancer that checks `PREFIX/health` on the main port waits in the same queue as
every API request: under overload it timed out on every replica, so all were dropped at
once. The health port answers from its own thread whatever the loop is doing, and tells
the truth about the loop: the loop beats every `PERIOD` seconds; a replica whose loop has
not beaten for `max_lag` seconds past its period answers 503 (it is stuck, not just busy).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger(__name__)


class _QuietServer(ThreadingHTTPServer):
    """A checker that hangs up before reading its answer (haproxy resets its connection
    once it has the status line) is no error worth a traceback in the service's log."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class Heartbeat:
    """The main loop's last beat; `state()` may be read from any thread."""

    PERIOD = 0.5

    def __init__(self, max_lag: float, facts: Callable[[], dict[str, Any]]) -> None:
        self.max_lag = max_lag
        self.facts = facts  # what else a health answer says (leader, requests in flight)
        self.last = time.monotonic()
        self._task: asyncio.Task[None] | None = None
        self._server: ThreadingHTTPServer | None = None

    def start(self) -> None:
        """Start beating (on the running loop)."""
        self._task = asyncio.get_running_loop().create_task(self._beat())

    async def _beat(self) -> None:
        while True:
            self.last = time.monotonic()
            await asyncio.sleep(self.PERIOD)

    def state(self) -> tuple[int, dict[str, Any]]:
        """The HTTP status and JSON body of a health answer now."""
        lag = max(0.0, time.monotonic() - self.last - self.PERIOD)  # how late the beat is
        ok = lag <= self.max_lag
        body = {"ok": ok, **self.facts(), "loop_lag_s": round(lag, 3)}
        if not ok:
            body["message"] = (
                f"The service's event loop is {lag:.1f} s behind (limit {self.max_lag:g} s)."
            )
        return (200 if ok else 503), body

    def serve(self, host: str, port: int) -> int:
        """Answer GET (any path) on host:port from a daemon thread; the port it listens on."""
        beat = self

        class Answer(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                status, body = beat.state()
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: a load balancer checks every few seconds."""

        server = _QuietServer((host, port), Answer)
        server.daemon_threads = True
        self._server = server
        threading.Thread(target=server.serve_forever, name="gpuhive-health", daemon=True).start()
        return int(server.server_address[1])

    async def stop(self) -> None:
        if self._server is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._server.shutdown)
            self._server.server_close()
            self._server = None
        if self._task is not None:
            self._task.cancel()
            self._task = None
