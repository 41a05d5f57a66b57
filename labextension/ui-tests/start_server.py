"""Start JupyterLab with jupyter-gpuhive for the UI tests (Playwright's webServer runs this).

Everything lives in a temporary directory: the server config (two simulated GPU hosts on
the local transport with the nvidia-smi stand-in, SQLite store), JupyterLab's settings and
workspaces, the notebooks, and a labextensions folder that points at the freshly built extension in
`jupyter_gpuhive/labextension` (so the tests use the build, whatever is installed).

`start_server.py zeroconf` starts a server with no gpuhive configuration at all and an
`nvidia-smi` on PATH that answers for a simulated 4-GPU machine (a GPU workstation's first
start); `start_server.py empty` one with no gpuhive configuration and no nvidia-smi (port from
GPUHIVE_UI_PORT_ZERO / GPUHIVE_UI_PORT_EMPTY).

`start_server.py demo` is `make demo` itself (its 3 hosts x 4 GPUs, alice's and bob's bookings, the
violation, the queued job, the load), for the token's user named as this machine's user (the
demo's admin); `start_server.py wide` the same with 5 more hosts: 32 GPUs. The sidebar-at-size
spec (scale.spec.ts) starts and stops these itself, on GPUHIVE_UI_PORT_SCALE.
"""

from __future__ import annotations

import getpass
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUILD = HERE.parent.parent / "jupyter_gpuhive" / "labextension"
# Notebooks the widget tests run, copied into the server's root folder.
NOTEBOOKS = [
    HERE.parent.parent / "examples" / "quickstart.ipynb",
    *sorted((HERE / "notebooks").glob("*.ipynb")),
]
SIM_NOTE = "UI tests: gpu1 and gpu2 are simulated hosts on this machine."
MODE = sys.argv[1] if len(sys.argv) > 1 else "sim"
PORT = int(
    {"sim": os.environ.get("GPUHIVE_UI_PORT", "18765"),
     "zeroconf": os.environ.get("GPUHIVE_UI_PORT_ZERO", "18766"),
     "empty": os.environ.get("GPUHIVE_UI_PORT_EMPTY", "18767"),
     "demo": os.environ.get("GPUHIVE_UI_PORT_SCALE", "18768"),
     "wide": os.environ.get("GPUHIVE_UI_PORT_SCALE", "18768")}[MODE]
)  # fmt: skip
TOKEN = os.environ.get("GPUHIVE_UI_TOKEN", "gpuhive-ui-test-token")
BOB_TOKEN = os.environ.get("GPUHIVE_UI_BOB_TOKEN", "gpuhive-ui-test-bob")
ADMIN_TOKEN = os.environ.get("GPUHIVE_UI_ADMIN_TOKEN", "gpuhive-ui-test-ada")  # ada, an admin


def sim_hosts(root: Path) -> list[dict[str, object]]:
    """gpu1 (4 GPUs) and gpu2 (2 GPUs): simulated hosts on the local transport whose
    nvidia-smi stand-in reports metrics, as `make demo`'s do; gpu2:1 is shareable."""
    from jupyter_gpuhive.cli.demo import host_config
    from jupyter_gpuhive.sim.cluster import LocalSimHost
    from jupyter_gpuhive.sim.inventory import SimGpu, SimHostConfig, make_uuid

    hosts = []
    for name, count in (("gpu1", 4), ("gpu2", 2)):
        gpus = [SimGpu(i, make_uuid(name, "GPU", i), "NVIDIA A100-SXM4-40GB", 40960)
                for i in range(count)]  # fmt: skip
        # 590: a driver whose --query-gpu knows remapped_rows.*, which health.spec.ts sets failing
        config = SimHostConfig(name, gpus, "590.48.01", "13.1")
        entry = host_config(LocalSimHost(name, root / "sim" / name, config))
        if name == "gpu2":  # gpu2:1 may be booked in shares (#44); booked whole, it is any GPU
            entry["gpus"][1]["shareable"] = True
        if name == "gpu1":  # host group 'lab', administered by the token's user (approvals.spec)
            entry["group"] = "lab"
        hosts.append(entry)
    return hosts


