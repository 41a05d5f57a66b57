"""The ``amd-smi`` and ``rocm-smi`` stand-ins: a simulated host's GPUs as AMD's tools print them.

``amd-smi list|static|metric|process|topology --json`` (ROCm 6) and ``rocm-smi --json`` with
the options gpuhive asks (ROCm 5; ``--showpids``) read the same config file as the
``nvidia-smi`` stand-in (``GPUHIVE_SIM_CONFIG``) and find real processes the way ROCm does:
by ``ROCR_VISIBLE_DEVICES`` (then ``HIP_VISIBLE_DEVICES``) in their environment, with the
simulated host's marker (see ``core.find_processes``). A process pinned with
``CUDA_VISIBLE_DEVICES`` is not on an AMD GPU.

The shapes follow amd-smi's JSON (a list of per-GPU objects, ``{"value", "unit"}`` pairs,
``"N/A"`` where a reading is missing) and rocm-smi's (``cardN`` objects of strings, processes as
``PID<n>`` entries under ``system``); the values are the simulation's. A GPU's fault
(sim/health.py) shows as ROCm shows it: ``ecc`` and ``retired`` as uncorrectable RAS counts,
``thermal`` as a hot junction and ``THROTTLED``; ``lost`` leaves the GPU out. Standard library
only, and light: every call starts a fresh interpreter.
"""

from __future__ import annotations

import os
import sys

from . import core
from .fastpath import GPU_DEFAULTS, GpuRecord, parse_json

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

MB = 1024 * 1024
USAGE = (
    "usage: amd-smi {list,static,metric,process,topology} --json | version (gpuhive simulation)\n"
)
ROCM_USAGE = "usage: rocm-smi [--showpids] --json (gpuhive simulation)\n"
DRIVER_DOWN = "AMDSMI_STATUS_DRIVER_NOT_LOADED - Driver not loaded\n"  # amd-smi's own words
ROCM = "6.2.0"  # the ROCm release the stand-in plays
VERSION = (
    f"AMDSMI Tool: 24.6.2+gpuhive-sim | AMDSMI Library version: 24.6.2.0 | ROCm version: {ROCM}\n"
)
XGMI_MODELS = ("MI300", "MI250", "MI210", "MI100")


def _v(value: Any, unit: str) -> Any:
    """amd-smi's value/unit pair ("N/A" for a missing reading)."""
    return "N/A" if value is None else {"value": value, "unit": unit}


def serial(gpu: Any) -> str:
    """The GPU's ASIC serial (0x + 16 hex), the hex of its UUID (``GPU-<hex>``)."""
    return "0x" + gpu.uuid.split("-", 1)[-1].replace("-", "")[:16].upper()


def list_uuid(gpu: Any) -> str:
    """amd-smi list's UUID: the serial's first 2 digits, 'ff', the device id, then the rest
    of the serial (afff74a1-0000-1000-8054-e92b0a5d57c8 for serial 0xAF54E92B0A5D57C8)."""
    hexes = serial(gpu)[2:].lower()
    return f"{hexes[:2]}ff74a1-0000-1000-80{hexes[2:4]}-{hexes[4:]}"


def _gpus(path: str) -> tuple[Any, list[Any]]:
    """(host settings, GPUs present) from the config file."""
    data = core.read_file(path)
    if data is None:
        raise OSError(f"cannot read {path}")
    host = parse_json(data.decode("utf-8"))
    if not isinstance(host, dict):
        raise ValueError("the config is not an object")
    gpus = []
    for raw in host.get("gpus", []):
        gpu = GpuRecord(**{**GPU_DEFAULTS, **raw, "mig": [], "unavailable": {}})
        core.fill_gpu_defaults(gpu)
        if gpu.fault not in ("lost", "xid"):
            gpus.append(gpu)
    return host, sorted(gpus, key=lambda g: g.index)


def _loads(host: dict[str, Any], gpus: list[Any]) -> tuple[list[Any], dict[int, Any]]:
    """(processes on the host's GPUs, each GPU's load by index)."""
    procs = core.find_processes(str(host.get("host", "")), gpus, variables=core.ROCM_VARIABLES)
    loads = {
        g.index: core.gpu_load(
            g, [(u, m, None) for _, _, places, m, u in procs for p in places if p[0] == g.index]
        )
        for g in gpus
    }
    return procs, loads


def _list(gpus: list[Any]) -> list[dict[str, Any]]:
    return [
        {
            "gpu": g.index,
            "bdf": g.pci_bus_id[-12:].lower(),
            "uuid": list_uuid(g),
            "kfd_id": 4096 + 17 * g.index,
            "node_id": g.index + 1,
            "partition_id": 0,
        }
        for g in gpus
    ]


