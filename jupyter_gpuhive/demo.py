"""`make demo`: JupyterLab with gpuhive on a simulated 3-host × 4-GPU cluster on localhost.

The hosts use the `local` transport and the project's nvidia-smi stand-in, so monitoring,
jobs and the violation monitor all work on real processes of this machine. A couple of
background "training" processes make the dashboards move (`--no-load` leaves them out).
"""

from __future__ import annotations

import getpass
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from jupyter_core.paths import jupyter_data_dir

from .sim.cluster import LocalSimHost

SIM_ENV = ("PATH", "GPUHIVE_SIM_HOST", "GPUHIVE_SIM_CONFIG")
HOST_NAMES = ("gpu1", "gpu2", "gpu3")


def demo_hosts(root: Path) -> list[LocalSimHost]:
    """Simulated hosts with 4 A100 each, their stand-in installed under `root`."""
    return [LocalSimHost(name, root / "sim" / name) for name in HOST_NAMES]


def host_config(host: LocalSimHost) -> dict[str, Any]:
    """A simulated host as a c.GpuHiveApp.hosts entry (local transport, stand-in env)."""
    env = host.env()
    return {"name": host.name, "address": "localhost", "transport": "local",
            "env": {key: env[key] for key in SIM_ENV}}  # fmt: skip


def write_config(root: Path, hosts: list[LocalSimHost]) -> Path:
    """Write the demo's server config (SQLite store in `root`) and return its path."""
    root.mkdir(parents=True, exist_ok=True)
    config = root / "jupyter_server_config.py"
    user = getpass.getuser()
    config.write_text(
        "# Written by `python -m jupyter_gpuhive.demo`.\n"
        "c = get_config()  # noqa\n"
        f"c.GpuHiveApp.db_url = {('sqlite:///' + str(root / 'gpuhive.sqlite'))!r}\n"
        f"c.GpuHiveApp.hosts = {json.dumps([host_config(h) for h in hosts], indent=2)}\n"
        f"c.GpuHiveApp.admin_users = {{{user!r}}}\n"
        "c.GpuHiveApp.poll_interval = 2.0\n"
        "c.ServerApp.open_browser = False\n"
        f"c.ServerApp.allow_root = {os.geteuid() == 0}\n"
    )
    return config


def start_load(hosts: list[LocalSimHost]) -> list[subprocess.Popen[bytes]]:
    """Two simulated trainings of the current user, so the dashboards show activity."""
    return [
        hosts[0].start_process([0, 1], mem_mib=30_000, util=85),
        hosts[1].start_process([2], mem_mib=12_000, util=40),
    ]


def main() -> None:
    """Start JupyterLab with the demo config; JupyterLab prints the URL with its token."""
    args = [a for a in sys.argv[1:] if a != "--no-load"]
    root = Path(os.environ.get("GPUHIVE_DEMO_DIR", Path(jupyter_data_dir()) / "gpuhive-demo"))
    hosts = demo_hosts(root)
    config = write_config(root, hosts)
    print(f"gpuhive demo: config {config}, store {root / 'gpuhive.sqlite'}")
    print("gpuhive demo: REST API under <URL>/gpuhive/api/ (e.g. /gpuhive/api/hosts)")
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
