"""amd_read.py's parsers on outputs written here from amd-smi's and rocm-smi's formats (the
real captures are checked by `make test-corpus`): values, units, N/A, warnings, text views."""

from __future__ import annotations

import json

import pytest

from jupyter_gpuhive.hosts.vendors import amd_read
from jupyter_gpuhive.model.topology import TopologyError

STATIC = [
    {"gpu": 0, "asic": {"market_name": "MI210", "asic_serial": "0x00C4A1B2C3D4E5F6"},
     "bus": {"bdf": "0000:0c:00.0"}, "vram": {"type": "HBM", "size": {"value": 65520, "unit": "MB"}},
     "limit": {"max_power": {"value": 300, "unit": "W"}}},
    {"gpu": 1, "asic": {"market_name": "MI210", "asic_serial": "N/A"},
     "bus": {"bdf": "0000:0d:00.0"}, "vram": {"size": "N/A"}, "limit": {"max_power": "N/A"}},
]  # fmt: skip
METRIC = [
    {"gpu": 0, "usage": {"gfx_activity": {"value": 97, "unit": "%"}, "umc_activity": "N/A"},
     "power": {"socket_power": {"value": 281, "unit": "W"}, "throttle_status": "UNTHROTTLED"},
     "temperature": {"edge": "N/A", "hotspot": {"value": 71, "unit": "C"}},
     "mem_usage": {"total_vram": {"value": 65520, "unit": "MB"},
                   "used_vram": {"value": 4096, "unit": "MB"}},
     "ecc": {"total_uncorrectable_count": 0, "total_deferred_count": 3}},
    {"gpu": 1, "usage": {"gfx_activity": 0}, "power": {"socket_power": "N/A"},
     "temperature": {"edge": 30}, "mem_usage": {"used_vram": 0},
     "ecc": {"total_uncorrectable_count": 2}},
]  # fmt: skip
PROCESS = [
    {"gpu": 0, "process_list": [{"process_info": {"name": "train.py", "pid": 4242,
                                                  "memory_usage": {"vram_mem": {"value": 2147483648, "unit": "B"}}}}]},
    {"gpu": 1, "process_list": [{"process_info": "No running processes detected"}]},
]  # fmt: skip


def sections(**texts: str) -> dict[str, tuple[int, str]]:
    return {name: (0, text) for name, text in texts.items()}


def test_amd_smi_json_is_read_with_units_na_and_health() -> None:
    framed = "".join(f"|{line}\n" for line in json.dumps(PROCESS, indent=4).splitlines())
    warned = "WARNING: User is missing the following required groups: render, video\n"
    warned += "[WARN] amd-smi: some readings need root\n"
    reading = amd_read.read_sections(
        sections(amdstatic=warned + json.dumps(STATIC), amdmetric=json.dumps(METRIC),
                 amdprocess=framed)
    )  # fmt: skip
    assert reading.error is None
    first, second = reading.gpus
    assert first.uuid == "GPU-00c4a1b2c3d4e5f6" and second.uuid == "amd-pci-0000:0d:00.0"
    assert (first.util_gpu, first.util_mem, first.mem_used_mib, first.mem_total_mib) == (
        97,
        None,
        4096,
        65520,
    )
    assert (first.temperature_c, first.power_w, first.power_limit_w) == (71, 281.0, 300.0)
    assert second.power_w is None and ("power.draw", "not reported by amd-smi") in second.unreported
    assert reading.health[first.uuid].state == "degraded"  # deferred errors
    assert reading.health[second.uuid].state == "failed"  # uncorrectable errors
    assert [(p.pid, p.gpu_uuid, p.used_memory_mib) for p in reading.processes] == [
        (4242, first.uuid, 2048)
    ]


def test_a_failed_or_unreadable_answer_is_the_hosts_gpu_error() -> None:
    down = {"amdstatic": (1, "AMDSMI_STATUS_DRIVER_NOT_LOADED - Driver not loaded\n")}
    assert "Driver not loaded" in (amd_read.read_sections(down).error or "")
    junk = amd_read.read_sections(sections(amdstatic="no json here", amdmetric="[]"))
    assert junk.error and "no JSON" in junk.error and junk.gpus == ()


