"""Kill handler: SIGINT then SIGKILL, as the offender or via sudo."""

from __future__ import annotations

import asyncio
import logging
import shlex
from collections.abc import Hashable, Iterable, Mapping
from typing import Any

from ...hosts.pool import HostUnavailable
from ..violations import FOREIGN, UNRESERVED
from .base import HandlerConfigError, HandlerFailed, Incident, Options, ViolationHandler

log = logging.getLogger(__name__)


SIGNALS = ("INT", "TERM", "HUP", "QUIT", "USR1", "USR2", "KILL")

# $1 user, $2 signal, $3 sudo prefix (may be empty), then the pids. Checks the owner of each
# pid first, so a pid reused by someone else is never touched.
_KILL = r"""
user=$1; sig=$2; sudo=$3; shift 3
for p in "$@"; do
  owner=$(ps -o user:64= -p "$p" 2>/dev/null | tr -d ' ')
  if [ -z "$owner" ]; then echo "gone $p"
  elif [ "$owner" != "$user" ]; then echo "other $p"
  elif $sudo kill -s "$sig" "$p" 2>/dev/null; then echo "sent $p"
  else echo "refused $p"; fi
done
"""


class KillHandler(ViolationHandler):
    """Sends a signal to the offending processes, as the offender (SSH) or via sudo."""

    kinds = frozenset({FOREIGN, UNRESERVED})
    needs_target = True
    repeat = False
    default_interval = 0.0
    step_options = frozenset({"message", "signal", "grace"})

    def configure(self, opts: Options) -> None:
        self.mode = opts.choice("mode", "user", ("user", "sudo"))
        self.sudo = opts.text("sudo", "sudo -n") or "sudo -n"
        self.signal = self._signal(opts.get("signal", "INT"))
        self.grace = opts.number("grace", 0.0)

    def _signal(self, value: Any) -> str:
        name = value.upper().removeprefix("SIG") if isinstance(value, str) else value
        if name not in SIGNALS:
            raise HandlerConfigError(
                f"violation handler '{self.name}': signal must be one of {', '.join(SIGNALS)}, "
                f"not {value!r}."
            )
        return str(name)

    def check_step(self, step: Mapping[str, Any]) -> None:
        super().check_step(step)
        if "signal" in step:
            self._signal(step["signal"])
        if "grace" in step:
            Options(self.name, {"grace": step["grace"]}).number("grace", 0.0)

    def rate_key(self, incident: Incident) -> Hashable:
        return incident.violation_id

    def deadline(self, step: Mapping[str, Any]) -> float:
        return 2 * self.timeout + float(step.get("grace", self.grace))

    async def _send(self, incident: Incident, signal: str, pids: Iterable[int]) -> dict[str, list]:
        user = incident.offender or ""
        as_user = user if self.mode == "user" else None
        prefix = "" if self.mode == "user" else self.sudo
        args = [user, signal, prefix, *(str(p) for p in pids)]
        command = "sh -c " + shlex.quote(_KILL) + " sh " + shlex.join(args)
        try:
            result = await self._pool().run(
                incident.host, command, user=as_user, timeout=self.timeout
            )
        except HostUnavailable as error:
            who = f"as {user}" if as_user else "with sudo"
            raise HandlerFailed(f"cannot reach {incident.host} {who}: {error.reason}") from None
        found: dict[str, list[int]] = {"sent": [], "gone": [], "other": [], "refused": []}
        words = result.stdout.split()
        for state, pid in zip(words[::2], words[1::2], strict=False):
            if state in found and pid.isdigit():
                found[state].append(int(pid))
        return found

    async def handle(self, incident: Incident, step: Mapping[str, Any]) -> str:
        signal = self._signal(step.get("signal", self.signal))
        grace = float(step.get("grace", self.grace))
        found = await self._send(incident, signal, incident.pids)
        notes = []
        if found["gone"]:
            notes.append(f"already gone: {_pids(found['gone'])}")
        if found["other"]:
            notes.append(f"now owned by someone else, left alone: {_pids(found['other'])}")
        if found["refused"]:
            how = "sudo refused" if self.mode == "sudo" else "kill refused"
            notes.append(f"{how}: {_pids(found['refused'])}")
        if not found["sent"]:
            raise HandlerFailed(f"SIG{signal} not sent: {'; '.join(notes) or 'no process'}")
        done = f"SIG{signal} sent to {_pids(found['sent'])}"
        if grace > 0 and signal != "KILL":
            await asyncio.sleep(grace)
            after = await self._send(incident, "KILL", found["sent"])
            if after["sent"]:
                done += f"; SIGKILL after {grace:g} s to {_pids(after['sent'])}"
            else:
                done += f"; all ended within {grace:g} s"
        return done + (f" ({'; '.join(notes)})" if notes else "")


def _pids(pids: Iterable[int]) -> str:
    return ", ".join(str(p) for p in pids)