def driver_bin(root: Path) -> Path:
    """A folder with an `nvidia-smi` that answers, with no environment of its own, for a
    simulated 4-GPU machine (as a real driver's does)."""
    from jupyter_gpuhive.hosts.config import local_host_name
    from jupyter_gpuhive.sim.cluster import LocalSimHost

    name = local_host_name()
    sim = LocalSimHost(name, root / "sim" / name)
    folder = root / "driver-bin"
    folder.mkdir()
    config = sim.env({})["GPUHIVE_SIM_CONFIG"]
    script = folder / "nvidia-smi"
    script.write_text(
        f"#!/bin/sh\nGPUHIVE_SIM_CONFIG='{config}' GPUHIVE_SIM_HOST='{name}' "
        f"exec '{sim.bin_dir / 'nvidia-smi'}' \"$@\"\n"
    )
    script.chmod(0o755)
    return folder


def demo_config(root: Path) -> tuple[str, list[subprocess.Popen[bytes]]]:
    """`make demo`'s config, store and load (demo mode; wide: 5 more hosts, 32 GPUs in all)."""
    from jupyter_gpuhive.cli import demo
    from jupyter_gpuhive.sim.cluster import LocalSimHost
    from jupyter_gpuhive.sim.inventory import preset

    hosts = demo.demo_hosts(root)
    if MODE == "wide":
        hosts += [LocalSimHost(f"gpu{i}", root / "sim" / f"gpu{i}", preset("a100x4", f"gpu{i}"))
                  for i in range(4, 9)]  # fmt: skip
    config = demo.write_config(root / "demo", hosts)
    demo.seed_store(config)
    text = config.read_text().replace("c = get_config()  # noqa\n", "")
    if MODE == "wide":
        text += "c.GpuHiveApp.poll_interval = 5.0\n"  # 8 probe loops on a small machine
    return text, demo.start_load(hosts)


def gpuhive_config(root: Path) -> str:
    """The gpuhive part of the server config: none at all, except in the simulated mode."""
    if MODE != "sim":
        return ""
    return (
        f"c.GpuHiveApp.db_url = {'sqlite:///' + str(root / 'gpuhive.sqlite')!r}\n"
        f"c.GpuHiveApp.hosts = {sim_hosts(root)!r}\n"  # Python: its `shareable` is True
        f"c.GpuHiveApp.sidebar_note = {SIM_NOTE!r}\n"
        # Violations reach the Lab only (no terminal messages on this machine), and their event
        # repeats every 2 s instead of every minute, so a spec sees several within seconds.
        "c.GpuHiveApp.violation_ladder = [{'after': 0, 'handler': 'event'}]\n"
        "c.GpuHiveApp.violation_handlers = {'event': {'interval': 2}}\n"
        "c.GpuHiveApp.admin_users = {'ada'}\n"
        # Approvals (#46): bookings of more than 3 GPUs on gpu1 wait for its group's
        # administrator, the token's user (approvals.spec.ts); its own bookings never wait.
        f"c.GpuHiveApp.host_groups = {{'lab': {{'admins': [{getpass.getuser()!r}]}}}}\n"
        "c.GpuHiveApp.approvals = {'gpu1': {'gpus': 3}}\n"
    )


