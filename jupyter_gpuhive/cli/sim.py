"""`jupyter gpuhive sim up|down`: a simulated GPU workstation (or lab) on any machine.

`sim up` installs the project's GPU tool stand-in (sim/) for a few simulated hosts under the
Jupyter data directory (`gpuhive-sim/`) and writes them to the hosts file as `local` hosts
whose `env` carries what the stand-in needs (its PATH, GPUHIVE_SIM_HOST, GPUHIVE_SIM_CONFIG):
a running server sweeps them within one poll interval, and every command gpuhive runs there
(jobs, kernels) sees the simulated GPUs. Processes pinned to its GPUs (the vendor's variable)
on such a host (a job, a kernel on a reservation) show as GPU processes. `sim down` takes them
out of the hosts file again and removes the folder; their reservations and history stay.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

from jupyter_core.paths import jupyter_data_dir
from traitlets import Bool, Int, Unicode

from ..errors import Invalid
from .base import _Base
from .hosts import reload_note

SIM_DIR = "gpuhive-sim"
SIM_ENV = ("PATH", "GPUHIVE_SIM_HOST", "GPUHIVE_SIM_CONFIG")
LAYOUTS = ("nvswitch", "nvlink-pairs", "pcie-2numa")  # cycled over the hosts, as in the demo
MAX_GPUS = 16
MAX_HOSTS = 16


def sim_root() -> Path:
    """Where the simulated hosts live: gpuhive-sim/ in the Jupyter data directory."""
    return Path(jupyter_data_dir()) / SIM_DIR


def host_names(count: int) -> list[str]:
    """The simulated hosts' names: sim1, sim2, …"""
    return [f"sim{i}" for i in range(1, count + 1)]


def sim_config(name: str, gpus: int, mig: bool, amd: bool = False) -> Any:
    """A simulated host with `gpus` A100s; with `mig`, GPU 0 is split into three MIG slices;
    with `amd`, MI300X GPUs read through the amd-smi stand-in (vendor amd)."""
    from ..sim.inventory import SimGpu, SimHostConfig, SimMig, make_uuid, preset

    if amd:  # ROCm's UUIDs and the MI300X's figures, as the preset has them
        config = preset("mi300x", name)
        config.gpus = [
            SimGpu(i, "GPU-" + make_uuid(name, "GPU", i)[4:].replace("-", "")[:16],
                   "AMD Instinct MI300X", 196592, idle_power_w=140.0, power_limit_w=750.0)
            for i in range(gpus)
        ]  # fmt: skip
        return config

    model, memory = ("NVIDIA A100-SXM4-80GB", 81920) if mig else ("NVIDIA A100-SXM4-40GB", 40960)
    cards = [SimGpu(i, make_uuid(name, "GPU", i), model, memory) for i in range(gpus)]
    if mig:
        cards[0].mig = [
            SimMig("3g.40gb", make_uuid(name, "MIG", 0), 40192, 1, 0, 42),
            SimMig("2g.20gb", make_uuid(name, "MIG", 1), 19968, 5, 0, 28),
            SimMig("1g.10gb", make_uuid(name, "MIG", 2), 9728, 13, 0, 14),
        ]
    config = SimHostConfig(name, cards, "550.90.07", "12.4")
    index = int(name.removeprefix("sim")) - 1
    if gpus % 2 == 0 and gpus <= 8:
        config.topology = LAYOUTS[index % len(LAYOUTS)]
    return config


def host_entry(name: str, root: Path, gpus: int, mig: bool, amd: bool = False) -> dict[str, Any]:
    """Install one simulated host under `root` and return its hosts-file entry."""
    from ..sim.cluster import LocalSimHost

    host = LocalSimHost(name, root / name, sim_config(name, gpus, mig, amd))
    env = host.env({})
    entry: dict[str, Any] = {"name": name, "transport": "local", "address": "localhost",
                             "env": {key: env[key] for key in SIM_ENV}}  # fmt: skip
    if amd:
        entry["vendor"] = "amd"
    if not mig:  # declared, so they can be booked before the first sweep
        entry["gpus"] = [{"index": g.index, "uuid": g.uuid, "model": g.name,
                          "memory_mib": g.memory_total_mib} for g in host.config.gpus]  # fmt: skip
    return entry


def is_simulated(entry: Any, root: Path) -> bool:
    """Whether a hosts-file entry is one that `sim up` wrote (its stand-in lives in `root`)."""
    env = entry.get("env") if isinstance(entry, dict) else None
    config = env.get("GPUHIVE_SIM_CONFIG") if isinstance(env, dict) else None
    return isinstance(config, str) and Path(config).is_relative_to(root)


