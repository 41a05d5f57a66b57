"""The kernel's side of a launch: stale socket directories are swept, live ones are kept."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path

from jupyter_gpuhive.kernels import launch, launch_script
from jupyter_gpuhive.model import HostDecl


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


def _resolve(python: str, path: str, home: str) -> str:
    """$PY as the launch command sets it, in a shell with PATH `path` and HOME `home`."""
    script = f'{launch.python_command(python)}; printf %s "$PY"'
    env = {"PATH": f"{path}:/usr/bin:/bin", "HOME": home}
    return subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True,
                          check=True).stdout  # fmt: skip


def test_kernel_python_is_a_path_or_a_conda_environment(tmp_path: Path) -> None:
    base, home, bin_dir = tmp_path / "conda", tmp_path / "home", tmp_path / "bin"
    for folder in (base / "envs" / "ml" / "bin", base / "bin", home / ".conda" / "envs" / "mine"
                   / "bin", bin_dir):  # fmt: skip
        folder.mkdir(parents=True)
    for python in (base / "envs" / "ml" / "bin" / "python", base / "bin" / "python",
                   home / ".conda" / "envs" / "mine" / "bin" / "python"):  # fmt: skip
        python.write_text("#!/bin/sh\n")
        python.chmod(0o755)
    conda = bin_dir / "conda"  # answers `conda info --base` as conda does
    conda.write_text(f'#!/bin/sh\n[ "$1 $2" = "info --base" ] && echo {base}\n')
    conda.chmod(0o755)
    where = (str(bin_dir), str(home))
    assert _resolve("/opt/py/bin/python", *where) == "/opt/py/bin/python"
    assert _resolve("ml", *where) == f"{base}/envs/ml/bin/python"
    assert _resolve("base", *where) == f"{base}/bin/python"
    assert _resolve("mine", *where) == f"{home}/.conda/envs/mine/bin/python"
    assert _resolve("nope", *where) == "nope"  # then `[ -x "$PY" ]` fails: no-python
    assert _resolve("conda", *where) == str(conda)  # no such env: a command on PATH
    assert _resolve("it's; rm -rf x", *where) == "it's; rm -rf x"  # quoted, never run


def test_failures_name_the_host_and_the_fix() -> None:
    host = HostDecl("gpu7", transport="local")
    conda = launch.Launch(host, "alice", "ml", {}, "k", "hmac-sha256")
    said = launch.describe_failure("no-ipykernel", conda, "")
    assert "on gpu7" in said and "`conda install -n ml ipykernel`" in said, said
    command = launch.Launch(host, "alice", "python3", {}, "k", "hmac-sha256")
    said = launch.describe_failure("no-ipykernel", command, "", "/usr/bin/python3")
    assert "`/usr/bin/python3 -m pip install ipykernel`" in said, said
    path = launch.Launch(host, "alice", "/opt/py/bin/python", {}, "k", "hmac-sha256")
    said = launch.describe_failure("no-python", path, "")
    assert "gpu7" in said and "/opt/py/bin/python does not exist there" in said, said