def main() -> None:
    if not (BUILD / "package.json").exists():
        sys.exit(f"no built extension in {BUILD}: run `jlpm build:prod` in labextension/")
    # Playwright kills the server, so nothing cleans up after it: remove old runs' folders.
    tmp = Path(tempfile.gettempdir())
    for old in tmp.glob("gpuhive-ui-*"):
        if old.is_dir() and time.time() - old.stat().st_mtime > 3600:
            shutil.rmtree(old, ignore_errors=True)
    root = Path(tempfile.mkdtemp(prefix=f"gpuhive-ui-{MODE}-"))
    exts = root / "labextensions"
    exts.mkdir()
    (exts / "jupyter-gpuhive").symlink_to(BUILD, target_is_directory=True)
    notebooks = root / "notebooks"
    notebooks.mkdir()
    for notebook in NOTEBOOKS:
        shutil.copy(notebook, notebooks / notebook.name)
    # Its own copy for the Notebook 7 spec: a notebook the Lab spec ran (and may have saved)
    # would open with its cells already numbered.
    shutil.copy(NOTEBOOKS[0], notebooks / "quickstart-nb7.ipynb")
    # No news/update prompts over the panel.
    settings = root / "settings"
    (settings / "@jupyterlab" / "apputils-extension").mkdir(parents=True)
    (
        settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    ).write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    # Notebooks: every cell attached to the DOM (no virtualised cells), so widget outputs render
    # at once, and the notebook's own kernel started without the "Select Kernel" dialog (which
    # JupyterLab shows now and then when a notebook opens, and which swallows a Run All).
    (settings / "@jupyterlab" / "notebook-extension").mkdir(parents=True)
    (settings / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings").write_text(
        json.dumps({"windowingMode": "none", "autoStartDefaultKernel": True})
    )
    demo, load = demo_config(root) if MODE in ("demo", "wide") else ("", [])
    # In the demo, the token's user is this machine's user, as in `make demo`: its admin.
    me = f"{TOKEN!r}: {{'name': {getpass.getuser()!r}, 'groups': []}}, " if demo else ""
    config = root / "jupyter_server_config.py"
    config.write_text(
        "c = get_config()  # noqa\n"
        + (demo or gpuhive_config(root))
        + "c.ServerApp.identity_provider_class = "
        "'jupyter_gpuhive.auth.TokenUsersIdentityProvider'\n"
        f"c.TokenUsersIdentityProvider.users = {{{me}"
        f"{BOB_TOKEN!r}: {{'name': 'bob', 'groups': []}}, "
        f"{ADMIN_TOKEN!r}: {{'name': 'ada', 'groups': []}}}}\n"
        f"c.IdentityProvider.token = {TOKEN!r}\n"
        "c.ServerApp.allow_root = True\n"
        "c.ServerApp.open_browser = False\n"
        "c.ServerApp.ip = '127.0.0.1'\n"
        f"c.ServerApp.port = {PORT}\n"
        "c.ServerApp.port_retries = 0\n"
        f"c.ServerApp.root_dir = {str(notebooks)!r}\n"
        f"c.LabServerApp.extra_labextensions_path = [{str(exts)!r}]\n"
        f"c.LabApp.user_settings_dir = {str(settings)!r}\n"
        f"c.LabApp.workspaces_dir = {str(root / 'workspaces')!r}\n"
    )
    log = HERE / "artifacts" / ("server.log" if MODE == "sim" else f"server-{MODE}.log")
    log.parent.mkdir(parents=True, exist_ok=True)
    print(f"gpuhive UI tests: server files in {root}, log in {log}", flush=True)
    # Where this server's files are, for specs that run the real CLI against it.
    (HERE / "artifacts" / f"server-{MODE}.dir").write_text(str(root))
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(out, 1)
    os.dup2(out, 2)
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(root / "config"),
        "JUPYTER_DATA_DIR": str(root / "data"),
        # Kernels (so the calendar's local days) in UTC, like the browser in widgets.spec.ts.
        "TZ": "UTC",
    }
    # No nvidia-smi on PATH, except the stand-in of the zero-config mode.
    path = [
        p for p in env.get("PATH", "").split(os.pathsep) if not (Path(p) / "nvidia-smi").exists()
    ]
    if MODE == "zeroconf":
        path.insert(0, str(driver_bin(root)))
    env["PATH"] = os.pathsep.join(path)
    args = [sys.executable, "-m", "jupyterlab", f"--config={config}"]
    if not load:
        os.execve(sys.executable, args, env)  # noqa: S606
    # The demo's load runs in sessions of its own: ended here when JupyterLab stops (SIGTERM).
    lab = subprocess.Popen(args, env=env)
    signal.signal(signal.SIGTERM, lambda *_: lab.send_signal(signal.SIGTERM))
    try:
        lab.wait()
    finally:
        for process in load:
            process.kill()
            process.wait()


if __name__ == "__main__":
    main()
