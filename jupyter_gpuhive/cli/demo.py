"""`make demo`: JupyterLab with gpuhive on a simulated 3-host × 4-GPU cluster on localhost.

The hosts use the `local` transport and the project's GPU tool stand-in, so monitoring,
jobs and the violation monitor all work on real processes of this machine. The demo starts
with something to see (demoseed): alice's and bob's bookings this week, one of alice's
running now with a stray process of yours on it (a violation), and a queued job of yours.
Two background "training" processes make the dashboards move; `--no-load` leaves every
process out (and so the violation).
"""

from __future__ import annotations

import asyncio
import getpass
import os
import pprint
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from jupyter_core.paths import jupyter_data_dir

from ..sim.cluster import LocalSimHost
from ..sim.inventory import preset
from .demoseed import SPOILER, sidebar_note

SIM_ENV = ("PATH", "GPUHIVE_SIM_HOST", "GPUHIVE_SIM_CONFIG")
HOST_NAMES = ("gpu1", "gpu2", "gpu3")
SHARED_HOST = "gpu3"  # its GPUs may be booked in shares (docs/how-to/shares.md)
LAYOUTS = ("nvswitch", "nvlink-pairs", "pcie-2numa")  # what each host's `topo -m` prints


def demo_hosts(root: Path) -> list[LocalSimHost]:
    """Simulated hosts with 4 A100 each (NVSwitch, NVLink pairs, PCIe over two NUMA nodes),
    their stand-in installed under `root`."""
    hosts = []
    for name, layout in zip(HOST_NAMES, LAYOUTS, strict=True):
        config = preset("a100x4", name)
        config.topology = layout
        hosts.append(LocalSimHost(name, root / "sim" / name, config))
    return hosts


def host_config(host: LocalSimHost) -> dict[str, Any]:
    """A simulated host as a c.GpuHiveApp.hosts entry (local transport, stand-in env, its
    GPUs declared, so they can be booked before the first sweep; gpu3's are shareable)."""
    env = host.env()
    gpus = [{"index": g.index, "uuid": g.uuid, "model": g.name, "memory_mib": g.memory_total_mib}
            for g in host.config.gpus]  # fmt: skip
    entry: dict[str, Any] = {"name": host.name, "address": "localhost", "transport": "local",
                             "env": {key: env[key] for key in SIM_ENV}, "gpus": gpus}  # fmt: skip
    if host.name == SHARED_HOST:  # only then: the UI tests write these entries as JSON
        entry["shareable"] = True
    return entry


def write_config(root: Path, hosts: list[LocalSimHost]) -> Path:
    """Write the demo's server config (SQLite store in `root`) and return its path."""
    root.mkdir(parents=True, exist_ok=True)
    config = root / "jupyter_server_config.py"
    user = getpass.getuser()
    entries = pprint.pformat([host_config(h) for h in hosts], sort_dicts=False)  # Python
    write_config_text(
        config,
        "# Written by `python -m jupyter_gpuhive.cli.demo`.\n"
        "c = get_config()  # noqa\n"
        f"c.GpuHiveApp.db_url = {('sqlite:///' + str(root / 'gpuhive.sqlite'))!r}\n"
        f"c.GpuHiveApp.hosts = {entries}\n"
        f"c.GpuHiveApp.admin_users = {{{user!r}}}\n"
        "c.GpuHiveApp.poll_interval = 2.0\n"
        "# Violations show in the panel, the dashboard and the history; no terminal messages.\n"
        "c.GpuHiveApp.violation_ladder = [{'after': 0, 'handler': 'event'}]\n"
        "# No-show release: a booking whose owner runs nothing on it within 10 minutes of its\n"
        "# start is announced, and released (its end moves to now) 10 minutes later.\n"
        "c.GpuHiveApp.noshow_after = '10m'\n"
        "c.GpuHiveApp.noshow_release_after = '10m'\n"
        f"c.GpuHiveApp.sidebar_note = {sidebar_note(user)!r}\n"
        "c.ServerApp.open_browser = False\n"
        f"c.ServerApp.allow_root = {os.geteuid() == 0}\n",
    )
    return config


