"""IPython magics: %gpureserve and %gpustatus (%%gpujob: jobmagics.py, %gpufeed: feedmagics.py)."""

from __future__ import annotations

import os
import socket
import sys
import textwrap
import time
from datetime import datetime, timedelta, timezone
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from ..model import describe_duration, parse_duration
from ..model.health import UNBOOKABLE
from .args import parse_gpu_args, parse_when
from .client import HiveClient, HiveClientError
from .earliest import earliest, expected_wait
from .kernelswitch import HELP as KERNEL_HELP
from .kernelswitch import switch_to
from .lending import lending_body, reclaimed_text
from .magicviews import (
    TENTATIVE_NOTE,
    GpuStatus,
    Notice,
    ReservationList,
    ReservationResult,
    local,
)
from .magicviews import text_table as table
from .shares import fullest, share_body, share_caps, share_lines

UTC = timezone.utc
LOCAL_NAMES = {"localhost", "127.0.0.1", "::1"}
CHANNEL_WORDS = {"lab": "a JupyterLab notice", "email": "e-mail", "webhook": "your webhook"}
__all__ = ["GpuHiveMagics", "parse_gpu_args", "parse_when", "table"]


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


def unquote(text: str) -> str:
    """`text` without one pair of surrounding quotes ('"ResNet sweep"' → 'ResNet sweep')."""
    quoted = len(text) >= 2 and text[0] == text[-1] and text[0] in "'\""
    return text[1:-1] if quoted else text


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

    @staticmethod
    def _help(magic: Any) -> None:
        """Print a magic's usage and options (for -h / --help)."""
        text = magic.parser.format_help().removeprefix("::\n\n")
        print("usage: " + textwrap.dedent(text).strip())

    def _give(self, result: Any, name: str | None) -> Any:
        """The result as the cell's value; with -o NAME, shown now and bound to NAME."""
        if not name:
            return result
        if not name.isidentifier():
            raise UsageError(f"-o needs a Python name, not {name!r}.")
        from IPython.display import display

        assert self.shell is not None
        self.shell.user_ns[name] = result
        display(result)
        return None

    # --- %gpureserve ---------------------------------------------------------------------

    @magic_arguments()
    @argument("gpus", nargs="*", help="GPUs as host:0,1 (several allowed), or a count such as 2")
    @argument("--host", help="With a count: take GPUs of this host")
    @argument("--vendor", help="With a count or --earliest: only this vendor's GPUs (nvidia, amd)")
    @argument("--model", help="With a count or --earliest: only GPUs whose name holds this "
              "(A100, MI300X)")  # fmt: skip
    @argument("--start", help="Start (HH:MM or ISO 8601; default now)")
    @argument("--for", dest="length", help="Length, e.g. 2h or 90m")
    @argument("--until", help="End (HH:MM or ISO 8601)")
    @argument(
        "--share",
        help="A share of one shareable GPU, e.g. 0.25 (a count of 1 picks "
        "the fullest GPU it fits on)",
    )
    @argument("--memory", help="A share of one shareable GPU by its memory, e.g. 20G")
    @argument("--title", default="notebook reservation", help="Title shown in the calendar")
    @argument("--wait", action="store_true", help="Wait until the GPUs can be booked")
    @argument("--timeout", default="1h", help="How long --wait waits (default 1h)")
    @argument("--list", action="store_true", help="List my current and upcoming reservations")
    @argument("--cancel", type=int, metavar="ID", help="Cancel (or end now) reservation ID")
    @argument("--extend", type=int, metavar="ID", help="Extend reservation ID by --for")
    @argument(
        "--reclaim",
        type=int,
        metavar="ID",
        help="I need my GPUs now: stop the preemptible jobs running on reservation ID's GPUs "
        "(they get their signal and grace time to save a checkpoint)",
    )
    @argument(
        "--no-lend",
        action="store_true",
        help="Never lend these GPUs to preemptible jobs while I do not use them",
    )
    @argument(
        "--reclaim-before-start",
        action="store_true",
        help="Lend them only until shortly before the reservation starts (a site-set time), "
        "so that they are free when it begins",
    )
    @argument(
        "--no-pin",
        action="store_true",
        help="Do not pin this kernel to the GPUs (their vendor's variable)",
    )
    @argument("--kernel", action="store_true", help=KERNEL_HELP)
    @argument("--notify", action="store_true", help="If not free now, tell me when they are")
    @argument(
        "--before",
        help="With --notify or --earliest: any slot that ends by then (HH:MM or ISO 8601); "
        "without it, --notify watches GPUs free from now on for 24 hours",
    )
    @argument("--earliest", action="store_true", help="Show the earliest slots that fit")
    @argument("--book", action="store_true", help="With --earliest: book the best slot")
    @argument("--nvlink", action="store_true", help="With --earliest: all pairs NVLink-connected")
    @argument("--same-host", action="store_true", help="With --earliest: all on one host")
    @argument("--numa", action="store_true", help="With --earliest: all on one NUMA node")
    @argument("--slices", action="store_true", help="With --earliest: count MIG slices")
    @argument("--profile", help="With --earliest: MIG slices of this profile, e.g. 1g.10gb")
    @argument("-o", "--output", metavar="NAME", help="Also bind the result to NAME")
    @argument("-h", "--help", action="store_true", help="Show this help")
    @line_magic
    def gpureserve(self, line: str) -> Any:
        """Book GPUs from a notebook and pin this kernel to them."""
        args = parse_argstring(self.gpureserve, line)
        args.title = unquote(args.title)  # IPython keeps the quotes of --title "two words"
        if args.help:
            return self._help(self.gpureserve)
        if args.list:
            return self._give(self._list(), args.output)
        if args.cancel is not None:
            done = self._call(self.client.cancel, args.cancel)
            what = "cancelled" if done["status"] == "cancelled" else "ended early"
            headline = f"Reservation {done['id']} {what}: its GPUs are free."
            return self._give(ReservationResult(done, headline), args.output)
        if args.reclaim is not None:
            path = f"reservations/{args.reclaim}/reclaim"
            answer = self._call(self.client.request, "POST", path)
            return self._give(Notice(answer, reclaimed_text(args.reclaim, answer)), args.output)
        if args.extend is not None:
            if not args.length:
                raise UsageError("--extend needs --for, e.g. --extend 12 --for 1h.")
            found = self._call(self.client.request, "GET", f"reservations/{args.extend}")
            end = datetime.fromisoformat(found["end"]) + self._length(args.length)
            done = self._call(self.client.update_reservation, args.extend, end=end.isoformat())
            headline = f"Reservation {done['id']} now ends {self._local(done['end'])}."
            return self._give(ReservationResult(done, headline), args.output)
        if args.notify:
            return self._give(reserve_or_notify(self, args), args.output)
        if args.earliest or args.book:
            return self._give(earliest(self, args), args.output)
        return self._give(self._reserve(args), args.output)

    @staticmethod
    def _length(text: str) -> timedelta:
        try:
            return parse_duration(text, "--for")
        except Exception as error:
            raise UsageError(str(error)) from None

    @staticmethod
    def _local(iso: str) -> str:
        return local(iso)

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

    def _choose(self, count: int, args: Any, start: datetime, end: datetime) -> list[str]:
        """`count` GPUs free in [start, end) (of --host, --vendor, --model), on one host if
        possible."""
        host, vendor, model = args.host, (args.vendor or "").lower(), (args.model or "").lower()
        hosts = self._call(self.client.hosts)
        here = sorted({str(h.get("vendor")).upper() for h in hosts if h.get("vendor")})
        if vendor and here and vendor.upper() not in here:
            raise HiveClientError(
                f"No host of this site has {vendor.upper()} GPUs (its GPUs: {', '.join(here)})."
            )
        busy = {
            g
            for r in self._call(
                self.client.reservations, start=start.isoformat(), end=end.isoformat()
            )
            for g in r["gpus"]
        }
        candidates: list[list[str]] = []
        for h in hosts:
            if (host and h["name"] != host) or (vendor and h.get("vendor") != vendor):
                continue
            free = [
                g["id"]
                for g in h["gpus"]
                if model in (g.get("model") or "").lower()
                and g["id"] not in busy
                and not g.get("processes")
                and g.get("state") not in UNBOOKABLE
            ]  # failed or drained: never chosen
            candidates.append(free)
        for free in sorted(candidates, key=len):
            if len(free) >= count:
                return free[:count]
        pooled = [g for free in candidates for g in free]
        if len(pooled) >= count:
            return pooled[:count]
        if not any(h["gpus"] for h in hosts):  # no GPU at all: the server says what to do next
            body = {"count": count, "duration": (end - start).total_seconds()}
            self._call(self.client.request, "POST", "reservations/search", body=body)
        where = f" on {host}" if host else ""
        kind = " ".join(filter(None, (vendor.upper(), args.model))) + " GPUs" if vendor or model \
            else "GPUs"  # fmt: skip
        raise HiveClientError(f"Only {len(pooled)} {kind}{where} are free then; {count} wanted.")

    def _reserve(self, args: Any) -> Any:
        gpus, count = parse_gpu_args(args.gpus)
        if not gpus and count is None:
            raise UsageError("Name GPUs (gpu1:0,1) or a count (2); see %gpureserve --help.")
        start, end = self._span(args)
        deadline = time.monotonic() + self._length(args.timeout).total_seconds()
        lending = {**lending_body(args), **share_body(args)}
        attempt = 0
        while True:
            attempt += 1
            try:
                if gpus:
                    chosen = gpus
                elif "share" in lending or "memory" in lending:
                    chosen = fullest(self.client, count or 0, lending, start, end)
                else:
                    chosen = self._choose(count or 0, args, start, end)
                body = {"title": args.title, "gpus": chosen, "start": start.isoformat(),
                        "end": end.isoformat(), **lending}  # fmt: skip
                done = self.client.reserve(**body)
                break
            except HiveClientError as error:
                if not args.wait or error.status not in (0, 409) or time.monotonic() > deadline:
                    raise UsageError(error.message) from None
                if attempt == 1 and (expected := expected_wait(self, args)):
                    print(expected)
                print(f"\rWaiting for GPUs (try {attempt}): {error.message}"[:200], end="")
                time.sleep(2)
                length = end - start
                start = max(start, datetime.now(UTC))
                end = start + length
        if attempt > 1:
            print()
        headline = (
            f"Reserved {', '.join(done['gpus'])} from {self._local(done['start'])} to "
            f"{self._local(done['end'])} (reservation {done['id']})."
        )
        if done.get("tentative"):  # nothing may run on it yet: no pin, no kernel switch
            return ReservationResult(done, headline, [TENTATIVE_NOTE])
        if args.kernel:  # the notebook moves to a kernel on the GPUs' host: no pin here
            return ReservationResult(done, headline, [switch_to(done)])
        notes = [] if args.no_pin else [self._pin(done)]
        return ReservationResult(done, headline, notes)

    def _pin(self, reservation: dict[str, Any]) -> str:
        """Pin this kernel to the reservation's local GPUs (the host's vendor's variable, as the
        server names it); say what was done."""
        if datetime.fromisoformat(reservation["start"]) > datetime.now(UTC) + timedelta(minutes=5):
            return "It starts later: this kernel's GPUs are left alone for now."
        hosts = {h["name"]: h for h in self._call(self.client.hosts)}
        local = [
            (hosts[ref.split(":")[0]], uuid)
            for ref, uuid in zip(reservation["gpus"], reservation["gpu_uuids"], strict=True)
            if is_local(hosts.get(ref.split(":")[0], {}))
        ]
        if not local:
            return "None of these GPUs is on this machine: this kernel's GPUs are unchanged."
        pinning = local[0][0].get("pinning") or {}
        variable = pinning.get("variable")
        if not variable:
            return "The server does not say how this host's GPUs are pinned: nothing was set."
        framework = cuda_already_initialised()
        if framework:
            return (
                f"{framework} has already set up CUDA in this kernel, so changing "
                f"{variable} now would have no effect. Restart the kernel and run "
                "%gpureserve before importing it (or use --no-pin)."
            )
        os.environ.update(pinning.get("env") or {})
        os.environ[variable] = ",".join(uuid for _, uuid in local)
        positions = ",".join(str(i) for i in range(len(local)))
        for counted in pinning.get("counted") or ():  # e.g. ROCm's HIP_VISIBLE_DEVICES
            os.environ[counted] = positions
        capped = share_caps(reservation, local[0][1], pinning)
        return f"{variable}={os.environ[variable]} in this kernel{capped}."

    def _list(self) -> ReservationList:
        me = self._call(self.client.me)["name"]
        return ReservationList(self._call(self.client.reservations, user=me))

    # --- %gpustatus ------------------------------------------------------------------

    @magic_arguments()
    @argument("--host", help="Only this host")
    @argument("-h", "--help", action="store_true", help="Show this help")
    @line_magic
    def gpustatus(self, line: str) -> GpuStatus | None:
        """Who uses which GPU now, and who holds it now and next (my GPUs first); then my
        queued jobs that wait: their place in the queue, projected start and why."""
        args = parse_argstring(self.gpustatus, line)
        if args.help:
            return self._help(self.gpustatus)
        hosts = self._call(self.client.hosts)
        if args.host:
            hosts = [h for h in hosts if h["name"] == args.host]
            if not hosts:
                raise UsageError(f"There is no host {args.host!r}; %gpustatus lists them all.")
        me = self._call(self.client.me)["name"]
        now = datetime.now(UTC)
        active = self._call(self.client.reservations, start=now.isoformat(),
                            end=(now + timedelta(seconds=1)).isoformat())  # fmt: skip
        return GpuStatus(hosts, me, self._queued(), share_lines(hosts, active, me))

    def _queued(self) -> list[dict[str, Any]]:
        """The queued jobs that wait (GET queue); none from a server without a queue."""
        try:
            return self.client.request("GET", "queue")["jobs"]  # type: ignore[no-any-return]
        except HiveClientError as error:
            if error.status == 404:
                return []
            raise UsageError(error.message) from None


