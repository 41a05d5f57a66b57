"""Find the real processes that sit on simulated GPUs, by reading /proc.

A process is on a simulated host's GPUs when its environment (``/proc/PID/environ``, i.e. the
environment it was started with) carries ``GPUHIVE_SIM_HOST=<host>`` and a non-empty
``CUDA_VISIBLE_DEVICES``. Entries are read as CUDA does: indices, ``GPU-…`` UUIDs (unique prefixes
allowed) or ``MIG-…`` UUIDs, comma separated; reading stops at the first entry that names no
device. ``CUDA_DEVICE_ORDER`` is ignored: index N is the host's GPU N (on a MIG-enabled GPU, its
first slice). Shells and process wrappers (bash, screen, env, …) never count: they would not open
a CUDA context.

Limit: ``/proc/PID/environ`` is readable only by the process owner and root. Run as another user,
the stand-in skips processes whose environment it cannot read, as an unprivileged monitoring
account would then miss them; monitor as root (or as the owner) to see every process.

Standard library only: the ``nvidia-smi`` stand-in imports this on every call.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .inventory import HOST_ENV, MEM_ENV, UTIL_ENV, SimGpu, SimHostConfig

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
    }
)


@dataclass(frozen=True)
class Placement:
    """Where a process sits: a physical GPU and, with MIG, one of its slices."""

    gpu_index: int
    mig_index: int | None = None


@dataclass(frozen=True)
class SimProcess:
    """A real process seen as a GPU process: its pid, name, placements and load per GPU."""

    pid: int
    name: str
    placements: tuple[Placement, ...]
    used_memory_mib: int
    util_pct: int


def parse_visible_devices(value: str, gpus: list[SimGpu]) -> tuple[Placement, ...]:
    """Map a CUDA_VISIBLE_DEVICES value to placements on `gpus`, the way CUDA reads it."""
    placements: list[Placement] = []
    for raw in value.split(","):
        entry = raw.strip()
        found = _lookup(entry, gpus)
        if found is None:
            break
        if found not in placements:
            placements.append(found)
    return tuple(placements)


def _lookup(entry: str, gpus: list[SimGpu]) -> Placement | None:
    """The placement one CUDA_VISIBLE_DEVICES entry names, or None when it names none."""
    if entry.isdigit():
        for gpu in gpus:
            if gpu.index == int(entry):
                return Placement(gpu.index, 0 if gpu.mig_enabled else None)
        return None
    if entry.startswith("GPU-"):
        hits = [gpu for gpu in gpus if gpu.uuid.startswith(entry)]
        if len(hits) == 1:
            return Placement(hits[0].index, 0 if hits[0].mig_enabled else None)
        return None
    if entry.startswith("MIG-"):
        for gpu in gpus:
            for i, mig in enumerate(gpu.mig):
                if mig.uuid == entry:
                    return Placement(gpu.index, i)
    return None


def _read_environ(pid: int) -> dict[str, str] | None:
    """The start-up environment of a process, or None when unreadable or gone."""
    try:
        data = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    if HOST_ENV.encode() not in data:
        return {}
    env: dict[str, str] = {}
    for item in data.split(b"\0"):
        key, sep, val = item.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = val.decode(errors="replace")
    return env


def _process_name(pid: int) -> str:
    """argv[0] of a process (as nvidia-smi shows it), else its comm."""
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0]
        if argv0:
            return argv0.decode(errors="replace")
    except OSError:
        pass
    return _comm(pid)


def _comm(pid: int) -> str:
    """The kernel's short name of a process."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _default_load(pid: int) -> tuple[int, int]:
    """Plausible GPU memory (MiB) and utilization (%) from a process's RSS and CPU use."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        rss_pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return 256, 0
    after_comm = stat.rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu_s = (int(after_comm[11]) + int(after_comm[12])) / ticks
    started_s = int(after_comm[19]) / ticks
    uptime_s = float(Path("/proc/uptime").read_text().split()[0])
    age_s = max(uptime_s - started_s, 0.01)
    rss_mib = rss_pages * os.sysconf("SC_PAGE_SIZE") // (1024 * 1024)
    return 256 + 8 * rss_mib, min(100, round(100 * cpu_s / age_s))


def _int_env(env: dict[str, str], name: str) -> int | None:
    """An integer from the environment, or None when absent or not a number."""
    try:
        return max(0, int(env[name]))
    except (KeyError, ValueError):
        return None


def scan(config: SimHostConfig, proc: Path = Path("/proc")) -> list[SimProcess]:
    """All readable processes on `config`'s simulated GPUs, sorted by pid."""
    found: list[SimProcess] = []
    me = os.getpid()
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        pid = int(entry.name)
        env = _read_environ(pid)
        if not env or env.get(HOST_ENV) != config.host:
            continue
        placements = parse_visible_devices(env.get("CUDA_VISIBLE_DEVICES", ""), config.gpus)
        if not placements or _comm(pid) in WRAPPERS:
            continue
        mem, util = _int_env(env, MEM_ENV), _int_env(env, UTIL_ENV)
        if mem is None or util is None:
            default_mem, default_util = _default_load(pid)
            mem = default_mem if mem is None else mem
            util = default_util if util is None else util
        name = _process_name(pid)
        if not Path(f"/proc/{pid}").exists():
            continue  # exited while we looked
        found.append(SimProcess(pid, name, placements, mem, min(util, 100)))
    return sorted(found, key=lambda p: p.pid)