class SimUpApp(_Base):
    """Simulate GPU hosts on this machine: sim up [--gpus 4] [--hosts 1] [--mig]."""

    name = "jupyter-gpuhive-sim-up"
    description = __doc__
    examples = """
jupyter gpuhive sim up
jupyter gpuhive sim up --gpus 8 --hosts 2 --mig
jupyter gpuhive sim up --amd
"""
    gpus = Int(4, help=f"GPUs per simulated host (1 to {MAX_GPUS}).").tag(config=True)
    hosts = Int(1, help=f"How many simulated hosts (1 to {MAX_HOSTS}).").tag(config=True)
    mig = Bool(False, help="Split GPU 0 of each host into three MIG slices.").tag(config=True)
    amd = Bool(False, help="Simulate AMD MI300X GPUs (vendor amd, amd-smi).").tag(config=True)
    aliases = {"gpus": "SimUpApp.gpus", "hosts": "SimUpApp.hosts"}
    flags = {
        "mig": ({"SimUpApp": {"mig": True}}, "Split GPU 0 of each host into MIG slices."),
        "amd": ({"SimUpApp": {"amd": True}}, "Simulate AMD MI300X GPUs (ROCm, amd-smi)."),
    }

    def start(self) -> None:
        from ..hosts.file import add_host, read_hosts, write_hosts
        from .localhost import keep_local_host

        wrong = self.extra_args or (self.mig and self.amd)
        if wrong or not 1 <= self.gpus <= MAX_GPUS or not 1 <= self.hosts <= MAX_HOSTS:
            print(
                f"Usage: jupyter gpuhive sim up [--gpus N] [--hosts N] [--mig | --amd]\n"
                f"       (--gpus 1 to {MAX_GPUS}, --hosts 1 to {MAX_HOSTS})",
                file=sys.stderr,
            )
            sys.exit(1)
        app = self.gpuhive()
        path, root = app.hosts_file_path(), sim_root()
        names = host_names(self.hosts)
        try:
            current = read_hosts(path)
            configured = {str(h.get("name")) for h in app.hosts if isinstance(h, dict)}
            taken = sorted(
                {str(h.get("name")) for h in current if not is_simulated(h, root)} | configured
            )
            clash = [n for n in names if n in taken]
            if clash:
                raise Invalid(f"a host named {clash[0]} is already configured (not simulated).")
            kept = keep_local_host(app, path)
            simulated = [h for h in read_hosts(path) if is_simulated(h, root)]
            if simulated:  # a second `sim up` replaces the first
                write_hosts(path, [h for h in read_hosts(path) if not is_simulated(h, root)])
                shutil.rmtree(root, ignore_errors=True)
            for name in names:
                add_host(path, host_entry(name, root, self.gpus, self.mig, self.amd))
        except (Invalid, OSError) as error:
            message = error.message if isinstance(error, Invalid) else str(error)
            print(f"Not simulated: {message}", file=sys.stderr)
            sys.exit(1)
        if kept:
            print(kept)
        model = "MI300X" if self.amd else "A100"
        each = f"{self.gpus} simulated {model} GPU{'s' if self.gpus != 1 else ''}"
        mig = " (GPU 0 split into 3 MIG slices)" if self.mig else ""
        replaced = " (replacing the earlier ones)" if simulated else ""
        print(f"Added {', '.join(names)} to {path}{replaced}: {each} each{mig}.")
        print(f"Their GPU tool stand-in lives in {root}.")
        print(reload_note(app))
        print("Start JupyterLab (`jupyter lab`) and open the GPU sidebar; "
              "`jupyter gpuhive sim down` removes them again.")  # fmt: skip


class SimDownApp(_Base):
    """Remove the simulated hosts of `sim up` (their reservations and history stay)."""

    name = "jupyter-gpuhive-sim-down"
    description = __doc__
    examples = """
jupyter gpuhive sim down
"""

    def start(self) -> None:
        from ..hosts.file import read_hosts, write_hosts

        if self.extra_args:
            print("Usage: jupyter gpuhive sim down", file=sys.stderr)
            sys.exit(1)
        app = self.gpuhive()
        path, root = app.hosts_file_path(), sim_root()
        try:
            hosts = read_hosts(path)
            gone = [str(h["name"]) for h in hosts if is_simulated(h, root)]
            if gone:
                write_hosts(path, [h for h in hosts if not is_simulated(h, root)])
        except Invalid as error:
            print(f"Not removed: {error.message}", file=sys.stderr)
            sys.exit(1)
        shutil.rmtree(root, ignore_errors=True)
        if not gone:
            print(f"No simulated hosts in {path}; nothing to remove.")
            return
        print(f"Removed {', '.join(gone)} from {path}; their reservations and history stay.")
        print(reload_note(app))