def reserve_or_notify(magics: GpuHiveMagics, args: Any) -> Any:
    """Book now if the GPUs are free; otherwise subscribe to be told when they are."""
    try:
        return magics._reserve(args)
    except UsageError as error:
        reason = str(error)
    gpus, count = parse_gpu_args(args.gpus)
    hosts = sorted({g.split(":")[0] for g in gpus})
    if gpus and len(hosts) != 1:
        raise UsageError(f"{reason} (--notify needs GPUs of one host, or a count.)")
    host = args.host or (hosts[0] if hosts else None)
    start, end = magics._span(args)
    length = end - start
    body: dict[str, Any] = {"gpus": count or len(gpus), "duration": length.total_seconds()}
    if host:
        body["host"] = host
    if args.before:
        body["deadline"] = parse_when(args.before, datetime.now(UTC)).isoformat()
    try:
        made = magics.client.request("POST", "subscriptions", body)
    except HiveClientError as error:
        raise UsageError(f"{reason} Nor can gpuhive watch for them: {error.message}") from None
    where = f"on {host}" if host else "on one host"
    wanted = "1 GPU" if body["gpus"] == 1 else f"{body['gpus']} GPUs"
    window = "ending by --before" if args.before else "from now on; it watches for 24 hours"
    message = (
        f"Not booked now: {reason}\n"
        f"gpuhive will tell you when {wanted} {where} {'is' if body['gpus'] == 1 else 'are'} "
        f"free for {describe_duration(length)} ({window}; subscription {made['id']}; by "
        f"{', '.join(CHANNEL_WORDS.get(c, c) for c in made['channels'])}), with a line that "
        "books them."
    )
    return Notice(made, message)
