"""The `Vendor` interface: a GPU vendor's probe part, parsers, pinning and doctor checks."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...model.gpus import Pinning, VendorReading
from ...model.topology import Topology

Sections = Mapping[str, tuple[int, str]]  # the probe's answer: {section: (status, text)}


@dataclass(frozen=True)
class DoctorCheck:
    """One finding of `jupyter gpuhive doctor`: ok, warn or fail, what was seen, the fix."""

    host: str
    name: str
    status: str  # ok, warn or fail
    detail: str
    fix: str = ""
    command: str = ""


@dataclass(frozen=True)
class DoctorOutput:
    """One command's raw answer (stdout and stderr together) and its exit status."""

    file: str
    command: str
    status: int
    text: str
    seconds: float | None = None  # how long it took (the vendor's queries run at once)


class Vendor:
    """One GPU vendor's command lines and parsers (subclass it; see hosts/vendors/nvidia.py)."""

    name = ""
    tool_name = ""  # the tool users are told to run (messages name it from here)
    pinning = Pinning("")
    fifos: tuple[str, ...] = ()  # FIFOs the probe makes in its scratch folder `$t`
    children = ""  # shell words of the PIDs to end when the probe leaves early
    topology_command: str | None = None  # a command whose answer parse_topology reads
    list_command = ""  # the command that lists the GPUs (the guidance's check)

    def probe_setup(self) -> str:
        """Shell run once per probe session before the first probe (variables)."""
        return ""

    def probe_body(self, health: bool) -> str:
        """Shell printing this vendor's sections (`@M@name status` lines) into the probe's
        answer, leaving the GPU processes' PIDs, space separated, in `$pids`."""
        raise NotImplementedError

    def read(self, host: str, sections: Sections, seen: dict[str, Any] | None) -> VendorReading:
        """The vendor's sections of one probe answer as neutral readings (`seen`: the caller's
        memory, per host, of what earlier answers sent, for answers that refer to it)."""
        raise NotImplementedError

    def held(self, seen: dict[str, Any], host: str) -> str:
        """What the next probe request tells the host the client holds ("" for nothing)."""
        return ""

    def parse_topology(self, text: str) -> Topology:
        """The topology in `topology_command`'s answer (TopologyError if unreadable)."""
        raise NotImplementedError

    def doctor_find(self) -> str:
        """A command that prints where the tool is (exit 127 when it is missing)."""
        return f"command -v {self.tool_name}"

    def doctor_tool(self, host: str, status: int, text: str) -> DoctorCheck:
        """The check of `doctor_find`'s answer."""
        state = "ok" if status == 0 else "fail"
        return DoctorCheck(host, self.tool_name, state, text.strip()[-200:])

    def doctor_queries(self) -> tuple[tuple[str, str, str], ...]:
        """(check name, saved file, command) of each query the doctor runs alone."""
        return ()

    def doctor_judge(self, host: str, outputs: dict[str, DoctorOutput]) -> list[DoctorCheck]:
        """The checks from the queries' answers (`outputs` by file)."""
        return []

    def local_gpus(
        self, search_path: str | None, timeout: float
    ) -> tuple[str | None, list[dict[str, Any]], str]:
        """(the tool's path, the GPUs it lists here, what was found) for this machine."""
        return None, [], f"no {self.tool_name} on PATH"
