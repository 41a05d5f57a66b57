"""The kernel's side of a launch: stale socket directories are swept, live ones are kept."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path

from jupyter_gpuhive.kernels import launch_script


def _socket_dir(pid: int, age: float) -> Path:
    path = Path(tempfile.mkdtemp(prefix="gpuhive-kernel-"))
    (path / "pid").write_text(str(pid))
    then = time.time() - age
    os.utime(path, (then, then))
    return path


def test_sweep_removes_only_old_directories_of_dead_kernels() -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()  # reaped: its pid names no process now
    stale = _socket_dir(dead.pid, age=300)
    fresh = _socket_dir(dead.pid, age=0)  # a restart may be about to reuse it
    alive = _socket_dir(os.getpid(), age=300)
    try:
        launch_script.sweep()
        assert not stale.exists()
        assert fresh.exists() and alive.exists()
    finally:
        for path in (stale, fresh, alive):
            subprocess.run(["rm", "-rf", str(path)], check=False)
