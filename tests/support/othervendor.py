"""A second GPU vendor for tests: `fakesmi`, another tool with its own flags and format.

`fakesmi report --json` prints one JSON object per line (a device, or a process on one). It
is a shell script over the project's stand-in (installed beside it in a LocalSimHost's bin
folder), so the GPUs and processes it reports are the simulated host's, real processes of real
users included. `FakeSmiVendor` is what a site would write for it: its probe part, its parser
and its pinning; nothing in jupyter_gpuhive names it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jupyter_gpuhive.hosts.vendors import Sections, Vendor
from jupyter_gpuhive.model.gpus import GpuMetrics, Pinning, ProcessReading, VendorReading

NAME = "fakesmi"
_BACKEND = "nvidia-" + "smi"  # the stand-in it drives (built: this file is a vendor module)
SCRIPT = f"""#!/bin/sh
# fakesmi: `fakesmi report --json`, one JSON object per line.
case "$*" in "report --json") ;; *) echo "usage: fakesmi report --json" >&2; exit 2 ;; esac
here=$(dirname "$0")
"$here/{_BACKEND}" --query-gpu=index,uuid,name,memory.used,memory.total,utilization.gpu \\
  --format=csv,noheader,nounits |
  awk -F', ' '{{printf "{{\\"device\\": \\"%s\\", \\"id\\": \\"%s\\", \\"model\\": \\"%s\\", \\"mem_used\\": \\"%s\\", \\"mem_total\\": \\"%s\\", \\"busy\\": \\"%s\\"}}\\n", $1, $2, $3, $4, $5, $6}}'
"$here/{_BACKEND}" --query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader,nounits |
  awk -F', ' '{{printf "{{\\"pid\\": \\"%s\\", \\"on\\": \\"%s\\", \\"mem\\": \\"%s\\"}}\\n", $1, $2, $3}}'
"""
_BODY = r"""out=$(fakesmi report --json 2>&1 </dev/null); st=$?
printf '%s\n' "@M@fakesmi $st" "$out"
pids=
while IFS= read -r x; do
  case $x in '{"pid": "'*) x=${x#'{"pid": "'}; pids="$pids ${x%%\"*}" ;; esac
done <<FAKE
$out
FAKE
"""


def install_fakesmi(bin_dir: Path) -> Path:
    """Write the `fakesmi` script beside the stand-in."""
    path = bin_dir / NAME
    path.write_text(SCRIPT)
    path.chmod(0o755)
    return path


def _int(value: Any) -> int | None:
    text = str(value).strip()
    return int(float(text)) if text.replace(".", "", 1).isdigit() else None


class FakeSmiVendor(Vendor):
    """`fakesmi`'s command line, JSON lines and pinning (FAKE_VISIBLE_DEVICES, CDI)."""

    name = NAME
    tool_name = NAME
    pinning = Pinning("FAKE_VISIBLE_DEVICES", cdi_kind="example.com/gpu")
    list_command = "fakesmi report --json"

    def probe_body(self, health: bool) -> str:
        """One `fakesmi` call; the PIDs of its process lines go to `$pids`."""
        return _BODY

    def read(self, host: str, sections: Sections, seen: dict[str, Any] | None) -> VendorReading:
        """Devices and processes from the JSON lines."""
        status, text = sections.get(NAME, (1, ""))
        if status != 0:
            return VendorReading(error=f"fakesmi failed ({status}): {text.strip()[:200]}")
        gpus: list[GpuMetrics] = []
        procs: list[ProcessReading] = []
        for line in text.splitlines():
            if not line.strip():
                continue
            item = json.loads(line)
            if "device" in item:
                gpus.append(
                    GpuMetrics(
                        int(item["device"]), item["id"], item["model"], _int(item["busy"]), None,
                        _int(item["mem_used"]), _int(item["mem_total"]), None, None, None,
                    )
                )  # fmt: skip
            else:
                procs.append(ProcessReading(int(item["pid"]), item["on"], _int(item["mem"])))
        return VendorReading(gpus=tuple(gpus), processes=tuple(procs))