def cli_hint(config: Path) -> str:
    """The start-up line that says how `jupyter gpuhive` commands see the demo's hosts."""
    flag = f"--config {shlex.quote(str(config))}"
    return (
        f"gpuhive demo: the CLI sees these hosts with {flag}, e.g. "
        f"`jupyter gpuhive hosts {flag}`, `jupyter gpuhive doctor {flag}`, "
        f"`jupyter gpuhive sim fail gpu2:1 {flag}` and `jupyter gpuhive sim recover gpu2:1 {flag}`"
    )


def write_config_text(path: Path, text: str) -> None:
    """Write a server config as a secret file (0600 from its first byte)."""
    from ..hosts.secretfiles import write_secret

    write_secret(path, text.encode(), replace=True)


def seed_store(config: Path) -> dict[str, Any]:
    """Open the demo's store as the server will and add alice's, bob's and the queued job."""
    from traitlets.config.loader import PyFileConfigLoader

    from ..hive import Hive
    from ..server.app import GpuHiveApp
    from .demoseed import seed

    loaded = PyFileConfigLoader(config.name, path=str(config.parent)).load_config()
    app = GpuHiveApp(config=loaded)
    hive = Hive(app.settings_for_hive(), publish=lambda _event: None).open()
    try:
        return asyncio.run(seed(hive, getpass.getuser()))
    finally:
        hive.close()


def start_load(hosts: list[LocalSimHost]) -> list[subprocess.Popen[bytes]]:
    """Two simulated trainings of the current user, so the dashboards show activity, and a
    stray process of theirs on a GPU alice holds (the violation)."""
    spoiler_host, spoiler_gpu = SPOILER.split(":")
    stray = next(h for h in hosts if h.name == spoiler_host)
    day = ("sleep", "86400")  # as long as a demo lasts (the demo ends them when it stops)
    return [
        hosts[0].start_process([0, 1], mem_mib=30_000, util=85, command=day),
        hosts[1].start_process([2], mem_mib=12_000, util=40, command=day),
        stray.start_process([int(spoiler_gpu)], mem_mib=3_000, util=15, command=day),
    ]


def main() -> None:
    """Start JupyterLab with the demo config; JupyterLab prints the URL with its token."""
    args = [a for a in sys.argv[1:] if a != "--no-load"]
    root = Path(os.environ.get("GPUHIVE_DEMO_DIR", Path(jupyter_data_dir()) / "gpuhive-demo"))
    hosts = demo_hosts(root)
    config = write_config(root, hosts)
    seeded = seed_store(config)
    print(f"gpuhive demo: config {config}, store {root / 'gpuhive.sqlite'}")
    print(f"gpuhive demo: added {len(seeded['reservations'])} reservations of alice and bob"
          f"{' and a queued job' if seeded['job'] else ''}")  # fmt: skip
    print("gpuhive demo: REST API under <URL>/gpuhive/api/ (e.g. /gpuhive/api/hosts)")
    print(cli_hint(config))
    load = [] if "--no-load" in sys.argv else start_load(hosts)
    try:
        lab = subprocess.Popen([sys.executable, "-m", "jupyterlab", f"--config={config}", *args])
        # SIGTERM (`timeout`, a container stopping, Binder) stops JupyterLab as it stops
        # itself: kernels and the sampler shut down, then the load goes.
        signal.signal(signal.SIGTERM, lambda *_: lab.send_signal(signal.SIGTERM))
        while lab.poll() is None:
            try:
                lab.wait()
            except KeyboardInterrupt:
                continue  # JupyterLab has the Ctrl-C too: it asks, or stops, by itself
    finally:
        for process in load:
            process.kill()
            process.wait()


if __name__ == "__main__":
    main()
