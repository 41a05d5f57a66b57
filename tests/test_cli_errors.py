"""`jupyter gpuhive …` run as a real subprocess: a host that does not resolve, a refused or
silent port, an unreadable file, a bad option: one sentence on stderr, a non-zero status,
never a traceback (issue #28, item 2)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "jupyter_gpuhive.cli.main"]
Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def cli(tmp_path: Path) -> Run:
    """Run the CLI with its own Jupyter folders (an empty hosts file to start with)."""
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
           "JUPYTER_DATA_DIR": str(tmp_path / "data"), "PYTHONWARNINGS": "ignore"}  # fmt: skip

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=60)  # fmt: skip

    return run


def one_sentence(done: subprocess.CompletedProcess[str], status: int, *words: str) -> str:
    """Assert: the status, no traceback, one line on stderr naming `words`; that line."""
    both = done.stdout + done.stderr
    assert "Traceback" not in both, both
    assert done.returncode == status, both
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def free_port() -> int:
    """A loopback port nobody listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A loopback port that accepts connections and never says a word."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def test_trust_a_name_that_does_not_resolve(cli: Run) -> None:
    assert cli("hosts", "add", "far", "no-such-host.invalid").returncode == 0
    line = one_sentence(cli("trust", "far"), 1, "far", "no-such-host.invalid", "resolve")
    assert line.endswith(".")


def test_trust_a_refused_connection(cli: Run) -> None:
    port = free_port()
    assert cli("hosts", "add", "near", "127.0.0.1", "--port", str(port)).returncode == 0
    one_sentence(cli("trust", "near"), 1, "near", f"127.0.0.1:{port}", "refused")


def test_trust_a_host_that_never_answers(cli: Run, silent_port: int) -> None:
    assert cli("hosts", "add", "mute", "127.0.0.1", "--port", str(silent_port)).returncode == 0
    done = cli("trust", "mute", "--GpuHiveApp.ssh_connect_timeout=1")
    one_sentence(done, 1, "mute", "no SSH answer in time")


def test_trust_a_local_host_or_an_unknown_one(cli: Run) -> None:
    assert cli("hosts", "add", "here", "--transport", "local").returncode == 0
    one_sentence(cli("trust", "here"), 1, "not reached over SSH")
    assert cli("trust", "nowhere").returncode == 1


@pytest.mark.parametrize("command", [("hosts",), ("trust", "x"), ("hosts", "add", "a", "b")])
def test_an_unreadable_hosts_file(cli: Run, tmp_path: Path, command: tuple[str, ...]) -> None:
    folder = tmp_path / "a-folder"
    folder.mkdir()
    done = cli(*command, f"--GpuHiveApp.hosts_file={folder}")
    one_sentence(done, 1, str(folder))
    broken = tmp_path / "broken.toml"
    broken.write_text("hosts = [nope\n")
    one_sentence(cli(*command, f"--GpuHiveApp.hosts_file={broken}"), 1, "not valid TOML")


def test_a_key_path_that_is_a_folder(cli: Run, tmp_path: Path) -> None:
    one_sentence(cli("key", f"--GpuHiveApp.ssh_key={tmp_path}"), 1, str(tmp_path))


def test_bad_arguments(cli: Run) -> None:
    one_sentence(cli("hosts", "add", "a", "b", "--port", "many"), 1, "port", "many")
    one_sentence(cli("frobnicate"), 2, "frobnicate", "hosts")
    one_sentence(cli("--GpuHiveApp.poll_interval=2", "hosts"), 2, "after the command")
    one_sentence(cli("report", "--month", "2026-13"), 1, "2026-13")
