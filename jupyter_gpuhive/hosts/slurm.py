"""What Slurm says, parsed: nodes with their GPUs (gres) and states, reservations, versions.

Pure functions of `scontrol ... -o` text (one record per line, `Key=value` fields). A value may
hold spaces (`OS=Linux 6.1 #1 SMP`), so a field runs to the next ` Key=`; a node's `Reason`
(written by Slurm's administrators, ended by Slurm's own `[user@time]`) runs to that mark, so
an `=` inside it starts no field. Every text that reaches people is framed here (`printable`):
no control character or line break of it is ever shown as structure.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timezone

from ..model.gpus import FAILED, Health

_FIELD = re.compile(r"(?:^|(?<= ))([A-Z][A-Za-z_]*)=")
_REASON = re.compile(r"(?:^| )Reason=(.*?) \[([^\]@ ]+)@([0-9T:-]+)\](?= [A-Z]|$)")
_USED = re.compile(r"(?:^|,)gpu(?::[^,(]*)*\(IDX:([0-9,\-]+)\)")  # GresUsed's GPUs (not N/A)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_RANGE = re.compile(r"(\d+)(?:-(\d+))?\Z")
SHOWN = 300  # characters of a Slurm text shown to people at most
DRAINER = "Slurm"  # who gpuhive says drained a GPU whose node Slurm drained
# Node states (base or flag) in which a node takes no new work: its GPUs are not bookable.
# A drain is the administrators' (the GPUs are drained); every other state fails them.
DRAINS = {"DRAIN": "is drained", "DRAINED": "is drained", "DRAINING": "is draining"}
CLOSED = {
    **DRAINS,
    "DOWN": "is down",
    "FAIL": "has failed",
    "FAILING": "is failing",
    "NOT_RESPONDING": "does not respond",
    "NO_RESPOND": "does not respond",
    "FUTURE": "is not in service yet",
    "UNKNOWN": "has a state Slurm does not know yet",
    "POWERED_DOWN": "is powered down",
    "POWER_DOWN": "is powering down",
    "REBOOT_ISSUED": "is rebooting",
    "INVALID_REG": "registered with a configuration Slurm refused",
}


class SlurmParseError(ValueError):
    """Slurm's answer could not be read; the message names the line."""


def printable(text: str) -> str:
    """`text` as shown to people: control characters become spaces, at most SHOWN characters."""
    flat = _CONTROL.sub(" ", text).strip()
    return flat if len(flat) <= SHOWN else flat[: SHOWN - 1] + "…"


def fields(line: str) -> dict[str, str]:
    """One `-o` record as {Key: value}; a value runs to the next ` Key=` (Reason: see above)."""
    reason = _REASON.search(line)
    found: dict[str, str] = {}
    if reason is not None:
        found["Reason"] = reason.group(1)
        found["ReasonBy"] = reason.group(2)
        line = line[: reason.start()] + line[reason.end() :]
    marks = list(_FIELD.finditer(line))
    for k, mark in enumerate(marks):
        end = marks[k + 1].start() if k + 1 < len(marks) else len(line)
        found.setdefault(mark.group(1), line[mark.end() : end].strip())
    return found


def _split(text: str, brackets: str) -> list[str]:
    """`text` split at the commas outside `brackets` ("[]": `n[1,3],m2` is two parts)."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {brackets[0]: 1, brackets[1]: -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return [*parts, text[start:]]


def expand_hostlist(text: str) -> list[str]:
    """Slurm's compressed host list (`n[1-3,5],gpu07`) as names, in order."""
    names: list[str] = []
    for part in (p.strip() for p in _split(text, "[]")):
        if not part or part == "(null)":
            continue
        match = re.fullmatch(r"([^\[\]]*)\[([^\[\]]+)\]([^\[\]]*)", part)
        if match is None:
            if "[" in part or "]" in part:
                raise SlurmParseError(f"cannot read the host list {text!r}")
            names.append(part)
            continue
        head, ranges, tail = match.groups()
        for item in ranges.split(","):
            found = _RANGE.match(item.strip())
            if found is None:
                raise SlurmParseError(f"cannot read the host list {text!r}")
            low, high = found.group(1), found.group(2) or found.group(1)
            width = len(low) if low.startswith("0") else 0
            names += [f"{head}{n:0{width}d}{tail}" for n in range(int(low), int(high) + 1)]
    return names


@dataclass(frozen=True)
class GpuKind:
    """GPUs of one type on a node, as its gres says (`gpu:a100:4`; type None: untyped)."""

    type: str | None
    count: int


def parse_gres(text: str) -> tuple[GpuKind, ...]:
    """The GPUs of a node's `Gres=` (`gpu:a100:4(S:0-1),shard:8,gpu:2`); other gres ignored."""
    found = []
    for item in _split(text, "()"):
        bare = item.split("(", 1)[0].strip()
        parts = bare.split(":")
        if parts[0] != "gpu" or len(parts) < 2:
            continue
        count = parts[-1]
        if not count.isdigit():
            raise SlurmParseError(f"cannot read the GPU count of gres {item!r}")
        kind = parts[1] if len(parts) >= 3 else None
        found.append(GpuKind(printable(kind) if kind else None, int(count)))
    return tuple(found)