def test_rocm_smi_json_old_and_new_keys() -> None:
    cards = {
        "card0": {"Unique ID": "0x5a1b2c3d4e5f6071", "Card series": "Vega 20", "PCI Bus": "0000:03:00.0",
                  "vram Total Memory (B)": "17163091968", "vram Total Used Memory (B)": "1048576",
                  "GPU use (%)": "12", "Average Graphics Package Power (W)": "N/A"},
        "card1": {"Unique ID": "N/A", "Device Name": "Navi 22", "PCI Bus": "0000:07:00.0",
                  "VRAM Total Memory (B)": "12868124672", "VRAM Total Used Memory (B)": "0"},
        "system": {"Driver version": "6.3.6", "PID77": "python3, 1, 1073741824, 0, 0",
                   "PIDs for KFD processes": ""},
    }  # fmt: skip
    reading = amd_read.read_rocm_smi(0, json.dumps(cards))
    assert [(g.uuid, g.name, g.mem_total_mib, g.mem_used_mib) for g in reading.gpus] == [
        ("GPU-5a1b2c3d4e5f6071", "Vega 20", 16368, 1),
        ("amd-pci-0000:07:00.0", "Navi 22", 12272, 0),
    ]
    assert ("power.draw", "not reported by rocm-smi") in reading.gpus[0].unreported
    assert [(p.pid, p.gpu_uuid, p.used_memory_mib) for p in reading.processes] == [(77, None, 1024)]


def test_text_views_become_the_json_shape() -> None:
    text = (
        "$ amd-smi process\nGPU: 0\n    PROCESS_INFO:\n        NAME: a\n        PID: 11\n"
        "        MEMORY_USAGE:\n            VRAM_MEM: 1.5 GB\n    PROCESS_INFO:\n"
        "        NAME: b\n        PID: 12\n        MEMORY_USAGE:\n            VRAM_MEM: 0.0 B\n"
        "GPU: 1\n    USAGE:\n        JPEG_ACTIVITY: [0 %, 0 %, 0\n            %, 0 %]\n"
        "        GFX_ACTIVITY: 5 %\n"
    )
    data = amd_read.text_view(text)
    assert data[1]["usage"] == {"jpeg_activity": "[0 %, 0 %, 0 %, 0 %]", "gfx_activity": "5 %"}
    procs = amd_read.processes_of({d["gpu"]: d for d in data}, {0: "GPU-x"})
    assert [(p.pid, p.gpu_uuid, p.used_memory_mib) for p in procs] == [
        (11, "GPU-x", 1536), (12, "GPU-x", 0)
    ]  # fmt: skip
    numbered = {0: {"gpu": 0, "process_info_1": {"pid": 5, "mem_usage": "1.0 GB"}}}
    assert [(p.pid, p.used_memory_mib) for p in amd_read.processes_of(numbered, {})] == [(5, 1024)]
    lines = "GPU[0]\t\t: Unique ID: 0xab\nGPU[0]\t\t: Card series: \t\tMI300X\nPID 9 is using 1 DRM device(s)\n"
    assert amd_read.rocm_text(lines) == {
        "card0": {"Unique ID": "0xab", "Card series": "MI300X"},
        "system": {"PID9": ""},
    }


def test_amd_smi_lists_uuid_holds_the_asic_serial() -> None:
    assert amd_read.serial_of_uuid("afff74a1-0000-1000-8054-e92b0a5d57c8") == "af54e92b0a5d57c8"
    assert amd_read.serial_of_uuid("<redacted>") is None
    listed = {"gpu": 0, "bdf": "0000:05:00.0", "uuid": "afff74a1-0000-1000-8054-e92b0a5d57c8"}
    assert amd_read.uuid_of(listed) == "GPU-af54e92b0a5d57c8"


def test_topology_xgmi_and_pcie() -> None:
    links = [
        {"gpu": a, "link_type": {f"gpu_{b}": "SELF" if a == b else ("XGMI" if b < 2 and a < 2
                                 else "PCIE") for b in range(3)}}
        for a in range(3)
    ]  # fmt: skip
    topology = amd_read.parse_topology(json.dumps(links))
    assert dict(topology.links) == {(0, 1): "XGMI", (0, 2): "PHB", (1, 2): "PHB"}
    assert topology.nvlink_cliques()[0] == frozenset({0, 1})
    rocm = {"system": {"(Topology) Link type between DRM devices 0 and 1": "XGMI"}}
    assert dict(amd_read.parse_topology(json.dumps(rocm)).links) == {(0, 1): "XGMI"}
    with pytest.raises(TopologyError):
        amd_read.parse_topology("Permission denied")


def test_compute_partitions_sharing_a_serial_get_names_of_their_own() -> None:
    parts = [{**STATIC[0], "gpu": i} for i in range(3)]
    metric = [{"gpu": i} for i in range(3)]
    reading = amd_read.read_sections(
        sections(amdstatic=json.dumps(parts), amdmetric=json.dumps(metric))
    )
    assert [g.uuid for g in reading.gpus] == [
        "GPU-00c4a1b2c3d4e5f6", "GPU-00c4a1b2c3d4e5f6-part1", "GPU-00c4a1b2c3d4e5f6-part2"
    ]  # fmt: skip
