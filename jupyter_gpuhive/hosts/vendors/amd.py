"""AMD GPUs through amd-smi (ROCm 6), or rocm-smi (ROCm 5): a built-in `Vendor` (`amd`).

A host is AMD when its entry says `vendor: amd`. Processes are pinned the way ROCm reads it:
`ROCR_VISIBLE_DEVICES` lists the GPUs by UUID (`GPU-` and the ASIC serial), and
`HIP_VISIBLE_DEVICES` numbers all of them (0..n-1), so neither a variable inherited from the
user's shell nor HIP's own numbering narrows them. A container gets `/dev/kfd` (ROCm's
compute interface) and each of its GPUs' own render node, found on the host by the GPU's
unique id in sysfs (`/sys/class/drm/renderD*/device/unique_id`), never every node.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from typing import Any

from ...errors import Invalid
from ...model.gpus import Pinning, ShellWord, VendorReading
from ...model.topology import Topology
from . import amd_read
from .amd_probe import CHILDREN, FIFOS, FIND, QUERIES, ROCM_QUERIES, SETUP, STATIC_QUERY, TOPOLOGY
from .amd_probe import body as probe_body
from .vendor import DoctorCheck, DoctorOutput, Sections, Vendor

_HEX = re.compile(r"^GPU-([0-9a-fA-F]{8,16})$")
# The render node whose device has this unique id (sysfs prints it as 16 hex digits).
_RENDER = (
    '$(for r in /sys/class/drm/renderD*; do u=$(cat "$r/device/unique_id" 2>/dev/null); '
    'case $u in *{hex}) echo "/dev/dri/${{r##*/}}"; break ;; esac; done)'
)


TOOLS = "amd-smi/rocm-smi"  # the doctor's check of which of them the host has


class RocmPinning(Pinning):
    """ROCR_VISIBLE_DEVICES by UUID, HIP_VISIBLE_DEVICES over all of them; containers get
    /dev/kfd and their GPUs' render nodes."""

    def container_flags(self, mode: str, uuids: list[str]) -> list[str]:
        """`--device /dev/kfd` and each GPU's render node (looked up on the host)."""
        if mode == "none" or not uuids:
            return []
        words: list[str] = ["--device", "/dev/kfd"]
        for uuid in uuids:
            found = _HEX.match(uuid)
            if found is None:
                raise Invalid(
                    f"GPU {uuid} reports no unique id (ASIC serial), so gpuhive cannot give it "
                    "to a container by itself; book a GPU that reports one."
                )
            words += ["--device", ShellWord(_RENDER.format(hex=found[1].lower()))]
        return words