def _static(gpus: list[Any]) -> list[dict[str, Any]]:
    return [
        {
            "gpu": g.index,
            "asic": {
                "market_name": g.name,
                "vendor_id": "0x1002",
                "vendor_name": "Advanced Micro Devices Inc. [AMD/ATI]",
                "device_id": "0x74a1",
                "asic_serial": serial(g),
                "oam_id": g.index,
            },
            "bus": {"bdf": g.pci_bus_id[-12:].lower()},
            "vram": {"type": "HBM", "size": _v(g.memory_total_mib, "MB")},
            "limit": {"max_power": _v(g.power_limit_w and int(g.power_limit_w), "W")},
        }
        for g in gpus
    ]


def _metric(gpus: list[Any], loads: dict[int, Any]) -> list[dict[str, Any]]:
    out = []
    for g in gpus:
        util, util_mem, used, _, temp, power = loads[g.index]
        hot = g.fault == "thermal"
        bad = {"ecc": 2, "retired": 1}.get(g.fault or "", 0)
        out.append(
            {
                "gpu": g.index,
                "usage": {
                    "gfx_activity": _v(util, "%"),
                    "umc_activity": _v(util_mem, "%"),
                    "mm_activity": "N/A",
                },
                "power": {
                    "socket_power": _v(None if power is None else round(power), "W"),
                    "power_management": "ENABLED",
                    "throttle_status": "THROTTLED" if hot else "UNTHROTTLED",
                },
                "temperature": {
                    "edge": _v(temp, "C"),
                    "hotspot": _v(105 if hot else temp + 7, "C"),
                    "mem": _v(temp + 3, "C"),
                },
                "mem_usage": {
                    "total_vram": _v(g.memory_total_mib, "MB"),
                    "used_vram": _v(used, "MB"),
                    "free_vram": _v(g.memory_total_mib - used, "MB"),
                },
                "ecc": {
                    "total_correctable_count": 0,
                    "total_uncorrectable_count": bad,
                    "total_deferred_count": 0,
                },
            }
        )
    return out


def _process(gpus: list[Any], procs: list[Any]) -> list[dict[str, Any]]:
    def info(pid: int, name: str, mem: int) -> dict[str, Any]:
        vram = _v(mem * MB, "B")
        zero = _v(0, "B")
        return {
            "process_info": {
                "name": name,
                "pid": pid,
                "memory_usage": {"gtt_mem": zero, "cpu_mem": zero, "vram_mem": vram},
                "mem_usage": vram,
                "usage": {"gfx": _v(0, "ns"), "enc": _v(0, "ns")},
            }
        }

    return [
        {
            "gpu": g.index,
            "process_list": [
                info(pid, name, mem)
                for pid, name, places, mem, _ in procs
                if any(p[0] == g.index for p in places)
            ],
        }
        for g in gpus
    ]


def _topology(gpus: list[Any]) -> list[dict[str, Any]]:
    xgmi = all(any(m in g.name for m in XGMI_MODELS) for g in gpus)

    def link(a: Any, b: Any) -> str:
        return "SELF" if a is b else ("XGMI" if xgmi else "PCIE")

    return [
        {
            "gpu": a.index,
            "link_accessibility": {f"gpu_{b.index}": "ENABLED" for b in gpus},
            "weight": {f"gpu_{b.index}": 0 if a is b else (15 if xgmi else 40) for b in gpus},
            "hops": {f"gpu_{b.index}": 0 if a is b else 1 for b in gpus},
            "link_type": {f"gpu_{b.index}": link(a, b) for b in gpus},
        }
        for a in gpus
    ]


def _rocm(gpus: list[Any], procs: list[Any], loads: dict[int, Any]) -> dict[str, Any]:
    """rocm-smi's `--json` (ROCm 5 keys: `GPU ID`, renamed `Device ID` in 6.0.2)."""
    out: dict[str, Any] = {}
    for g in gpus:
        util, util_mem, used, _, temp, power = loads[g.index]
        out[f"card{g.index}"] = {
            "GPU ID": "0x740f",
            "Unique ID": serial(g).lower(),
            "Card series": g.name,
            "Card model": "0x0c34",
            "PCI Bus": g.pci_bus_id[-12:].lower(),
            "Temperature (Sensor edge) (C)": f"{temp:.1f}",
            "Average Graphics Package Power (W)": "N/A" if power is None else f"{power:.1f}",
            "GPU use (%)": "N/A" if util is None else str(util),
            "GPU memory use (%)": "N/A" if util_mem is None else str(util_mem),
            "VRAM Total Memory (B)": str(g.memory_total_mib * MB),
            "VRAM Total Used Memory (B)": str(used * MB),
        }
    system: dict[str, Any] = {"Driver version": "6.2.4"}
    for pid, name, places, mem, _ in procs:
        system[f"PID{pid}"] = f"{name}, {len(places)}, {mem * MB}, 0, 0"
    out["system"] = system
    return out


