"""The test kernels' interpreter is probed as the kernel will run it, not as the test process runs.

pytest-jupyter puts the whole `sys.path` of the test process into PYTHONPATH, so a probe that
inherits the caller's environment finds the project venv's packages in any interpreter.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_gpuhive.sim.users import ensure_user
from tests.support import kernel_python


@pytest.fixture
def bare_venv() -> Iterator[Path]:
    """A venv with nothing installed in it, readable by every user (so not under pytest's
    0700 temporary directory), removed afterwards."""
    home = Path(tempfile.mkdtemp(prefix="gpuhive-bare-venv-", dir="/var/tmp"))
    try:
        subprocess.run([kernel_python._base(), "-I", "-m", "venv", "--without-pip", str(home)],
                       env=kernel_python.PROBE_ENV, check=True)  # fmt: skip
        kernel_python._share(home)
        yield home / "bin" / "python"
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_a_package_of_the_callers_path_is_not_found_in_another_interpreter(
    bare_venv: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here = str(Path(pytest.__file__).resolve().parents[1])  # the project venv's site-packages
    monkeypatch.setenv("PYTHONPATH", here)
    inherited = subprocess.run([str(bare_venv), "-c", "import pytest"], check=False)
    assert inherited.returncode == 0  # the trap: an inherited PYTHONPATH finds it
    assert not kernel_python._has(bare_venv, "pytest")
    assert kernel_python._has(bare_venv, "json")


def test_a_pinned_probe_checks_the_version_too() -> None:
    python = sys.executable
    pip_version = subprocess.run(
        [python, "-I", "-c", "from importlib.metadata import version; print(version('pip'))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    argv_ok = kernel_python.probe_argv(python, f"pip=={pip_version}")
    argv_old = kernel_python.probe_argv(python, "pip==0.1")
    run = {"capture_output": True, "env": kernel_python.PROBE_ENV, "cwd": "/", "check": False}
    if os.geteuid() == 0:  # the project venv may sit under a 0700 home: ask as ourselves
        argv_ok, argv_old = argv_ok[argv_ok.index(python) :], argv_old[argv_old.index(python) :]
    assert subprocess.run(argv_ok, **run).returncode == 0
    assert subprocess.run(argv_old, **run).returncode != 0


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: plays another UNIX user")
def test_a_folder_another_user_made_first_is_refused() -> None:
    """/var/tmp is world-writable: a user who makes the venv's folder first must not get root
    to run what she puts in it."""
    mallory = ensure_user("gh-mallory")
    sticky = Path(tempfile.mkdtemp(prefix="gpuhive-sticky-", dir="/var/tmp"))
    try:
        sticky.chmod(0o1777)  # stands in for /var/tmp
        squatted = sticky / "gpuhive-test-0"
        subprocess.run(["setpriv", f"--reuid={mallory.pw_uid}", f"--regid={mallory.pw_gid}",
                        "--clear-groups", "mkdir", "-m", "0777", str(squatted)], check=True)  # fmt: skip
        with pytest.raises(RuntimeError, match="not a folder of ours"):
            kernel_python._own_folder(squatted)
        mine = kernel_python._own_folder(sticky / "gpuhive-test-mine")
        assert mine.stat().st_uid == os.geteuid()
    finally:
        shutil.rmtree(sticky, ignore_errors=True)