class AmdVendor(Vendor):
    """amd-smi's (or rocm-smi's) JSON, and ROCm's pinning."""

    name = "amd"
    tool_name = "amd-smi"
    pinning = RocmPinning(
        "ROCR_VISIBLE_DEVICES",
        counted=("HIP_VISIBLE_DEVICES",),
        alloc_conf="PYTORCH_HIP_ALLOC_CONF",
    )
    fifos = FIFOS
    children = CHILDREN
    topology_command = TOPOLOGY
    list_command = STATIC_QUERY

    def probe_setup(self) -> str:
        """Which tool the host has, and the kept `static` answer."""
        return SETUP

    def probe_body(self, health: bool) -> str:
        """amd-smi's metric and process queries at once (static once), or rocm-smi."""
        return probe_body()

    def read(self, host: str, sections: Sections, seen: dict[str, Any] | None) -> VendorReading:
        """The AMD tool's sections (see amd_read.py)."""
        return amd_read.read_sections(dict(sections))

    def parse_topology(self, text: str) -> Topology:
        """amd-smi's (or rocm-smi's) link types."""
        return amd_read.parse_topology(text)

    def doctor_find(self) -> str:
        """Where amd-smi (else rocm-smi) is, or the PATH searched."""
        return FIND

    def doctor_tool(self, host: str, status: int, text: str) -> DoctorCheck:
        """Whether amd-smi or rocm-smi is on the host's PATH."""
        if status == 0:
            return DoctorCheck(host, TOOLS, "ok", text.strip().splitlines()[-1])
        return DoctorCheck(
            host, TOOLS, "fail",
            f"there is neither amd-smi nor rocm-smi on the PATH gpuhive uses on {host}",
            "install ROCm there, or set the host's env PATH in the hosts file to its bin folder.",
        )  # fmt: skip

    def doctor_queries(self) -> tuple[tuple[str, str, str], ...]:
        """amd-smi's queries and rocm-smi's, each alone."""
        return QUERIES + ROCM_QUERIES

    def doctor_judge(self, host: str, outputs: dict[str, DoctorOutput]) -> list[DoctorCheck]:
        """amd-smi's answers read by gpuhive's parser (rocm-smi's where amd-smi is missing)."""
        sections = {
            "amdstatic": _pair(outputs.get("amd-smi-static.json")),
            "amdmetric": _pair(outputs.get("amd-smi-metric.json")),
            "amdprocess": _pair(outputs.get("amd-smi-process.json")),
        }
        tool, command = "amd-smi", STATIC_QUERY
        if sections["amdstatic"][0] == 127 or "not found" in sections["amdstatic"][1]:
            sections = {"rocmsmi": _pair(outputs.get("rocm-smi.json"))}
            tool, command = "rocm-smi", ROCM_QUERIES[0][2]
        reading = amd_read.read_sections(sections)
        checks = (
            [_rocm_version(host, outputs.get("amd-smi-version.txt"))] if tool == "amd-smi" else []
        )
        if reading.error:
            return [*checks, DoctorCheck(host, tool, "fail", reading.error, "", command)]
        found = f"{tool} reads {len(reading.gpus)} GPU(s), {len(reading.processes)} process(es)"
        return [*checks, DoctorCheck(host, tool, "ok", found, "", command)]

    def local_gpus(
        self, search_path: str | None, timeout: float
    ) -> tuple[str | None, list[dict[str, Any]], str]:
        """The GPUs amd-smi's `static` names on this machine."""
        found = shutil.which("amd-smi", path=search_path)
        if not found:
            return None, [], "no amd-smi on PATH"
        try:
            done = subprocess.run(
                [found, *STATIC_QUERY.split()[1:]],
                capture_output=True, text=True, timeout=timeout, check=False,
            )  # fmt: skip
            static = amd_read.by_gpu(done.stdout, "static") if done.returncode == 0 else {}
        except (OSError, subprocess.TimeoutExpired, ValueError, json.JSONDecodeError) as error:
            return None, [], f"{found} static failed: {error}"
        gpus = [
            {"index": i, "model": (s.get("asic") or {}).get("market_name"),
             "uuid": amd_read.uuid_of(s)}
            for i, s in sorted(static.items())
        ]  # fmt: skip
        if not gpus:
            return None, [], f"{found} static found no GPU (exit {done.returncode})"
        return os.path.dirname(found), gpus, f"{found} lists {len(gpus)} GPU(s)"


def _rocm_version(host: str, output: DoctorOutput | None) -> DoctorCheck:
    """The ROCm release `amd-smi version` names (`… | ROCm version: 6.1.0`)."""
    text = output.text if output else ""
    found = re.search(r"ROCm version: *([0-9][\w.]*)", text)
    if found is None:
        said = text.strip().splitlines()[-1:] or ["no answer"]
        return DoctorCheck(host, "rocm", "warn", f"amd-smi did not name its ROCm: {said[0][:120]}")
    return DoctorCheck(host, "rocm", "ok", f"ROCm {found[1]}", "", "amd-smi version")


def _pair(output: DoctorOutput | None) -> tuple[int, str]:
    return (127, "not run") if output is None else (output.status, output.text)
