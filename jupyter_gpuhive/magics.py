"""IPython magics: %gpureserve, %gpustatus (and %%gpujob, in jobmagics.py)."""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from datetime import time as clock_time
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from .client import HiveClient, HiveClientError
from .model import parse_duration
from .widgets.clock import local_zone

UTC = timezone.utc
LOCAL_NAMES = {"localhost", "127.0.0.1", "::1"}


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table that reads the same in a terminal and a notebook."""
    cells = [[str(c) for c in header], *[["" if v is None else str(v) for v in r] for r in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip()
             for row in cells]  # fmt: skip
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def parse_gpu_args(items: Sequence[str]) -> tuple[list[str], int | None]:
    """'gpu1:0,1 gpu2:0' → explicit GPUs; a single number → a count."""
    if len(items) == 1 and items[0].isdigit():
        return [], int(items[0])
    gpus: list[str] = []
    for item in items:
        host, sep, indices = item.partition(":")
        if not sep or not indices:
            raise UsageError(f"'{item}' is not a GPU list: write host:0,1 (or a count like 2).")
        for index in indices.split(","):
            if not index.strip().isdigit():
                raise UsageError(f"'{item}': GPU indices must be numbers.")
            gpus.append(f"{host}:{index.strip()}")
    return gpus, None


def parse_when(text: str, now: datetime) -> datetime:
    """ISO 8601 (local time if no offset), or 'HH:MM' today (tomorrow if already past).

    Local times take the offset their own day has in the kernel's zone, not today's (they
    differ across a DST change).
    """
    zone = local_zone()
    day = now.astimezone(zone).date()
    try:
        if len(text) <= 5 and ":" in text:
            hour, minute = (int(p) for p in text.split(":"))
            when = datetime.combine(day, clock_time(hour, minute), tzinfo=zone)
            if when.astimezone(UTC) <= now.astimezone(UTC):
                when = datetime.combine(day + timedelta(days=1), when.time(), tzinfo=zone)
            return when
        when = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"Cannot read the time {text!r}: use HH:MM or ISO 8601.") from None
    return when if when.tzinfo else when.replace(tzinfo=zone)


def cuda_already_initialised() -> str | None:
    """The framework that has already set up CUDA in this process, if any."""
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_initialized():
                return "PyTorch"
        except Exception:  # noqa: S110 - a broken torch cannot have initialised CUDA
            pass
    if "tensorflow" in sys.modules:
        return "TensorFlow"
    if "jax" in sys.modules:
        return "JAX"
    return None


def is_local(host: dict[str, Any]) -> bool:
    """Whether a host is the machine this kernel runs on."""
    names = {socket.gethostname(), socket.getfqdn(), *LOCAL_NAMES}
    if os.environ.get("GPUHIVE_LOCAL_HOST"):
        return str(host.get("name")) == os.environ["GPUHIVE_LOCAL_HOST"]
    return host.get("address") in names or host.get("name") in names


@magics_class
class GpuHiveMagics(Magics):
    """%gpureserve and %gpustatus."""

    _client: HiveClient | None = None

    @property
    def client(self) -> HiveClient:
        if self._client is None:
            try:
                self._client = HiveClient()
            except HiveClientError as error:
                raise UsageError(error.message) from None
        return self._client

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except HiveClientError as error:
            raise UsageError(error.message) from None

    # --- %gpureserve ---------------------------------------------------------------------

    @magic_arguments()
    @argument("gpus", nargs="*", help="GPUs as host:0,1 (several allowed), or a count such as 2")
    @argument("--host", help="With a count: take GPUs of this host")
    @argument("--start", help="Start (HH:MM or ISO 8601; default now)")
    @argument("--for", dest="length", help="Length, e.g. 2h or 90m")
    @argument("--until", help="End (HH:MM or ISO 8601)")
    @argument("--title", default="notebook reservation", help="Title shown in the calendar")
    @argument("--wait", action="store_true", help="Wait until the GPUs can be booked")
    @argument("--timeout", default="1h", help="How long --wait waits (default 1h)")
    @argument("--list", action="store_true", help="List my current and upcoming reservations")
    @argument("--cancel", type=int, metavar="ID", help="Cancel (or end now) reservation ID")
    @argument("--extend", type=int, metavar="ID", help="Extend reservation ID by --for")
    @argument("--no-pin", action="store_true", help="Do not set CUDA_VISIBLE_DEVICES here")
    @line_magic
    def gpureserve(self, line: str) -> Any:
        """Book GPUs from a notebook and pin this kernel to them."""
        args = parse_argstring(self.gpureserve, line)
        if args.list:
            return self._list()
        if args.cancel is not None:
            done = self._call(self.client.cancel, args.cancel)
            what = "cancelled" if done["status"] == "cancelled" else "ended early"
            print(f"Reservation {done['id']} {what}: its GPUs are free.")
            return done
        if args.extend is not None:
            if not args.length:
                raise UsageError("--extend needs --for, e.g. --extend 12 --for 1h.")
            found = self._call(self.client.request, "GET", f"reservations/{args.extend}")
            end = datetime.fromisoformat(found["end"]) + self._length(args.length)
            done = self._call(self.client.update_reservation, args.extend, end=end.isoformat())
            print(f"Reservation {done['id']} now ends {self._local(done['end'])}.")
            return done
        return self._reserve(args)

    @staticmethod
    def _length(text: str) -> timedelta:
        try:
            return parse_duration(text, "--for")
        except Exception as error:
            raise UsageError(str(error)) from None

    @staticmethod
    def _local(iso: str) -> str:
        return datetime.fromisoformat(iso).astimezone().strftime("%a %d %b %H:%M")

    def _span(self, args: Any) -> tuple[datetime, datetime]:
        now = datetime.now(UTC)
        start = parse_when(args.start, now) if args.start else now
        if args.length and args.until:
            raise UsageError("Give either --for or --until, not both.")
        if args.until:
            end = parse_when(args.until, start)
        else:
            end = start + self._length(args.length or "1h")
        return start, end

    def _choose(self, count: int, host: str | None, start: datetime, end: datetime) -> list[str]:
        """`count` GPUs free in [start, end), on one host if possible."""
        hosts = self._call(self.client.hosts)
        busy = {
            g
            for r in self._call(
                self.client.reservations, start=start.isoformat(), end=end.isoformat()
            )
            for g in r["gpus"]
        }
        candidates: list[list[str]] = []
        for h in hosts:
            if host and h["name"] != host:
                continue
            free = [g["id"] for g in h["gpus"] if g["id"] not in busy and not g.get("processes")]
            candidates.append(free)
        for free in sorted(candidates, key=len):
            if len(free) >= count:
                return free[:count]
        pooled = [g for free in candidates for g in free]
        if len(pooled) >= count:
            return pooled[:count]
        where = f" on {host}" if host else ""
        raise HiveClientError(f"Only {len(pooled)} GPUs{where} are free then; {count} wanted.")

    def _reserve(self, args: Any) -> Any:
        gpus, count = parse_gpu_args(args.gpus)
        if not gpus and count is None:
            raise UsageError("Name GPUs (gpu1:0,1) or a count (2); see %gpureserve --help.")
        start, end = self._span(args)
        deadline = time.monotonic() + self._length(args.timeout).total_seconds()
        attempt = 0
        while True:
            attempt += 1
            try:
                chosen = gpus or self._choose(count or 0, args.host, start, end)
                body = {"title": args.title, "gpus": chosen, "start": start.isoformat(),
                        "end": end.isoformat()}  # fmt: skip
                done = self.client.reserve(**body)
                break
            except HiveClientError as error:
                if not args.wait or error.status not in (0, 409) or time.monotonic() > deadline:
                    raise UsageError(error.message) from None
                print(f"\rWaiting for GPUs (try {attempt}): {error.message}"[:200], end="")
                time.sleep(2)
                length = end - start
                start = max(start, datetime.now(UTC))
                end = start + length
        if attempt > 1:
            print()
        print(
            f"Reserved {', '.join(done['gpus'])} from {self._local(done['start'])} to "
            f"{self._local(done['end'])} (reservation {done['id']})."
        )
        if not args.no_pin:
            self._pin(done)
        return done

    def _pin(self, reservation: dict[str, Any]) -> None:
        if datetime.fromisoformat(reservation["start"]) > datetime.now(UTC) + timedelta(minutes=5):
            print("It starts later: CUDA_VISIBLE_DEVICES is left alone for now.")
            return
        hosts = {h["name"]: h for h in self._call(self.client.hosts)}
        local = [
            (ref, uuid)
            for ref, uuid in zip(reservation["gpus"], reservation["gpu_uuids"], strict=True)
            if is_local(hosts.get(ref.split(":")[0], {}))
        ]
        if not local:
            print("None of these GPUs is on this machine: CUDA_VISIBLE_DEVICES is unchanged.")
            return
        framework = cuda_already_initialised()
        if framework:
            print(
                f"{framework} has already set up CUDA in this kernel, so changing "
                "CUDA_VISIBLE_DEVICES now would have no effect. Restart the kernel and run "
                "%gpureserve before importing it (or use --no-pin)."
            )
            return
        os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(uuid for _, uuid in local)
        print(f"CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']} in this kernel.")

    def _list(self) -> list[dict[str, Any]]:
        me = self._call(self.client.me)["name"]
        mine = self._call(self.client.reservations, user=me)
        if not mine:
            print("You have no current or upcoming reservations.")
            return []
        print(
            table(
                ("ID", "GPUS", "START", "END", "STATUS", "TITLE"),
                [(r["id"], ",".join(r["gpus"]), self._local(r["start"]), self._local(r["end"]),
                  r["status"] + (" (flagged)" if r["flagged"] else ""), r["title"])
                 for r in mine],
            )
        )  # fmt: skip
        return mine

    # --- %gpustatus ------------------------------------------------------------------

    @magic_arguments()
    @argument("--host", help="Only this host")
    @line_magic
    def gpustatus(self, line: str) -> None:
        """Who uses which GPU now, and who holds it now and next."""
        args = parse_argstring(self.gpustatus, line)
        hosts = self._call(self.client.hosts)
        rows = []
        for h in hosts:
            if args.host and h["name"] != args.host:
                continue
            if h.get("state") == "down":
                rows.append((h["name"], "down", "", "", "", "", h.get("error") or ""))
                continue
            for g in h["gpus"]:
                util = "" if g.get("util") is None else f"{g['util']}%"
                mem = ""
                if g.get("mem_used_mib") is not None:
                    mem = f"{g['mem_used_mib']}/{g.get('mem_total_mib') or '?'} MiB"
                users = sorted({p["user"] or "?" for p in g.get("processes", [])})
                now = g.get("reservation")
                nxt = g.get("next_reservation")
                rows.append((
                    g["id"], util, mem, ",".join(users),
                    f"{now['owner']} until {self._local(now['end'])}" if now else "free",
                    f"{nxt['owner']} {self._local(nxt['start'])}" if nxt else "",
                    h.get("gpu_error") or "",
                ))  # fmt: skip
        print(table(("GPU", "UTIL", "MEMORY", "PROCESSES", "NOW", "NEXT", "NOTE"), rows))


def load_ipython_extension(ipython: Any) -> None:
    """`%load_ext jupyter_gpuhive` registers the magics."""
    from .jobmagics import GpuJobMagics

    ipython.register_magics(GpuHiveMagics, GpuJobMagics)
