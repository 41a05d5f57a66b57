"""Kill handler: SIGINT then SIGKILL, as the offender or via sudo.

A process in a rootful container is not signalled: its container is stopped and removed with
the host's engine (the engine would restart a container whose process alone died), run as
gpuhive's account on the host (mode user: it must be allowed to use the engine) or via sudo.
Which container a pid runs in is read again from its cgroup when the step runs."""

from __future__ import annotations

import asyncio
import logging
import shlex
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from ...hosts.containers import (
    CGROUPS_OF,
    Container,
    cgroups_after_ps,
    container_of,
    engine_words,
    remove_command,
)
from ...hosts.pool import HostUnavailable
from ..violations import FOREIGN, OVER_SHARE, UNRESERVED
from .base import HandlerConfigError, HandlerFailed, Incident, Options, ViolationHandler

log = logging.getLogger(__name__)


SIGNALS = ("INT", "TERM", "HUP", "QUIT", "USR1", "USR2", "KILL")

# $1 user, $2 signal, $3 sudo prefix (may be empty), then the pids. Checks the owner of each
# pid first, so a pid reused by someone else is never touched. A uid with no name counts as the
# user's when it lies in the user's /etc/subuid range and in nobody else's (a rootless
# container's other uids: monitor/containers.py charges them to that user).
_KILL = r"""
user=$1; sig=$2; sudo=$3; shift 3
sub() {
  case $1 in ''|*[!0-9]*) return 1 ;; esac
  awk -F: -v u="$user" -v id="$1" '$3 ~ /^[0-9]+$/ && id >= $2 && id < $2 + $3 {
    if ($1 == u) f = 1; else o = 1 } END { exit !(f && !o) }' /etc/subuid 2>/dev/null
}
for p in "$@"; do
  owner=$(ps -o user:64= -p "$p" 2>/dev/null | tr -d ' ')
  if [ -z "$owner" ]; then echo "gone $p"
  elif [ "$owner" != "$user" ] && ! sub "$owner"; then echo "other $p"
  elif $sudo kill -s "$sig" "$p" 2>/dev/null; then echo "sent $p"
  else echo "refused $p"; fi
done
"""


class KillHandler(ViolationHandler):
    """Sends a signal to the offending processes, as the offender (SSH) or via sudo."""

    kinds = frozenset({FOREIGN, UNRESERVED, OVER_SHARE})
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

    async def _containers(self, incident: Incident) -> dict[int, Container]:
        """The offending pids that run in rootful containers now, by their cgroups."""
        command = "sh -c " + shlex.quote(CGROUPS_OF) + " sh " + shlex.join(map(str, incident.pids))
        try:
            result = await self._pool().run(incident.host, command, timeout=self.timeout)
        except HostUnavailable as error:
            raise HandlerFailed(f"cannot reach {incident.host}: {error.reason}") from None
        found = {pid: container_of(text) for pid, text in cgroups_after_ps(result.stdout).items()}
        return {pid: c for pid, c in found.items() if c is not None and c.rootless_uid is None}

    async def _remove(
        self, incident: Incident, containers: Iterable[Container], grace: float
    ) -> str:
        """Stop and remove the containers with the host's engine; what was done."""
        decl = self._pool().hosts.get(incident.host)
        by_engine: dict[str, set[str]] = {}
        for c in containers:
            by_engine.setdefault(c.engine, set()).add(c.id)
        removed = []
        for engine, ids in sorted(by_engine.items()):
            command = remove_command(engine_words(decl, engine), ids, grace)
            if self.mode == "sudo":
                command = f"{self.sudo} sh -c {shlex.quote(command)}"
            try:
                result = await self._pool().run(
                    incident.host, command, timeout=self.timeout + grace
                )
            except HostUnavailable as error:
                raise HandlerFailed(f"cannot reach {incident.host}: {error.reason}") from None
            gone = [cid[:12] for cid in sorted(ids) if cid in result.stdout]
            if not gone:
                said = (result.stderr or result.stdout).strip()[:300]
                short = ", ".join(i[:12] for i in sorted(ids))
                raise HandlerFailed(f"{engine} did not remove container(s) {short}: {said}")
            removed += gone
        return f"container(s) {', '.join(removed)} stopped and removed"

    async def handle(self, incident: Incident, step: Mapping[str, Any]) -> str:
        confined = await self._confined(incident)
        if confined:  # an engine's job confines them (Slurm's cgroups): reported, not signalled
            left = "; ".join(f"pid {p} runs inside {job}" for p, job in sorted(confined.items()))
            note = f"left alone, reported only ({left}, which confines it to its own GPUs)"
            rest = [p for p in incident.pids if p not in confined]
            if not rest:
                return note
            incident = replace(incident, pids=tuple(rest))
            return f"{note}; " + await self._act_on(incident, step)
        return await self._act_on(incident, step)

    async def _confined(self, incident: Incident) -> dict[int, str]:
        """The offending pids an engine's job holds now, asked again at this moment."""
        pool = self._pool()
        decl = pool.hosts.get(incident.host)
        if decl is None:
            return {}
        try:
            return await pool.backend_of(decl).confined(decl, list(incident.pids))
        except HostUnavailable as error:
            raise HandlerFailed(
                f"cannot tell which processes on {incident.host} run inside its engine's jobs "
                f"({error.reason}): nothing signalled"
            ) from None

    async def _act_on(self, incident: Incident, step: Mapping[str, Any]) -> str:
        signal = self._signal(step.get("signal", self.signal))
        grace = float(step.get("grace", self.grace))
        boxed = await self._containers(incident)
        if boxed:
            done = await self._remove(incident, boxed.values(), grace)
            rest = [p for p in incident.pids if p not in boxed]
            if not rest:
                return done
            return f"{done}; " + await self._signal_processes(incident, signal, grace, rest)
        return await self._signal_processes(incident, signal, grace, incident.pids)

    async def _signal_processes(
        self, incident: Incident, signal: str, grace: float, pids: Iterable[int]
    ) -> str:
        found = await self._send(incident, signal, pids)
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
