"""The stand-in's hot core: /proc scanning and GPU load, free of heavy imports.

The ``nvidia-smi`` stand-in starts a fresh interpreter on every call, so import time is most
of its cost. This module imports only ``os`` (loaded at interpreter start-up):
no dataclasses, pathlib, typing, json or re. It works on duck-typed objects, so the dataclass
model (``inventory``, ``processes``, ``snapshot``, ``formats``) and the stand-in's fast path
(``fastpath``) share one implementation of everything that decides what is printed (the
query CSV itself is in ``query``).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from typing import Any

    # (gpu index, MIG slice index or None): a `processes.Placement` as a plain tuple.
    RawPlacement = tuple[int, int | None]
    # (pid, name, placements, used memory MiB, utilization %): a `processes.SimProcess`.
    RawProcess = tuple[int, str, tuple[RawPlacement, ...], int, int]
    # (util_gpu, util_mem, mem_used_mib, mig_used_mib, temperature_c, power_w)
    Load = tuple[int | None, int | None, int, tuple[int, ...], int, float | None]

CONFIG_ENV = "GPUHIVE_SIM_CONFIG"
HOST_ENV = "GPUHIVE_SIM_HOST"
MEM_ENV = "GPUHIVE_SIM_MEM_MIB"
UTIL_ENV = "GPUHIVE_SIM_UTIL"

# Markers a field can show instead of a value (CSV prints them in brackets, XML as plain N/A).
NA = "N/A"
NOT_SUPPORTED = "Not Supported"
MIG_MODELS = ("A100", "A30", "H100", "H200", "B200")  # GPU names that are MIG-capable

BASE_USED_MIB = 4  # what an idle GPU without MIG reports as used
WATTS_PER_UTIL = 2.5
DEGREES_PER_UTIL = 0.33

# Programs that start GPU programs but never use a GPU themselves.
WRAPPERS = frozenset(
    {
        "bash",
        "sh",
        "dash",
        "zsh",
        "fish",
        "screen",
        "SCREEN",
        "tmux",
        "env",
        "sudo",
        "su",
        "runuser",
        "setsid",
        "nohup",
        "timeout",
        "sshd",
        "nvidia-smi",
        # a container's init (docker run --init, podman's catatonit): its first process, with
        # the container's environment, that only starts and reaps the program
        "docker-init",
        "tini",
        "catatonit",
    }
)

# --- /proc --------------------------------------------------------------------------------


def read_file(path: str, size: int = 65536) -> bytes | None:
    """The whole content of a (/proc) file, or None when it cannot be read.

    A read shorter than asked for is taken as the end (true of regular and /proc files),
    which spares a second read per process in the /proc scan.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = os.read(fd, size)
        if len(data) < size:
            return data
        chunks = [data]
        while chunk := os.read(fd, size):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _parse_environ(data: bytes) -> dict[str, str]:
    """A /proc environ as a dict; {} when it lacks the host variable (then it never matters)."""
    if HOST_ENV.encode() not in data:
        return {}
    env: dict[str, str] = {}
    for item in data.split(b"\0"):
        key, sep, val = item.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = val.decode(errors="replace")
    return env


def comm(pid: int) -> str:
    """The kernel's short name of a process."""
    data = read_file(f"/proc/{pid}/comm")
    return "" if data is None else data.decode(errors="replace").strip()


def process_name(pid: int) -> str:
    """argv[0] of a process (as nvidia-smi shows it), else its comm."""
    data = read_file(f"/proc/{pid}/cmdline")
    if data:
        argv0 = data.split(b"\0", 1)[0]
        if argv0:
            return argv0.decode(errors="replace")
    return comm(pid)


