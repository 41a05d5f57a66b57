"""Secret files are owner-only from their first byte (issue #27, finding 4): the SSH key, the
config files the CLI writes, and the SQLite store (webhook secrets, jobs' env values)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_gpuhive.cli.demo import write_config
from jupyter_gpuhive.hosts.secretfiles import write_secret
from jupyter_gpuhive.hosts.ssh import ensure_client_key
from jupyter_gpuhive.sim.users import ensure_user, is_root
from jupyter_gpuhive.store import Store

READER_USER = "gh-bob"
KEYS = 200
# Spins on opening each key's path (and, now and then, every file in the folder) until the
# writer says stop; a successful open is a leak even before any byte is there: the descriptor
# would read them later. Prints "opened bytes denied".
READER = r"""
import os, sys, time
folder, count = sys.argv[1], int(sys.argv[2])
stop = os.path.join(folder, "stop")
opened = read = denied = 0
def attempt(path):
    global opened, read, denied
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return False
    except (PermissionError, IsADirectoryError):
        denied += 1
        return True
    opened += 1
    time.sleep(0.05)
    while chunk := os.read(fd, 65536):
        read += len(chunk)
    os.close(fd)
    return True
print("ready", flush=True)
for i in range(count):
    path, spins = os.path.join(folder, f"key{i}"), 0
    while not attempt(path):
        spins += 1
        if spins % 64 == 0:
            for name in os.listdir(folder):
                if name.startswith("."):
                    attempt(os.path.join(folder, name))
        if spins % 4096 == 0 and os.path.exists(stop):
            break
    if os.path.exists(stop) and not os.path.exists(path):
        break
print(opened, read, denied, flush=True)
"""


@pytest.fixture
def open_folder() -> Iterator[Path]:
    """A folder every user may list and enter, as a shared or carelessly made one is."""
    path = Path(tempfile.mkdtemp(prefix="gpuhive-secrets-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.skipif(not is_root(), reason="the racing reader is another real UNIX user")
def test_a_racing_reader_never_opens_the_ssh_key(open_folder: Path) -> None:
    ensure_user(READER_USER)
    python = shutil.which("python3", path="/usr/bin:/bin") or "/usr/bin/python3"
    reader = subprocess.Popen(
        [python, "-c", READER, str(open_folder), str(KEYS)],
        user=READER_USER,
        stdout=subprocess.PIPE,
        text=True,
        cwd="/",
    )
    try:
        assert reader.stdout is not None
        assert reader.stdout.readline().strip() == "ready"
        old = os.umask(0o022)  # the usual umask: what the old code wrote under
        try:
            for i in range(KEYS):
                ensure_client_key(open_folder / f"key{i}")
        finally:
            os.umask(old)
        (open_folder / "stop").touch()
        out, _ = reader.communicate(timeout=60)
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait()
    opened, read, denied = (int(n) for n in out.split())
    assert (opened, read) == (0, 0)
    assert denied >= KEYS  # it did race: every key was there to try, and refused
    for i in range(KEYS):
        assert mode(open_folder / f"key{i}") == 0o600
        assert ensure_client_key(open_folder / f"key{i}")  # still a readable key for its owner
    assert not [p for p in open_folder.iterdir() if p.name.startswith(".")]  # no leftovers


def test_write_secret_is_0600_whatever_the_umask_and_never_replaces_unasked(
    tmp_path: Path,
) -> None:
    old = os.umask(0)
    try:
        assert write_secret(tmp_path / "s", b"one")
        assert mode(tmp_path / "s") == 0o600
        assert not write_secret(tmp_path / "s", b"two")
        assert (tmp_path / "s").read_bytes() == b"one"
        (tmp_path / "s").chmod(0o644)
        assert write_secret(tmp_path / "s", b"three", replace=True)
        assert ((tmp_path / "s").read_bytes(), mode(tmp_path / "s")) == (b"three", 0o600)
    finally:
        os.umask(old)


def test_jupyter_gpuhive_init_writes_the_config_0600(tmp_path: Path) -> None:
    target = tmp_path / "conf" / "jupyter_gpuhive_config.py"
    command = [sys.executable, "-m", "jupyter_gpuhive.cli.main", "init", f"--output={target}"]
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(tmp_path / "jc")}
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert mode(target) == 0o600
    assert "GpuHiveApp" in target.read_text()
    refused = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1 and "--force" in refused.stderr
    target.chmod(0o644)
    forced = subprocess.run(
        [*command, "--force"], env=env, capture_output=True, text=True, timeout=60
    )
    assert forced.returncode == 0, forced.stderr
    assert mode(target) == 0o600


def test_the_demo_config_is_0600(tmp_path: Path) -> None:
    assert mode(write_config(tmp_path / "demo", [])) == 0o600


def test_a_new_sqlite_store_and_its_wal_are_0600(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        store = Store(f"sqlite:///{tmp_path / 'store' / 'gpuhive.sqlite'}")
        store.open()
        try:
            assert mode(tmp_path / "store" / "gpuhive.sqlite") == 0o600
            for extra in ("gpuhive.sqlite-wal", "gpuhive.sqlite-shm"):
                if (tmp_path / "store" / extra).exists():
                    assert mode(tmp_path / "store" / extra) == 0o600
        finally:
            store.close()
    finally:
        os.umask(old)
