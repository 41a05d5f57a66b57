"""The health port answers from its own thread while the event loop is blocked for real."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from typing import Any

from jupyter_gpuhive.server.heartbeat import Heartbeat
from jupyter_gpuhive.sim.ports import free_port


def health(port: int) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


async def test_the_health_port_answers_while_the_loop_is_blocked() -> None:
    beat = Heartbeat(max_lag=0.2, facts=lambda: {"leader": True, "in_flight": 3})
    beat.start()
    port = beat.serve("127.0.0.1", free_port())
    try:
        await asyncio.sleep(0)  # the first beat
        status, body = health(port)  # asked from the loop's own thread: it is blocked meanwhile
        assert status == 200, body
        assert body["ok"] is True and body["leader"] is True and body["in_flight"] == 3
        assert body["loop_lag_s"] >= 0

        # the loop stays blocked (on purpose: what a busy replica does) past its beat and max_lag
        time.sleep(Heartbeat.PERIOD + 0.5)  # noqa: ASYNC251
        status, body = health(port)
        assert status == 503, body
        assert body["ok"] is False and body["leader"] is True
        assert "event loop is" in body["message"] and "behind" in body["message"]

        for _ in range(100):  # the loop runs again: it beats
            await asyncio.sleep(Heartbeat.PERIOD)
            if health(port)[0] == 200:
                break
        else:
            raise AssertionError("the loop ran again, but the health port never said so")
    finally:
        await beat.stop()


def test_a_checker_that_hangs_up_leaves_no_traceback(capsys: Any) -> None:
    """haproxy resets its check connection once it has read the status: the server's thread
    then fails writing the body, and that is no error for the service's log; other errors
    still are."""
    from jupyter_gpuhive.server.heartbeat import _QuietServer

    beat = Heartbeat(max_lag=1, facts=dict)
    port = beat.serve("127.0.0.1", free_port())
    server = beat._server
    assert isinstance(server, _QuietServer)
    try:
        try:
            raise ConnectionResetError(104, "Connection reset by peer")
        except ConnectionResetError:
            server.handle_error(None, ("127.0.0.1", port))
        assert "Traceback" not in capsys.readouterr().err
        try:
            raise ValueError("a real fault")
        except ValueError:
            server.handle_error(None, ("127.0.0.1", port))
        assert "ValueError: a real fault" in capsys.readouterr().err
    finally:
        server.shutdown()
        server.server_close()
