"""No third-party warning reaches a CLI user's terminal (issue #48: cryptography 51 + asyncssh).

Each command runs as a user runs it, with Python's default warning display switched on
(PYTHONWARNINGS=default), so a library's import-time warning that is not filtered where gpuhive
imports the library shows on stderr and fails the test.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_gpuhive.libwarnings import QUIETED

CLI = [sys.executable, "-m", "jupyter_gpuhive.cli.main"]


def run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        "HOME": str(tmp_path),
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
        "JUPYTER_DATA_DIR": str(tmp_path / "data"),
        "PYTHONWARNINGS": "default",
        "LANG": os.environ.get("LANG", "C.UTF-8"),
    }
    return subprocess.run(
        [*CLI, *args],
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    "args",
    [
        ("--help",),
        ("hosts",),
        ("trust", "--help"),
        ("sim", "up", "--gpus", "1"),
        ("doctor", "nope"),
    ],
)
def test_a_cli_command_prints_no_library_warning(tmp_path: Path, args: tuple[str, ...]) -> None:
    if args[0] == "doctor":
        assert run(tmp_path, "sim", "up", "--gpus", "1").returncode == 0
    done = run(tmp_path, *args)
    noise = [line for line in done.stderr.splitlines() if "Warning" in line]
    assert noise == [], "\n".join(noise)


def test_the_filter_is_what_keeps_them_off(tmp_path: Path) -> None:
    """The same import without gpuhive's filters warns: the test above can fail."""
    script = "import warnings; warnings.simplefilter('default'); import asyncssh"
    bare = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=60
    )
    quiet = subprocess.run(
        [
            sys.executable,
            "-c",
            script.replace("import asyncssh", "import jupyter_gpuhive, asyncssh"),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert "asyncssh" in QUIETED
    if "Warning" not in bare.stderr:
        pytest.skip("this asyncssh and cryptography print no warning on import")
    assert quiet.stderr == ""
