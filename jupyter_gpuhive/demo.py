"""`make demo`: JupyterLab with gpuhive on a simulated 3-host × 4-GPU cluster on localhost."""

from __future__ import annotations

import getpass
import json
import os
import sys
from pathlib import Path

from jupyter_core.paths import jupyter_data_dir

DEMO_HOSTS = [
    {
        "name": f"gpu{h}",
        "address": "localhost",
        "transport": "local",
        "gpus": [
            {"index": i, "model": "NVIDIA A100-SXM4-40GB (simulated)", "memory_mib": 40960}
            for i in range(4)
        ],
    }
    for h in (1, 2, 3)
]


def write_config(root: Path) -> Path:
    """Write the demo's server config (SQLite store in `root`) and return its path."""
    root.mkdir(parents=True, exist_ok=True)
    config = root / "jupyter_server_config.py"
    user = getpass.getuser()
    config.write_text(
        "# Written by `python -m jupyter_gpuhive.demo`.\n"
        "c = get_config()  # noqa\n"
        f"c.GpuHiveApp.db_url = {('sqlite:///' + str(root / 'gpuhive.sqlite'))!r}\n"
        f"c.GpuHiveApp.hosts = {json.dumps(DEMO_HOSTS, indent=2)}\n"
        f"c.GpuHiveApp.admin_users = {{{user!r}}}\n"
        "c.ServerApp.open_browser = False\n"
        f"c.ServerApp.allow_root = {os.geteuid() == 0}\n"
    )
    return config


def main() -> None:
    """Start JupyterLab with the demo config; JupyterLab prints the URL with its token."""
    root = Path(os.environ.get("GPUHIVE_DEMO_DIR", Path(jupyter_data_dir()) / "gpuhive-demo"))
    config = write_config(root)
    print(f"gpuhive demo: config {config}, store {root / 'gpuhive.sqlite'}")
    print("gpuhive demo: REST API under <URL>/gpuhive/api/ (e.g. /gpuhive/api/hosts)")
    args = [sys.executable, "-m", "jupyterlab", f"--config={config}", *sys.argv[1:]]
    os.execv(sys.executable, args)  # noqa: S606 - replaces this process, by design


if __name__ == "__main__":
    main()