_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}


def _string(text: str) -> str:
    """A JSON string as json.dumps writes it (ASCII; control and other characters escaped)."""
    out = []
    for ch in text:
        code = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 0x20 <= code < 0x7F:
            out.append(ch)
        elif ch in _SHORT:
            out.append(_SHORT[ch])
        elif code > 0xFFFF:  # a surrogate pair, as json.dumps writes it
            code -= 0x10000
            out.append(f"\\u{0xD800 | (code >> 10):04x}\\u{0xDC00 | (code & 0x3FF):04x}")
        else:
            out.append(f"\\u{code:04x}")
    return '"' + "".join(out) + '"'


def dumps(value: Any, indent: int | None = 4, level: int = 0) -> str:
    """`value` as JSON, the way json.dumps(indent=…) prints it, without importing json (and
    its regular expressions: every call of the stand-in is a fresh interpreter)."""
    if isinstance(value, str):
        return _string(value)
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, int | float):
        return repr(value)
    items = list(value.items()) if isinstance(value, dict) else list(value)
    if not items:
        return "{}" if isinstance(value, dict) else "[]"
    pad = "" if indent is None else "\n" + " " * (indent * (level + 1))
    end = "" if indent is None else "\n" + " " * (indent * level)
    sep = ", " if indent is None else ","
    if isinstance(value, dict):
        parts = [f"{_string(str(k))}: {dumps(v, indent, level + 1)}" for k, v in items]
        return "{" + sep.join(pad + p for p in parts) + end + "}"
    return "[" + sep.join(pad + dumps(v, indent, level + 1) for v in items) + end + "]"


def main(argv: list[str] | None = None, tool: str = "amd-smi") -> int:
    """Run the stand-in (`tool`: amd-smi or rocm-smi); return its exit status."""
    args = sys.argv[1:] if argv is None else argv
    rocm = tool == "rocm-smi"
    if not rocm and args[:1] == ["version"]:  # amd-smi's one line (its 6.1 layout)
        sys.stdout.write(VERSION)
        return 0
    if "--json" not in args or (not rocm and (not args or args[0] not in COMMANDS)):
        sys.stderr.write(ROCM_USAGE if rocm else USAGE)
        return 2
    path = os.environ.get(core.CONFIG_ENV)
    if not path:
        sys.stderr.write(f"{tool} (gpuhive sim): ${core.CONFIG_ENV} is not set\n")
        return 1
    host, gpus = _gpus(path)
    if host.get("driver_failure"):
        sys.stdout.write(DRIVER_DOWN)
        return 1
    procs, loads = _loads(host, gpus) if rocm or args[0] in ("metric", "process") else ([], {})
    if rocm:
        answer: Any = _rocm(gpus, procs if "--showpids" in args else [], loads)
    elif args[0] == "metric":
        answer = _metric(gpus, loads)
    elif args[0] == "process":
        answer = _process(gpus, procs)
    else:
        answer = _PLAIN[args[0]](gpus)
    sys.stdout.write(dumps(answer, indent=None if rocm else 4) + "\n")  # rocm-smi: one line
    return 0


_PLAIN = {"list": _list, "static": _static, "topology": _topology}  # no process scan
COMMANDS = (*_PLAIN, "metric", "process")


def install_amd_smi(bin_dir: str | os.PathLike[str], python: str) -> list[str]:
    """Write ``amd-smi`` and ``rocm-smi`` into `bin_dir`, beside an installed ``nvidia-smi``
    stand-in (whose private copy of these modules they run); return their paths."""
    lib = os.path.join(os.fspath(bin_dir), ".gpuhive-sim", "jupyter_gpuhive")
    paths = []
    for tool in ("amd-smi", "rocm-smi"):
        path = os.path.join(os.fspath(bin_dir), tool)
        with open(path, "w", encoding="utf-8") as out:
            out.write(
                f"#!{python} -IS\n"
                f'"""{tool} stand-in of jupyter-gpuhive (generated by install_amd_smi)."""\n'
                "import sys\n\n"
                'package = type(sys)("jupyter_gpuhive")\n'
                f"package.__path__ = [{lib!r}]\n"
                'sys.modules["jupyter_gpuhive"] = package\n'
                "from jupyter_gpuhive.sim.amd_smi import main  # noqa: E402\n\n"
                f"sys.exit(main(tool={tool!r}))\n"
            )
        os.chmod(path, 0o755)  # noqa: S103 (an executable for every user, as nvidia-smi)
        paths.append(path)
    return paths


if __name__ == "__main__":
    sys.exit(main(tool=os.path.basename(sys.argv[0])))
