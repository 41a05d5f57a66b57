"""NVIDIA GPUs through nvidia-smi: the first `Vendor` (registered as `nvidia`)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from typing import Any

from ...model.gpus import Pinning, VendorReading
from ...model.topology import Topology
from .nvidia_doctor import FIND, QUERIES, judge, tool
from .nvidia_probe import CHILDREN, FIFOS, LIST_QUERY, SETUP, body
from .nvidia_read import read_sections
from .nvidia_topology import COMMAND as TOPO_COMMAND
from .nvidia_topology import parse_topology
from .vendor import DoctorCheck, DoctorOutput, Sections, Vendor

_LISTED = re.compile(r"^GPU (\d+): (.+?) \(UUID: (GPU-[0-9A-Za-z-]+)\)\s*$")


class NvidiaVendor(Vendor):
    """nvidia-smi's queries, formats and pinning (CUDA_VISIBLE_DEVICES, the toolkit, CDI)."""

    name = "nvidia"
    tool_name = "nvidia-smi"
    pinning = Pinning(
        "CUDA_VISIBLE_DEVICES",
        {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"},
        cdi_kind="nvidia.com/gpu",
        gpus_flag=True,
        alloc_conf="PYTORCH_CUDA_ALLOC_CONF",
        mps_limit="CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
    )
    fifos = FIFOS
    children = CHILDREN
    topology_command = TOPO_COMMAND
    list_command = LIST_QUERY

    def probe_setup(self) -> str:
        """The health query's variables (the loop asks the older query after a refusal)."""
        return SETUP

    def probe_body(self, health: bool) -> str:
        """nvidia-smi's queries at once, through the scratch folder's FIFOs."""
        return body(health)

    def read(self, host: str, sections: Sections, seen: dict[str, Any] | None) -> VendorReading:
        """nvidia-smi's sections (see nvidia_read.py)."""
        return read_sections(host, dict(sections), seen)

    def held(self, seen: dict[str, Any], host: str) -> str:
        """The version of the health lines the client holds for this host."""
        held = seen.get(host)
        return str(held[0]) if held else ""

    def parse_topology(self, text: str) -> Topology:
        """`nvidia-smi topo -m`'s matrix."""
        return parse_topology(text)

    def doctor_find(self) -> str:
        """Where nvidia-smi is, or the PATH searched."""
        return FIND

    def doctor_tool(self, host: str, status: int, text: str) -> DoctorCheck:
        """Whether nvidia-smi is on the host's PATH."""
        return tool(host, status, text)

    def doctor_queries(self) -> tuple[tuple[str, str, str], ...]:
        """Every query the probe sends, the MIG listing and `topo -m`, each alone."""
        return QUERIES

    def doctor_judge(self, host: str, outputs: dict[str, DoctorOutput]) -> list[DoctorCheck]:
        """Each output read by gpuhive's own parsers."""
        return judge(host, outputs)

    def local_gpus(
        self, search_path: str | None, timeout: float
    ) -> tuple[str | None, list[dict[str, Any]], str]:
        """The GPUs `nvidia-smi -L` names on this machine."""
        found = shutil.which("nvidia-smi", path=search_path)
        if not found:
            return None, [], "no nvidia-smi on PATH"
        try:
            done = subprocess.run(
                [found, "-L"], capture_output=True, text=True, timeout=timeout, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            return None, [], f"{found} -L failed: {error}"
        gpus = []
        for line in done.stdout.splitlines():
            match = _LISTED.match(line)
            if match:
                gpus.append({"index": int(match[1]), "model": match[2], "uuid": match[3]})
        if done.returncode != 0 or not gpus:
            said = (done.stdout + done.stderr).strip().splitlines()
            first = said[0] if said else f"exit {done.returncode}"
            return None, [], f"{found} -L found no GPU ({first})"
        return (
            os.path.dirname(found),
            gpus,
            f"{found} lists {len(gpus)} GPU" + ("s" if len(gpus) != 1 else ""),
        )