def default_load(pid: int) -> tuple[int, int]:
    """Plausible GPU memory (MiB) and utilization (%) from a process's RSS and CPU use."""
    stat = read_file(f"/proc/{pid}/stat")
    statm = read_file(f"/proc/{pid}/statm")
    try:
        if stat is None or statm is None:
            raise ValueError
        rss_pages = int(statm.split()[1])
    except (IndexError, ValueError):
        return 256, 0
    after_comm = stat.rsplit(b")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu_s = (int(after_comm[11]) + int(after_comm[12])) / ticks
    started_s = int(after_comm[19]) / ticks
    uptime_s = float((read_file("/proc/uptime") or b"0").split()[0])
    age_s = max(uptime_s - started_s, 0.01)
    rss_mib = rss_pages * os.sysconf("SC_PAGE_SIZE") // (1024 * 1024)
    return 256 + 8 * rss_mib, min(100, round(100 * cpu_s / age_s))


def int_env(env: dict[str, str], name: str) -> int | None:
    """An integer from the environment, or None when absent or not a number."""
    try:
        return max(0, int(env[name]))
    except (KeyError, ValueError):
        return None


def lookup(entry: str, gpus: Sequence[Any]) -> RawPlacement | None:
    """The placement one CUDA_VISIBLE_DEVICES entry names, or None when it names none."""
    if entry.isdigit():
        for gpu in gpus:
            if gpu.index == int(entry):
                return gpu.index, 0 if gpu.mig_enabled else None
        return None
    if entry.startswith("GPU-"):
        # CUDA takes a UUID's prefix; ROCm's `GPU-<serial>` is its first hex digits, no dashes
        bare = entry.replace("-", "")
        hits = [gpu for gpu in gpus if gpu.uuid.replace("-", "").startswith(bare)]
        if len(hits) == 1:
            return hits[0].index, 0 if hits[0].mig_enabled else None
        return None
    if entry.startswith("MIG-"):
        for gpu in gpus:
            for i, mig in enumerate(gpu.mig):
                if mig.uuid == entry:
                    return gpu.index, i
    return None


def visible_devices(value: str, gpus: Sequence[Any]) -> tuple[RawPlacement, ...]:
    """Map a CUDA_VISIBLE_DEVICES value to placements on `gpus`, the way CUDA reads it."""
    placements: list[RawPlacement] = []
    for raw in value.split(","):
        found = lookup(raw.strip(), gpus)
        if found is None:
            break
        if found not in placements:
            placements.append(found)
    return tuple(placements)


CUDA_VARIABLES = ("CUDA_VISIBLE_DEVICES",)
# ROCm: ROCR_VISIBLE_DEVICES picks the devices; HIP_VISIBLE_DEVICES, indices, picks among those.
ROCM_VARIABLES = ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")


def placements_of(
    env: dict[str, str], gpus: Sequence[Any], variables: Sequence[str]
) -> tuple[RawPlacement, ...]:
    """The GPUs a process's environment selects: the first variable, each next one picking
    among the devices the one before left (a variable unset leaves them all)."""
    found: tuple[RawPlacement, ...] | None = None
    for name in variables:
        value = env.get(name)
        if value is None:
            continue
        if found is None:
            found = visible_devices(value, gpus)
            continue
        picked = [found[int(i)] for i in value.split(",") if i.isdigit() and int(i) < len(found)]
        found = tuple(picked)
    return found or ()


def find_processes(
    host: str, gpus: Sequence[Any], proc: str = "/proc", variables: Sequence[str] = CUDA_VARIABLES
) -> list[RawProcess]:
    """All readable processes on `host`'s simulated GPUs `gpus`, sorted by pid (`variables`:
    the vendor's pinning variables a process's environment selects its GPUs with).

    Cheap for the many processes that never matter: one open/read of their environment, and
    a byte search for ``GPUHIVE_SIM_HOST=<host>`` before anything is decoded. A process that
    also names a simulated host's config file (GPUHIVE_SIM_CONFIG) counts only on that host,
    so same-named hosts of two simulated clusters never see each other's processes.
    """
    found: list[RawProcess] = []
    me = os.getpid()
    own_config = os.environ.get(CONFIG_ENV)
    key = HOST_ENV.encode()
    # Bytes every matching environment contains. A host with U+FFFD could match undecodable
    # bytes; one with lone surrogates matches nothing (any needle will do).
    needle = key
    if isinstance(host, str) and "\ufffd" not in host:
        needle = f"{HOST_ENV}={host}".encode(errors="replace")
    for name in os.listdir(proc):
        if not name.isdigit():
            continue
        pid = int(name)
        if pid == me:
            continue
        data = read_file(f"/proc/{pid}/environ")
        if not data or needle not in data:
            continue
        env = _parse_environ(data)
        if env.get(HOST_ENV) != host:
            continue
        theirs = env.get(CONFIG_ENV)
        if own_config and theirs and theirs != own_config:
            continue  # a same-named host of another simulated cluster (e.g. a parallel run)
        placements = placements_of(env, gpus, variables)
        if not placements or comm(pid) in WRAPPERS:
            continue
        mem, util = int_env(env, MEM_ENV), int_env(env, UTIL_ENV)
        if mem is None or util is None:
            default_mem, default_util = default_load(pid)
            mem = default_mem if mem is None else mem
            util = default_util if util is None else util
        pname = process_name(pid)
        if not os.path.exists(f"/proc/{pid}"):
            continue  # exited while we looked
        found.append((pid, pname, placements, mem, min(util, 100)))
    found.sort(key=lambda p: p[0])
    return found


# --- GPU inventory and load -------------------------------------------------------------


def fill_gpu_defaults(gpu: Any) -> None:
    """Fill a GPU's derived defaults (PCI bus id, reserved memory, MIG capability)."""
    if not gpu.pci_bus_id:
        gpu.pci_bus_id = f"00000000:{0x07 + 8 * gpu.index:02X}:00.0"
    if gpu.memory_reserved_mib is None:
        gpu.memory_reserved_mib = gpu.memory_total_mib // 160
    if gpu.mig_capable is None:
        gpu.mig_capable = bool(gpu.mig) or any(model in gpu.name for model in MIG_MODELS)


def free_mib(gpu: Any, used_mib: int) -> int:
    """A GPU's memory neither used nor reserved."""
    result: int = gpu.memory_total_mib - (gpu.memory_reserved_mib or 0) - used_mib
    return result


def gpu_load(gpu: Any, loads: Iterable[tuple[int, int, int | None]]) -> Load:
    """Derive one GPU's readings from its processes' (util %, memory MiB, MIG slice index)."""
    loads = list(loads)
    ghost = gpu.ghost or {}
    util = min(100, sum(u for u, _, _ in loads) + int(ghost.get("util", 0)))
    capacity = gpu.memory_total_mib - (gpu.memory_reserved_mib or 0)
    util_gpu: int | None
    util_mem: int | None
    if gpu.mig_enabled:
        slices = tuple(
            min(mig.memory_total_mib, sum(m for _, m, slot in loads if slot == i))
            for i, mig in enumerate(gpu.mig)
        )
        used = min(capacity, sum(slices))
        util_gpu = util_mem = None
    else:
        slices = ()
        used = BASE_USED_MIB + sum(m for _, m, _ in loads)
        used = min(capacity, used + int(ghost.get("memory_mib", 0)))
        util_gpu, util_mem = util, util // 2
    power: float | None = gpu.idle_power_w + WATTS_PER_UTIL * util
    if gpu.power_limit_w is not None and power is not None:
        power = min(power, gpu.power_limit_w)
    temperature = gpu.temperature_c + round(DEGREES_PER_UTIL * util)
    return util_gpu, util_mem, used, slices, temperature, power
