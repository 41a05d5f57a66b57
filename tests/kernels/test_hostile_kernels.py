"""A hostile user against the server's rights (issue #27, findings 1 and 3), for real.

A real UNIX user (gh-mallory, the UNIX account of gpuhive user alice here) plants real files
in her real home that make her kernel's launch print a READY line naming a root-owned
directory and a root process group: a ``json.py`` (the launch script used to run with her
home first on its module path) and, in team mode, a ``sitecustomize.py`` on a PYTHONPATH her
own server passes in the launch's environment. The server (root) must neither delete that
directory nor signal that group, whatever the kernel prints. And a directory she makes first
under the temporary directory (``gpuhive-kernels-0``) must not keep team-mode kernels from
starting. What she plants is removed before and after each test.
"""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpuhive.kernels.broker import KernelBroker
from jupyter_gpuhive.sim.users import ensure_user
from tests.conftest import TOKENS, UTC, book
from tests.kernels.remote_helpers import (
    REPORT,
    Notebook,
    kernels_api,
    local_host,
    report,
    write_spec,
)

SQLITE = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
MALLORY = "gh-mallory"  # the UNIX account of gpuhive user alice in these tests
PLANTED = ("json.py", "evil", ".gpuhive-hostile-pid")
# Module-level code of what she plants: claim to be a ready kernel whose pid, group and
# directory are root's victims, then idle (a real kernel never starts).
PAYLOAD = """import os, time
with open(os.path.join(os.environ.get("HOME", "/tmp"), ".gpuhive-hostile-pid"), "w") as f:
    f.write(str(os.getpid()))
os.write(1, b"\\nGPUHIVE-KERNEL-READY " + {ready!r} + b"\\n")
time.sleep(30)
"""


@pytest.fixture
def hive_config(hive_config: dict[str, Any], python: str) -> dict[str, Any]:
    ensure_user(MALLORY)
    return {**hive_config, "hosts": [local_host("khost", 2, python)],
            "unix_users": {"alice": MALLORY, "bob": "gh-bob"}, "kernel_specs": False,
            "monitor": False, "site_timezone": "UTC"}  # fmt: skip


@pytest.fixture
def home() -> Iterator[Path]:
    """gh-mallory's real home, with nothing of ours in it before or after."""
    account = ensure_user(MALLORY)
    path = Path(account.pw_dir)
    _clear(path, account.pw_uid)
    yield path
    _clear(path, account.pw_uid)


def _clear(home: Path, uid: int) -> None:
    pid_file = home / ".gpuhive-hostile-pid"
    if pid_file.is_file():
        pid = int(pid_file.read_text() or 0)
        if pid > 1 and _uid_of(pid) == uid:  # her idle payload, by its id
            os.kill(pid, signal.SIGKILL)
    for compiled in (home / "__pycache__").glob("json.*.pyc"):  # the json.py's, if imported
        compiled.unlink()
    for name in PLANTED:
        target = home / name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        else:
            target.unlink(missing_ok=True)


