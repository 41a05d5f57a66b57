"""The stand-in's fast path for ``--query-gpu`` and ``--query-compute-apps`` CSV, and ``-L``.

The probe asks every host for these queries on every sweep, so they must be cheap. This
path reads the config into light records instead of the dataclasses of ``inventory`` (importing
``dataclasses`` alone costs more than the rest of a call) and renders through ``core``, which the
full path shares, so both print the same. Whenever the config is anything but a plain, healthy
host (a fault knob set, a malformed file, an unknown key), `fast_answer` answers None and the
caller takes the full path, which reports the problem exactly as before.
"""

from __future__ import annotations

import time

from . import core, query

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

# Fields and defaults of inventory.SimMig, SimGpu and SimHostConfig (tests/sim check they agree).
MIG_REQUIRED = ("profile", "uuid", "memory_total_mib", "gpu_instance_id")
MIG_DEFAULTS: dict[str, Any] = {"compute_instance_id": 0, "multiprocessor_count": 14}
GPU_REQUIRED = ("index", "uuid", "name", "memory_total_mib")
GPU_DEFAULTS: dict[str, Any] = {
    "pci_bus_id": "",
    "memory_reserved_mib": None,
    "temperature_c": 30,
    "idle_power_w": 55.0,
    "power_limit_w": 400.0,
    "fan_pct": None,
    "clocks_sm_mhz": 1410,
    "persistence_mode": True,
    "mig_capable": None,
    "mig": (),  # SimGpu: a new list; here always replaced by a list of records
    "unavailable": None,  # SimGpu: a new dict; here too (see light_config)
    "ghost": None,
    "fault": None,  # a failing GPU (sim/health.py) takes the full path
}
HOST_REQUIRED = ("host",)
HOST_DEFAULTS: dict[str, Any] = {
    "gpus": (),  # always replaced by a list of records
    "driver_version": "535.129.03",
    "cuda_version": "12.2",
    "delay_s": 0.0,
    "hang": False,
    "junk": False,
    "driver_failure": False,
    "topology": None,  # only `topo -m` reads it (the full path)
    "health_elements": False,  # only `-q -x` reads it (the full path)
    "raw_names": False,  # only `-q -x` reads it (the full path)
    "vendor": "nvidia",  # the amd-smi stand-in reads it; nvidia-smi answers all the same
}


class Record:
    """A bag of attributes: the fast path's light stand-in for the model's dataclasses."""

    def __init__(self, **attrs: Any) -> None:
        self.__dict__.update(attrs)

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(name)


class GpuRecord(Record):
    """A GPU (attributes of inventory.SimGpu)."""

    @property
    def mig_enabled(self) -> bool:
        """Whether MIG mode is on (the GPU has slices)."""
        return bool(self.mig)


def _record(
    cls: type[Record], raw: object, required: Sequence[str], defaults: dict[str, Any]
) -> Any:
    """`raw` (a JSON object) as a record, or None unless it has exactly known keys."""
    if type(raw) is not dict or not all(k in raw for k in required):
        return None
    if any(k not in defaults and k not in required for k in raw):
        return None
    return cls(**{**defaults, **raw})


def light_config(data: object) -> Any:
    """A healthy host's config as records, or None for anything the full path must handle."""
    host = _record(Record, data, HOST_REQUIRED, HOST_DEFAULTS)
    if host is None or type(host.host) is not str or type(host.gpus) not in (list, tuple):
        return None
    if host.hang or host.junk or host.driver_failure:
        return None
    if type(host.delay_s) not in (int, float) or host.delay_s > 0:
        return None
    gpus, host.gpus = host.gpus, []
    for raw in gpus:
        gpu = _record(GpuRecord, raw, GPU_REQUIRED, GPU_DEFAULTS)
        if gpu is None or type(gpu.mig) not in (list, tuple) or gpu.fault:
            return None
        gpu.mig = [_record(Record, m, MIG_REQUIRED, MIG_DEFAULTS) for m in gpu.mig]
        if any(m is None for m in gpu.mig):
            return None
        if "unavailable" not in raw:
            gpu.unavailable = {}
        core.fill_gpu_defaults(gpu)
        host.gpus.append(gpu)
    return host


class _JsonContext:
    """What ``_json.make_scanner`` reads from a decoder: json.loads' defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = {
        "-Infinity": float("-inf"),
        "Infinity": float("inf"),
        "NaN": float("nan"),
    }.__getitem__


def parse_json(text: str) -> object:
    """``json.loads(text)`` without importing ``json``, whose ``re`` costs more than the call.

    Uses the C scanner behind json.loads; raises ValueError (or StopIteration) where
    json.loads would raise. Without the C module, it is json.loads.
    """
    try:
        from _json import make_scanner
    except ImportError:  # pragma: no cover - CPython always has it
        import json

        return json.loads(text)
    blank = " \t\n\r"
    scan = make_scanner(_JsonContext)  # type: ignore[arg-type]  # any object with the attributes
    value, end = scan(text, len(text) - len(text.lstrip(blank)))
    if text[end:].strip(blank):
        raise ValueError("extra data after the JSON value")
    return value


def load_light_config(path: str) -> Any:
    """Read and check the config file for the fast path; None when the full path must."""
    data = core.read_file(path)
    if data is None:
        return None
    try:
        return light_config(parse_json(data.decode("utf-8")))
    except (ValueError, TypeError, AttributeError, StopIteration, RecursionError):
        return None  # the full path reports it


def light_snapshot(config: Any, with_processes: bool = True) -> Any:
    """The host's GPUs now, as records shaped like snapshot.HostSnapshot.

    Without `with_processes` /proc is not read (for output that does not depend on it).
    """
    processes = core.find_processes(config.host, config.gpus) if with_processes else []
    states = []
    pairs = []
    for gpu in sorted(config.gpus, key=lambda g: g.index):
        rows = [
            Record(pid=pid, process=Record(name=name, used_memory_mib=mem), placement=place)
            for pid, name, places, mem, _ in processes
            for place in places
            if place[0] == gpu.index
        ]
        loads = [
            (util, mem, place[1])
            for _, _, places, mem, util in processes
            for place in places
            if place[0] == gpu.index
        ]
        util_gpu, util_mem, used, slices, temperature, power = core.gpu_load(gpu, loads)
        state = Record(
            gpu=gpu,
            util_gpu=util_gpu,
            util_mem=util_mem,
            mem_used_mib=used,
            mem_free_mib=core.free_mib(gpu, used),
            mig_used_mib=slices,
            temperature_c=temperature,
            power_w=power,
        )
        states.append(state)
        pairs += [(state, row) for row in rows]
    return Record(config=config, gpus=tuple(states), timestamp=time.time(), rows=lambda: pairs)


def fast_answer(
    mode: str, fields: Sequence[str], noheader: bool, nounits: bool, path: str, host: str
) -> str | None:
    """What a ``--query-gpu`` ("gpu"), ``--query-compute-apps`` ("apps") or ``-L`` ("list")
    call prints.

    None when the config needs the full path. `host` is the host name to use when the config
    names none. Raises query.UnknownField like the full path.
    """
    config = load_light_config(path)
    if config is None:
        return None
    config.host = config.host or host
    if mode == "list":
        return query.list_gpus(light_snapshot(config, with_processes=False))
    snap = light_snapshot(config)
    if mode == "gpu":
        return query.query_gpu_csv(snap, fields, noheader=noheader, nounits=nounits)
    return query.query_apps_csv(snap, fields, noheader=noheader, nounits=nounits)
