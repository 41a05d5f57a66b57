"""The courier: webhook delivery in a process of its own, so the server only hands events over.

Measured (benchmarks/integrations.py): HTTP clients, signing and the delivery log's writes
cost about as much CPU per event as the booking that caused it; on the server's loop, or on
a thread of the server's process (which shares its GIL), they tripled the reservation API's
p99. In their own process they take nothing from the server but the CPU the machine has.

The server's side (`Courier`) starts the process on first use and writes length-prefixed
pickled messages to its stdin (an asyncio pipe: it never waits for the process); the process
(`main`, run by `python -c`) answers on its stdout. Messages:
("start", db_url, settings, transports) → ("ready", 0) (`transports` pickled by reference:
the class the Hive was wired with, integrations/transport.py); ("event", Event);
("forget", webhook_id); ("flush", n) → ("flushed", n); ("stop",). The process ends on
"stop" or when its stdin closes (the server ended, however it ended), after cancelling what
is in flight and writing the delivery log; deliveries not finished stay 'pending'.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import struct
import sys
from pathlib import Path
from typing import IO, Any

from ..model import utcnow
from ..store import Store
from .delivery import Deliveries, Event, WebhookSettings
from .transport import Transports

log = logging.getLogger(__name__)
HEADER = struct.Struct("!I")
START_TIMEOUT = 30.0  # seconds the process gets to import its modules and open the database
STOP_TIMEOUT = 15.0  # seconds it gets to cancel, write its log and exit
BACKLOG_MAX = 64 * 2**20  # bytes waiting for the process before events are dropped
PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # the process runs this very code


def frame(message: tuple[Any, ...]) -> bytes:
    """One message as written to the pipe."""
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(body)) + body


async def read_frame(reader: asyncio.StreamReader) -> tuple[Any, ...]:
    """The next message (IncompleteReadError at the end of the pipe)."""
    (size,) = HEADER.unpack(await reader.readexactly(HEADER.size))
    # the pipe joins the server and its own child process: nobody else can write to it
    message: tuple[Any, ...] = pickle.loads(await reader.readexactly(size))  # noqa: S301
    return message


class Courier:
    """The server's side of the courier process (one asyncio loop: the server's)."""

    def __init__(self, db_url: str, settings: WebhookSettings, transports: Transports) -> None:
        self.db_url = db_url
        self.settings = settings
        self.transports = transports
        self._process: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._starting: asyncio.Lock | None = None
        self._acks: dict[int, asyncio.Future[None]] = {}
        self._serial = 0
        self._closed = False

    @property
    def running(self) -> bool:
        """Whether the process is up (it may have ended; the next `ready` starts another)."""
        return self._process is not None and self._process.returncode is None

    async def ready(self) -> bool:
        """Start the process unless it runs, and wait until it can deliver; False if not."""
        if self._closed:
            return False
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if not self.running and not self._closed:
                await self._start()
        return self.running and not self._closed

    async def _start(self) -> None:
        if self._process is not None:
            log.warning("gpuhive: the webhook courier ended (%s); starting another",
                        self._process.returncode)  # fmt: skip
        paths = [PACKAGE_ROOT, *filter(None, [os.environ.get("PYTHONPATH")])]
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", f"from {__name__} import main; main()",  # not -m: runpy
            # would run a second copy of this module, already imported with its package
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(paths)},
        )  # fmt: skip
        self._process = process
        up = self._acks[0] = asyncio.get_running_loop().create_future()
        self._write(("start", self.db_url, self.settings, self.transports))
        self._reader = asyncio.create_task(self._replies(process))
        try:
            await asyncio.wait_for(up, START_TIMEOUT)
        except TimeoutError:
            log.error("gpuhive: the webhook courier did not start in %s s", START_TIMEOUT)
            process.kill()
            await process.wait()

    def send(self, event: Event) -> bool:
        """Hand an event over (after `ready`); False if it could not be."""
        if self._closed or not self.running:
            log.warning("gpuhive: webhook courier not running, event %s not sent", event.name)
            return False
        return self._write(("event", event))

    def forget(self, webhook_id: int) -> None:
        """An endpoint was deleted: the process drops its queue."""
        if self.running:
            self._write(("forget", webhook_id))

    async def flush(self) -> None:
        """Wait until the delivery log holds everything handed over so far."""
        if not self.running:
            return
        self._serial += 1
        serial = self._serial
        done = self._acks[serial] = asyncio.get_running_loop().create_future()
        if self._write(("flush", serial)):
            await done
        else:
            self._acks.pop(serial, None)

    async def stop(self) -> None:
        """Stop the process: it cancels what is in flight, writes its log and exits."""
        self._closed = True
        process = self._process
        if process is None:
            return
        if process.returncode is None:
            self._write(("stop",))
            assert process.stdin is not None
            process.stdin.close()
            try:
                await asyncio.wait_for(process.wait(), STOP_TIMEOUT)
            except TimeoutError:
                log.warning("gpuhive: the webhook courier did not stop in time; killed")
                process.kill()
                await process.wait()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)

    def _write(self, message: tuple[Any, ...]) -> bool:
        stdin = self._process.stdin if self._process is not None else None
        if stdin is None or stdin.is_closing():
            return False
        if stdin.transport.get_write_buffer_size() > BACKLOG_MAX:
            log.error("gpuhive: the webhook courier is not reading; %s dropped", message[0])
            return False
        stdin.write(frame(message))
        return True

    async def _replies(self, process: asyncio.subprocess.Process) -> None:
        """Acknowledged flushes; at the end of the pipe, release whoever still waits."""
        assert process.stdout is not None
        try:
            while True:
                _, serial = await read_frame(process.stdout)  # ready or flushed
                waiting = self._acks.pop(serial, None)
                if waiting is not None and not waiting.done():
                    waiting.set_result(None)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            for waiting in self._acks.values():
                if not waiting.done():
                    waiting.set_result(None)
            self._acks.clear()


# --- the process ------------------------------------------------------------------------


async def serve(reader: asyncio.StreamReader, replies: IO[bytes]) -> None:
    """Deliver what the server hands over until it says stop or goes away."""
    _, db_url, settings, transports = await read_frame(reader)
    store = Store(db_url)
    rows = store.integrations
    deliveries = Deliveries(rows, settings, transports, utcnow)
    acks: set[asyncio.Task[None]] = set()

    def reply(message: tuple[Any, ...]) -> None:
        replies.write(frame(message))
        replies.flush()

    async def ack(serial: int) -> None:
        await deliveries.flushed()
        reply(("flushed", serial))

    reply(("ready", 0))

    try:
        while True:
            try:
                message = await read_frame(reader)
            except asyncio.IncompleteReadError:
                break  # the server is gone
            kind = message[0]
            if kind == "event":
                deliveries.accept(message[1])
            elif kind == "forget":
                deliveries.drop(message[1])
            elif kind == "flush":
                task = asyncio.create_task(ack(message[1]))
                acks.add(task)
                task.add_done_callback(acks.discard)
            elif kind == "stop":
                break
    finally:
        await deliveries.shutdown()
        await asyncio.gather(*acks, return_exceptions=True)
        rows.close_log()
        store.close()


async def _main(replies: IO[bytes]) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    pipe = os.fdopen(0, "rb", buffering=0)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
    await serve(reader, replies)


def main() -> None:
    """The courier process: messages on stdin, replies on stdout, logs on stderr."""
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a stray print must not corrupt the replies
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="[gpuhive webhooks %(levelname)s] %(message)s"
    )
    logging.getLogger("tornado").setLevel(logging.WARNING)
    asyncio.run(_main(replies))


if __name__ == "__main__":
    main()