def _uid_of(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def plant(home: Path, relative: str, text: str) -> Path:
    """A file of gh-mallory's in her home (its folders hers too), as she would write it."""
    account = pwd.getpwnam(MALLORY)
    target = home / relative
    for folder in reversed(target.relative_to(home).parents[:-1]):
        (home / folder).mkdir(exist_ok=True)
        os.chown(home / folder, account.pw_uid, account.pw_gid)
    target.write_text(text)
    os.chown(target, account.pw_uid, account.pw_gid)
    return target


class Victims:
    """A root-only directory and a root process group the payload names."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="gpuhive-victim-"))  # root, 0700
        (self.dir / "keep").write_text("root's")
        self.process = subprocess.Popen(["sleep", "600"], start_new_session=True)

    def ready_line(self) -> bytes:
        pid = self.process.pid
        return json.dumps({"pid": pid, "pgid": pid, "dir": str(self.dir)}).encode()

    def state(self) -> dict[str, bool]:
        return {"process alive": self.process.poll() is None,
                "dir kept": (self.dir / "keep").is_file()}  # fmt: skip

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def victims() -> Iterator[Victims]:
    made = Victims()
    yield made
    made.close()


@pytest.fixture
def started(jp_serverapp: Any, jp_asyncio_loop: Any) -> Any:
    jp_asyncio_loop.run_until_complete(jp_serverapp._post_start())
    return jp_serverapp


def with_broker(server: Any, socket_dir: str) -> KernelBroker:
    """The server as the team's service: a broker behind its kernel routes."""
    broker = KernelBroker(server.web_app.settings["gpuhive"].kernels, socket_dir, lease=60)
    server.web_app.settings["gpuhive_broker"] = broker
    return broker


async def gone(pid: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and _uid_of(pid) is not None:
        await asyncio.sleep(0.2)
    return _uid_of(pid) is None


@SQLITE
async def test_a_json_py_in_her_home_cannot_make_the_server_kill_or_delete_roots_things(
    started: Any, api: Any, jp_fetch: Any, jp_ws_fetch: Any, jp_data_dir: Path, home: Path,
    victims: Victims,
) -> None:  # fmt: skip
    plant(home, "json.py", PAYLOAD.format(ready=victims.ready_line()))
    made = await book(api("alice"), "hostile", ["khost:0"], datetime.now(UTC), "1h")
    spec = write_spec(jp_data_dir, f"hostile{made.body['id']}", {"reservation_id": made.body["id"]})
    started_kernel = await kernels_api(jp_fetch, TOKENS["alice"], "POST", body={"name": spec})
    assert started_kernel.status == 201, started_kernel  # her json.py is not the kernel's
    kid = started_kernel.body["id"]
    record = started.web_app.settings["gpuhive"].kernels.get(kid)
    pid, uid = record.pid, _uid_of(record.pid)
    # Her kernel works as ever: an interrupt (a signal to the group we started), a restart
    # (a new directory lent, taken back, our links moved), her cells on both.
    nb = await Notebook.open(jp_ws_fetch, kid, TOKENS["alice"])
    assert report(await nb.run(REPORT))["user"] == MALLORY
    sleeping = nb.send("import time; time.sleep(30)")
    await asyncio.sleep(1.0)
    interrupted = await kernels_api(jp_fetch, TOKENS["alice"], "POST", kid, "interrupt")
    assert interrupted.status == 204, interrupted
    assert (await nb.result(sleeping, 15)).error == "KeyboardInterrupt"
    restarted = await kernels_api(jp_fetch, TOKENS["alice"], "POST", kid, "restart")
    assert restarted.status == 200, restarted
    again = report(await nb.run(REPORT))
    assert again["user"] == MALLORY and again["pid"] == record.pid != pid, (again, pid)
    assert await gone(pid, 10)  # the old kernel: ended by the restart
    nb.close()
    pid, uid = record.pid, _uid_of(record.pid)
    # Shutting it down signals its group and removes its socket directory.
    assert (await kernels_api(jp_fetch, TOKENS["alice"], "DELETE", kid)).status == 204
    assert victims.state() == {"process alive": True, "dir kept": True}
    assert uid == pwd.getpwnam(MALLORY).pw_uid  # the pid is the child we started, hers
    assert await gone(pid, 10)


@SQLITE
async def test_a_sitecustomize_on_her_pythonpath_cannot_make_the_service_kill_or_delete(
    started: Any, api: Any, home: Path, victims: Victims
) -> None:
    sockets = tempfile.mkdtemp(prefix="ghh-")
    broker = with_broker(started, sockets)
    try:
        plant(home, "evil/sitecustomize.py", PAYLOAD.format(ready=victims.ready_line()))
        made = await book(api("alice"), "hostile", ["khost:1"], datetime.now(UTC), "1h")
        kid, alice = str(uuid.uuid4()), api("alice")
        env = {"PYTHONPATH": str(home / "evil")}  # what her own server may pass on
        launched = await alice("POST", f"kernels/{kid}/launch",
                               {"reservation_id": made.body["id"], "env": env})  # fmt: skip
        assert launched.status in (200, 503), launched
        assert isinstance(launched.body, dict), launched  # JSON either way
        signalled = await alice("POST", f"kernels/{kid}/signal", {"signal": "SIGTERM"})
        cleaned = await alice("POST", f"kernels/{kid}/cleanup", {"restart": False})
        assert {signalled.status, cleaned.status} <= {200, 404}, (signalled, cleaned)
        assert victims.state() == {"process alive": True, "dir kept": True}
        if launched.status == 503:  # her payload said "ready" before any socket was bound
            assert "said it was ready" in launched.message, launched
        pid_file = home / ".gpuhive-hostile-pid"
        assert pid_file.is_file()  # her payload did run, as her kernel
        assert await gone(int(pid_file.read_text()), 10)  # and the service ended its child
    finally:
        await broker.close()
        shutil.rmtree(sockets, ignore_errors=True)


@SQLITE
async def test_a_directory_she_made_first_under_tmp_does_not_stop_team_kernels(
    started: Any, api: Any, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = Path(tempfile.mkdtemp(prefix="ghtmp-"))  # a /tmp of its own: 1777, as /tmp
    os.chmod(shared, 0o1777)
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    squatted = shared / f"gpuhive-kernels-{os.geteuid()}"
    subprocess.run(["runuser", "-u", MALLORY, "--", "mkdir", "-m", "777", str(squatted)],
                   check=True)  # fmt: skip
    assert squatted.stat().st_uid == pwd.getpwnam(MALLORY).pw_uid
    broker = with_broker(started, "")  # the default socket directory
    try:
        made = await book(api("bob"), "fine", ["khost:0"], datetime.now(UTC), "1h")
        kid, bob = str(uuid.uuid4()), api("bob")
        launched = await bob("POST", f"kernels/{kid}/launch", {"reservation_id": made.body["id"]})
        assert launched.status == 200, launched
        where = Path(launched.body["connection"]["ip"]).parent
        assert shared not in where.parents, where  # nowhere under a world-writable directory
        assert where.parent.stat().st_uid == os.geteuid()
        assert list(squatted.iterdir()) == []
        cleaned = await bob("POST", f"kernels/{kid}/cleanup", {"restart": False})
        assert cleaned.status == 200, cleaned
    finally:
        await broker.close()
        shutil.rmtree(shared, ignore_errors=True)
