"""`make demo` (python -m jupyter_gpuhive.demo): it serves, and a SIGTERM leaves nothing behind."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if entry.name.isdigit() and int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_demo_serves_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {
        **os.environ,
        "GPUHIVE_DEMO_DIR": str(tmp_path / "demo"),
        "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
        "JUPYTER_DATA_DIR": str(tmp_path / "data"),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
    }
    token = "demo-test-token"
    demo = subprocess.Popen(
        [sys.executable, "-m", "jupyter_gpuhive.demo", f"--ServerApp.port={port}",
         "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        hosts = None
        while time.monotonic() < deadline and demo.poll() is None:
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/gpuhive/api/hosts",
                headers={"Authorization": f"token {token}"},
            )
            try:
                with urllib.request.urlopen(request, timeout=5) as response:
                    hosts = response.read()
                if b'"util":85' in hosts:  # the demo's load, seen by the monitor
                    break
            except OSError:
                pass
            time.sleep(0.5)
        assert hosts is not None and b'"util":85' in hosts, hosts
        started = children(demo.pid)
        assert len(started) == 3  # JupyterLab and the two load processes
        demo.send_signal(signal.SIGTERM)
        assert demo.wait(timeout=30) == 0
        assert [pid for pid in started if alive(pid)] == []
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(demo.pid, signal.SIGKILL)  # whatever failed, nothing outlives the test
        demo.wait()