class SimFailApp(_Base):
    """Make a simulated GPU fail its health check: sim fail HOST:INDEX [--fault ecc]."""

    name = "jupyter-gpuhive-sim-fail"
    description = __doc__
    examples = """
jupyter gpuhive sim fail sim1:2
jupyter gpuhive sim fail gpu2:1 --fault lost --config DEMO_DIR/jupyter_server_config.py
"""
    fault = Unicode(
        "ecc", help="The failure: ecc, retired, remapped, thermal, lost or xid (see sim/health.py)."
    ).tag(config=True)
    aliases = {"fault": "SimFailApp.fault"}
    usage = "Usage: jupyter gpuhive sim fail HOST:INDEX [--fault ecc] [--config PATH]"
    done = "{ref} now fails its health check ({fault}); gpuhive sees it at its next sweep."

    def start(self) -> None:
        if len(self.extra_args) != 1:
            print(self.usage, file=sys.stderr)
            sys.exit(1)
        try:
            ref = set_fault(self, self.extra_args[0], self.fault or None)
        except Invalid as error:
            print(f"Not changed: {error.message}", file=sys.stderr)
            sys.exit(1)
        print(self.done.format(ref=ref, fault=self.fault))


class SimRecoverApp(SimFailApp):
    """Make a simulated GPU healthy again: sim recover HOST:INDEX."""

    name = "jupyter-gpuhive-sim-recover"
    description = __doc__
    examples = """
jupyter gpuhive sim recover sim1:2
"""
    fault = Unicode("")
    aliases: dict[str, Any] = {}
    usage = "Usage: jupyter gpuhive sim recover HOST:INDEX [--config PATH]"
    done = "{ref} is healthy again; gpuhive takes bookings on it from its next sweep."


def set_fault(command: _Base, ref: str, fault: str | None) -> str:
    """Give the simulated GPU `ref` ('host:index') a failure preset (None: healthy); Invalid
    when it names no simulated GPU of the configured hosts."""
    from ..sim.inventory import SimConfigError, set_gpu_fault

    host, _, index = ref.partition(":")
    if not index.isdigit():
        raise Invalid(f"{ref!r} is not a GPU: write host:index, e.g. sim1:2.")
    specs = {str(h.get("name")): h for h in command.gpuhive().all_host_specs()}
    if host not in specs:
        known = ", ".join(sorted(specs)) or "none"
        raise Invalid(f"there is no host {host!r} (the configured hosts: {known}); a demo's "
                      "hosts need its --config PATH.")  # fmt: skip
    config = (specs[host].get("env") or {}).get("GPUHIVE_SIM_CONFIG")
    if not config:
        raise Invalid(f"{host} is not a simulated host (`jupyter gpuhive sim up` makes some).")
    try:
        set_gpu_fault(config, int(index), fault)
    except (SimConfigError, OSError) as error:
        raise Invalid(f"{ref}: {error}.") from None
    return ref


class SimApp(_Base):
    """Simulated GPU hosts to try gpuhive without GPUs: `sim up`, `sim down`, and
    `sim fail` / `sim recover` to make one of their GPUs fail its health check and heal."""

    name = "jupyter-gpuhive-sim"
    description = __doc__
    examples = """
jupyter gpuhive sim up --gpus 4
jupyter gpuhive sim fail sim1:2
jupyter gpuhive sim recover sim1:2
jupyter gpuhive sim down
"""
    subcommands = {
        "up": (SimUpApp, SimUpApp.__doc__),
        "down": (SimDownApp, SimDownApp.__doc__),
        "fail": (SimFailApp, SimFailApp.__doc__),
        "recover": (SimRecoverApp, SimRecoverApp.__doc__),
    }

    def start(self) -> None:
        if self.subapp is None:
            print("Usage: jupyter gpuhive sim up [--gpus N] [--hosts N] [--mig] | sim down | "
                  "sim fail HOST:INDEX [--fault ecc] | sim recover HOST:INDEX",
                  file=sys.stderr)  # fmt: skip
            sys.exit(1)
        self.subapp.start()