@dataclass(frozen=True)
class SlurmNode:
    """One node as Slurm lists it."""

    name: str
    states: tuple[str, ...]  # the base state, then its flags: ("IDLE", "DRAIN")
    gpus: tuple[GpuKind, ...]
    reason: str | None = None  # Slurm's administrators' words, framed
    reason_by: str | None = None
    gpus_used: tuple[int, ...] = ()  # the IDX of the GPUs Slurm's jobs hold (`GresUsed`)

    @property
    def gpu_count(self) -> int:
        return sum(kind.count for kind in self.gpus)

    def _said(self, states: Collection[str]) -> str | None:
        """'is down: why (by root)' for those of `states` the node is in, or None."""
        said = [CLOSED[s] for s in self.states if s in states]
        if not said:
            return None
        why = f": {self.reason}" if self.reason else ""
        by = f" (by {self.reason_by})" if self.reason_by else ""
        return f"{' and '.join(dict.fromkeys(said))}{why}{by}"

    def closed(self) -> str | None:
        """Why the node takes no new work ('is drained: fan broken (by root)'), or None."""
        return self._said(CLOSED)

    def health(self) -> Health | None:
        """The health gpuhive gives the node's GPUs: failed while Slurm keeps the node down,
        failing, not responding... (a drain alone: see `drain`)."""
        words = self._said(CLOSED.keys() - DRAINS.keys())
        return Health(FAILED, (f"Slurm: node {self.name} {words}",)) if words else None

    def drain(self) -> str | None:
        """Why the node's GPUs are drained ('swapping fans (node n2, by root)'), or None."""
        if not any(s in DRAINS for s in self.states):
            return None
        by = f", by {self.reason_by}" if self.reason_by else ""
        return f"{self.reason or 'no reason given'} (node {self.name}{by})"


def node_states(text: str) -> tuple[str, ...]:
    """`IDLE+DRAIN`, `DOWN*+DRAIN` or `MIXED#` as ("IDLE", "DRAIN"), ("DOWN", "NOT_RESPONDING",
    "DRAIN") ... (a trailing `*` means the node does not respond)."""
    states: list[str] = []
    for part in text.split("+"):
        bare = part.rstrip("*~#!%$@^-")
        if bare:
            states.append(bare.upper())
        if part.endswith("*"):
            states.append("NOT_RESPONDING")
    return tuple(states)


def parse_nodes(text: str) -> list[SlurmNode]:
    """Every node of `scontrol show node -o` (or `-o NAME`)."""
    nodes = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        found = fields(line)
        name = found.get("NodeName")
        if not name or "State" not in found:
            raise SlurmParseError(f"line {number} names no node and state: {printable(line)!r}")
        try:
            gpus = parse_gres(found.get("Gres", "(null)"))
        except SlurmParseError as error:
            raise SlurmParseError(f"line {number} ({name}): {error}") from None
        reason = found.get("Reason")
        nodes.append(
            SlurmNode(
                printable(name), node_states(found["State"]), gpus,
                printable(reason) if reason and reason != "(null)" else None,
                printable(found["ReasonBy"]) if found.get("ReasonBy") else None,
                tuple(i for m in _USED.finditer(found.get("GresUsed", "")) for i in indexes(m[1])),
            )
        )  # fmt: skip
    return nodes


def indexes(text: str) -> list[int]:
    """GPU indexes as Slurm writes them (`0-1,3`: [0, 1, 3])."""
    found: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            raise SlurmParseError(f"cannot read the GPU indexes {text!r}")
        found += range(int(low), int(high or low) + 1)
    return found


@dataclass(frozen=True)
class SlurmReservation:
    """One reservation as Slurm lists it (times in UTC: gpuhive runs its clients with TZ=UTC)."""

    name: str
    start: datetime
    end: datetime
    nodes: tuple[str, ...]
    users: tuple[str, ...]
    tres: str


def parse_time(text: str) -> datetime:
    """A Slurm instant (`2027-01-01T10:00:00`, printed in the client's TZ: UTC) as UTC."""
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc)
    except ValueError:
        raise SlurmParseError(f"cannot read the time {text!r}") from None


def parse_reservations(text: str) -> list[SlurmReservation]:
    """Every reservation of `scontrol show reservation -o` ('No reservations': none)."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("No reservations"):
            continue
        record = fields(line)
        if "ReservationName" not in record or "StartTime" not in record:
            raise SlurmParseError(f"line {number} is no reservation: {printable(line)!r}")
        users = record.get("Users", "(null)")
        found.append(
            SlurmReservation(
                record["ReservationName"], parse_time(record["StartTime"]),
                parse_time(record["EndTime"]), tuple(expand_hostlist(record.get("Nodes", ""))),
                tuple(u for u in users.split(",") if u and u != "(null)"),
                record.get("TRES", ""),
            )
        )  # fmt: skip
    return found


def parse_version(text: str) -> tuple[int, int]:
    """`slurm 22.05.8` or `slurm-wlm 23.11.4` as (22, 5)."""
    match = re.search(r"(\d+)\.(\d+)", text)
    if match is None:
        raise SlurmParseError(f"cannot read Slurm's version from {printable(text)!r}")
    return int(match.group(1)), int(match.group(2))
