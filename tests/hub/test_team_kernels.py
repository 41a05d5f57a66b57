"""Team mode: a Hub user's notebook kernel on their reservation, brokered by the service.

Everything is real: JupyterHub with configurable-http-proxy, the gpuhive service (the only
holder of the SSH key) on PostgreSQL, alice's and bob's single-user servers in client mode,
an sshd GPU host with the nvidia-smi stand-in, real UNIX users, real ipykernel. alice starts a
kernel through her server's kernel REST API; the service launches it over SSH as her UNIX
user on her reserved GPUs and relays its channels to Unix sockets in a 0700 directory of
hers; her kernel manager connects there. bob can neither start, see, signal nor connect to it.
"""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import shutil
import signal
import stat
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

from jupyter_gpuhive.sim.cluster import SshdCluster, ensure_user
from tests.conftest import iso
from tests.hub.conftest import Team
from tests.kernels.remote_helpers import REPORT, Notebook, report
from tests.support.kernel_python import kernel_python
from tests.support.postgres import PostgresCluster
from tests.support.team_hub import HubSetupError, Reply, TeamHub, call, service_processes

pytestmark = [
    pytest.mark.hub,
    pytest.mark.skipif(os.geteuid() != 0, reason="runs kernels as real users (needs root)"),
    pytest.mark.skipif(
        shutil.which("sshd", path="/usr/sbin:/usr/bin:/sbin:/bin") is None,
        reason="needs OpenSSH sshd",
    ),
]

HOST = "tkgpu"
UNIX = {"alice": "gh-alice", "bob": "gh-bob"}  # Hub user -> UNIX user (c.GpuHiveApp.unix_users)
RUN = uuid.uuid4().hex[:8]
LEASE = 8.0  # seconds the service keeps a kernel whose server stopped asking (default 90)


@pytest.fixture(scope="module")
def cluster() -> Iterator[SshdCluster]:
    for name in UNIX.values():
        ensure_user(name)
    with SshdCluster([HOST]) as running:
        for name in UNIX.values():
            running.add_user(name)
        yield running


@pytest.fixture(scope="module")
def sockets() -> Iterator[Path]:
    path = Path(tempfile.gettempdir()) / f"gpuhive-team-kernels-{RUN}"
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def kteam(postgres: PostgresCluster, cluster: SshdCluster, sockets: Path) -> Iterator[Team]:
    """alice and bob on a Hub whose service has one sshd GPU host (and the only SSH key)."""
    host = cluster[HOST]
    gpus = [{"index": g.index, "uuid": g.uuid} for g in cluster.host_config(HOST).gpus]
    settings = {
        "hosts": [{"name": HOST, "address": host.address, "port": host.port, "user": "root",
                   "gpus": gpus, "kernel_python": kernel_python()}],
        "ssh_key": str(cluster.client_key), "known_hosts": [str(cluster.known_hosts)],
        "unix_users": UNIX, "site_timezone": "UTC", "kernel_socket_dir": str(sockets),
        "kernel_lease": LEASE,
    }  # fmt: skip
    users = {"alice": ["phd"], "bob": ["phd"]}
    admin = {"carol": ["admins"]}  # a gpuhive admin (no server of her own: not spawned)
    try:
        hub = TeamHub(postgres.new_database(), {**users, **admin}, service_settings=settings,
                      public_host="localhost")  # fmt: skip
    except HubSetupError as error:
        pytest.fail(f"{error} (then `make test`; or `make sysdeps venv` first)", pytrace=False)
    hub.start()
    try:
        hub.spawn(users)
        tokens = {u: hub.token_for(u, [f"access:servers!user={u}"]) for u in users}
        service_tokens = {u: hub.token_for(u, ["access:services!service=gpuhive"]) for u in users}
        # Her admin scope (from her group, the example config) on a token of hers for the service.
        service_tokens["carol"] = hub.token_for(
            "carol", ["access:services!service=gpuhive", "custom:gpuhive:admin"]
        )
        yield Team(hub, tokens, service_tokens, replica=None, replica_port=0)  # type: ignore[arg-type]
    except Exception:
        print(hub.log_tail())
        raise
    finally:
        hub.cleanup()


def listed_spec(team: Team, user: str, reservation_id: int) -> tuple[str, str]:
    """The 'Python on my reservation …' kernelspec of a reservation that `user`'s own server
    lists (its launcher and kernel picker): (name, display name)."""
    url = team.hub.server_url(user) + "api/kernelspecs"
    found = call("GET", url, team.tokens[user])
    assert found.status == 200, found
    name = f"gpuhive-r{reservation_id}"
    assert name in found.body["kernelspecs"], sorted(found.body["kernelspecs"])
    spec = found.body["kernelspecs"][name]["spec"]
    provisioner = spec["metadata"]["kernel_provisioner"]
    assert provisioner == {
        "provisioner_name": "gpuhive",
        "config": {"reservation_id": reservation_id},
    }
    return name, spec["display_name"]


def kernels(team: Team, user: str, method: str, path: str = "", body: Any = None,
            as_user: str | None = None) -> Reply:  # fmt: skip
    """Jupyter's kernel REST API of `user`'s own server, called with `as_user`'s token."""
    url = team.hub.server_url(user) + "api/kernels" + (f"/{path}" if path else "")
    return call(method, url, team.tokens[as_user or user], body, timeout=90)


async def _cells(team: Team, user: str, kernel_id: str, codes: list[str],
                 interrupt_after: float | None = None) -> list[Any]:  # fmt: skip
    url = (
        team.hub.server_url(user).replace("http://", "ws://") + f"api/kernels/{kernel_id}/channels"
    )
    ws = await websocket_connect(
        HTTPRequest(url, headers={"Authorization": f"token {team.tokens[user]}"})
    )
    nb = Notebook(ws)
    try:
        results = []
        for code in codes:
            msg_id = nb.send(code)
            if interrupt_after is not None and "sleep" in code:
                await asyncio.sleep(interrupt_after)
                done = await asyncio.to_thread(kernels, team, user, "POST",
                                               f"{kernel_id}/interrupt")  # fmt: skip
                assert done.status == 204, done
            results.append(await nb.result(msg_id, timeout=60))
        return results
    finally:
        nb.close()


def cells(team: Team, user: str, kernel_id: str, *codes: str, **kw: Any) -> list[Any]:
    return asyncio.run(_cells(team, user, kernel_id, list(codes), **kw))


def as_unix_user(user: str, code: str) -> subprocess.CompletedProcess[str]:
    """Run Python `code` as a UNIX user with its groups (as a login of that account would)."""
    account = pwd.getpwnam(user)
    return subprocess.run(
        ["/usr/bin/python3", "-c", code], user=account.pw_uid, group=account.pw_gid,
        extra_groups=os.getgrouplist(user, account.pw_gid), capture_output=True, text=True,
        env={"PATH": "/usr/bin:/bin"}, cwd="/", timeout=30, check=False,
    )  # fmt: skip


CONNECT = "import socket; socket.socket(socket.AF_UNIX).connect({path!r}); print('connected')"


def test_a_hub_users_notebook_runs_on_her_reserved_gpus_and_only_she_controls_it(
    kteam: Team, cluster: SshdCluster, sockets: Path
) -> None:
    team = kteam
    gpus = cluster.host_config(HOST).gpus
    made = team.own("alice", "POST", "reservations",
                    {"title": "notebook", "gpus": [f"{HOST}:1", f"{HOST}:2"], "duration": "1h"})  # fmt: skip
    assert made.status == 201, made
    rid = made.body["id"]
    # Her server's launcher offers the reservation (bob's does not: it is not his).
    spec, title = listed_spec(team, "alice", rid)
    assert title.startswith(f"Python on my reservation: {HOST}:1,2 until "), title
    bobs = call("GET", team.hub.server_url("bob") + "api/kernelspecs", team.tokens["bob"])
    assert spec not in bobs.body["kernelspecs"], bobs

    # bob cannot start a kernel on alice's reservation from his own server (by its name).
    refused = kernels(team, "bob", "POST", body={"name": spec})
    assert refused.status == 403, refused
    assert "alice" in refused.message

    # alice opens a notebook on her reservation: a kernel from her server's kernel REST API.
    started = kernels(team, "alice", "POST", body={"name": spec})
    assert started.status == 201, started
    kid = started.body["id"]
    (seen, slept) = cells(team, "alice", kid, REPORT, "import time; time.sleep(60)",
                          interrupt_after=1.5)  # fmt: skip
    who = report(seen)
    assert who["user"] == UNIX["alice"]  # getpass.getuser(): her own UNIX account
    assert who["cuda"] == f"{gpus[1].uuid},{gpus[2].uuid}"  # her reserved GPUs, by UUID
    assert who["order"] == "PCI_BUS_ID"
    assert who["sim_host"] == HOST  # it runs on the GPU host, over the service's SSH
    service_env = next(iter(service_processes(team.hub.service_config).values()))
    secret = service_env["JUPYTERHUB_API_TOKEN"]  # the service's own Hub token
    assert not [k for k, v in who["env"].items() if secret in v]
    assert slept.error == "KeyboardInterrupt", slept  # interrupt: through the service

    # Her kernel's sockets: hers (0600) in a directory she may enter but not change (the
    # service's, 0710, her group), under a root nobody may list; nobody else gets in.
    (folder,) = [p for p in sockets.iterdir() if p.is_dir()]
    owner = pwd.getpwnam(UNIX["alice"])
    info = folder.stat()
    assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (0, owner.pw_gid, 0o710)
    assert stat.S_IMODE(sockets.stat().st_mode) == 0o711  # passable, not listable
    shell = str(folder / "k-1")
    sock = os.lstat(shell)
    assert stat.S_ISSOCK(sock.st_mode)
    assert (sock.st_uid, stat.S_IMODE(sock.st_mode)) == (owner.pw_uid, 0o600)
    mine = as_unix_user(UNIX["alice"], CONNECT.format(path=shell))
    assert mine.stdout.strip() == "connected", mine.stderr
    theirs = as_unix_user(UNIX["bob"], CONNECT.format(path=shell))
    assert theirs.returncode != 0 and "PermissionError" in theirs.stderr, theirs
    listing = as_unix_user(UNIX["bob"], f"import os; os.listdir({str(sockets)!r})")
    assert "PermissionError" in listing.stderr, listing

    # bob: not through alice's server (the Hub), not through his own, not at the service.
    assert kernels(team, "alice", "GET", kid, as_user="bob").status == 403
    assert kernels(team, "alice", "POST", f"{kid}/interrupt", as_user="bob").status == 403
    assert kernels(team, "bob", "GET", kid).status == 404  # his server has no such kernel
    bob = team.service_tokens["bob"]
    attempts = {
        "launch (connection info and key)":
            team.service(bob, "POST", f"kernels/{kid}/launch", {"reservation_id": rid}),
        "poll": team.service(bob, "GET", f"kernels/{kid}/process"),
        "interrupt": team.service(bob, "POST", f"kernels/{kid}/signal", {"signal": "SIGINT"}),
        "kill": team.service(bob, "POST", f"kernels/{kid}/signal", {"signal": "SIGKILL"}),
        "shut down": team.service(bob, "POST", f"kernels/{kid}/cleanup", {"restart": False}),
        "through his server": team.own("bob", "POST", f"kernels/{kid}/signal",
                                       {"signal": "SIGTERM"}),
        "a new kernel on her reservation":
            team.service(bob, "POST", f"kernels/{uuid.uuid4()}/launch", {"reservation_id": rid}),
    }  # fmt: skip
    assert {k: r.status for k, r in attempts.items()} == dict.fromkeys(attempts, 403), attempts
    assert all("alice" in r.message for r in attempts.values()), attempts
    assert "key" not in json.dumps([r.body for r in attempts.values()])
    # An admin (carol) may signal it through the service, but never launch as alice: not
    # her kernel (its key), not a new kernel on her reservation.
    carol = team.service_tokens["carol"]
    signalled = team.service(carol, "POST", f"kernels/{kid}/signal", {"signal": "SIGINT"})
    assert signalled.status == 200 and signalled.body["running"] is True, signalled
    for kernel in (kid, str(uuid.uuid4())):
        launch = team.service(carol, "POST", f"kernels/{kernel}/launch", {"reservation_id": rid})
        assert launch.status == 403 and "only alice" in launch.message, launch
        assert "key" not in json.dumps(launch.body)

    # Still hers, still running. She restarts it (through the service): a fresh process on
    # the same GPUs behind the same sockets. Then she shuts it down and its sockets go.
    assert kernels(team, "alice", "POST", f"{kid}/restart", as_user="bob").status == 403
    restarted = kernels(team, "alice", "POST", f"{kid}/restart")
    assert restarted.status == 200, restarted
    (again,) = cells(team, "alice", kid, REPORT)
    fresh = report(again)
    assert fresh["pid"] != who["pid"]
    assert (fresh["user"], fresh["cuda"]) == (who["user"], who["cuda"])
    assert [p for p in sockets.iterdir() if p.is_dir()] == [folder]
    assert kernels(team, "alice", "DELETE", kid).status == 204
    assert not folder.exists()
    gone = team.service(team.service_tokens["alice"], "GET", f"kernels/{kid}/process")
    assert gone.status == 404, gone


def test_the_service_refuses_bad_kernel_requests_with_reasons(kteam: Team) -> None:
    team = kteam
    alice = team.service_tokens["alice"]
    later = iso(datetime.now(timezone.utc) + timedelta(days=3))
    made = team.own("alice", "POST", "reservations",
                    {"title": "later", "gpus": [f"{HOST}:0"], "start": later, "duration": "1h"})  # fmt: skip
    assert made.status == 201, made
    kid = str(uuid.uuid4())

    def launch(body: Any, kernel: str = kid) -> Reply:
        return team.service(alice, "POST", f"kernels/{kernel}/launch", body)

    cases = {
        "not yet started": (launch({"reservation_id": made.body["id"]}), 409, "has not started"),
        "no such reservation": (launch({"reservation_id": 999999}), 404, "999999"),
        "id not a number": (launch({"reservation_id": "7"}), 400, "whole number"),
        "no reservation": (launch({}), 422, "reservation_id"),
        "unknown field": (launch({"reservation_id": 1, "owner": "bob"}), 400, "owner"),
        "bad env": (launch({"reservation_id": 1, "env": {"A": 1}}), 400, "string values"),
        "bad kernel id": (launch({"reservation_id": 1}, kernel="..%2f"), 404, "kernel id"),
        "unknown kernel": (team.service(alice, "GET", f"kernels/{kid}/process"), 404, kid),
        "unknown signal": (
            team.service(alice, "POST", f"kernels/{kid}/signal", {"signal": "SIGFOO"}),
            422,
            "SIGINT",
        ),
        "no token": (team.service(None, "GET", f"kernels/{kid}/process"), 401, "token"),
    }
    for name, (reply, status, words) in cases.items():
        assert (reply.status, words in reply.message) == (status, True), (name, reply)
    # Nothing was left behind by the refused launches.
    assert team.service(alice, "GET", f"kernels/{kid}/process").status == 404


# What a notebook on the reservation runs to use gpuhive: GPUHIVE_URL + gpuhive/api/ (as
# HiveClient builds it) with GPUHIVE_TOKEN; straight to the Hub's proxy, no proxy variables.
KERNEL_CALLS = """
import json, os, urllib.error, urllib.request
def call(method, path, body=None):
    url = os.environ["GPUHIVE_URL"].rstrip("/") + "/gpuhive/api/" + path
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={
        "Authorization": "token " + os.environ["GPUHIVE_TOKEN"],
        "Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=30) as answer:
            return [answer.status, json.loads(answer.read() or b"null")]
    except urllib.error.HTTPError as error:
        return [error.code, json.loads(error.read() or b"null")]
print(json.dumps({"me": call("GET", "me"),
                  "book": call("POST", "reservations", {"title": "from the kernel",
                                "gpus": ["%(host)s:0"], "start": "%(later)s", "duration": "30m"}),
                  "launch": call("POST", "kernels/%(kid)s/launch", {"reservation_id": %(rid)d})}))
"""


def test_a_reservation_kernel_uses_gpuhive_as_its_owner_with_a_token_of_its_own(
    kteam: Team,
) -> None:
    """The kernel gets GPUHIVE_URL (the service at the Hub's public URL) and a token that
    is worth its owner's gpuhive rights only, while the kernel lives: never the service's
    token, never her server's."""
    team = kteam
    made = team.own("alice", "POST", "reservations",
                    {"title": "magics", "gpus": [f"{HOST}:0"], "duration": "1h"})  # fmt: skip
    assert made.status == 201, made
    rid = made.body["id"]
    started = kernels(team, "alice", "POST", body={"name": listed_spec(team, "alice", rid)[0]})
    assert started.status == 201, started
    kid = started.body["id"]
    seen, used = cells(team, "alice", kid, REPORT,
                       KERNEL_CALLS % {"host": HOST, "kid": kid, "rid": rid,
                                       "later": iso(datetime.now(timezone.utc) + timedelta(days=2))})  # fmt: skip
    env = report(seen)["env"]
    assert env["GPUHIVE_URL"] == team.hub.public_url + "services/gpuhive/"
    token = env["GPUHIVE_TOKEN"]
    assert token.startswith("gpuhive-kernel-"), token
    service_env = next(iter(service_processes(team.hub.service_config).values()))
    server_env = (Path(f"/proc/{server_pid('alice')}") / "environ").read_bytes().split(b"\0")
    server_token = next(v.split(b"=", 1)[1].decode() for v in server_env
                        if v.startswith(b"JUPYTERHUB_API_TOKEN="))  # fmt: skip
    for secret in (service_env["JUPYTERHUB_API_TOKEN"], server_token):
        assert not [k for k, v in env.items() if secret in v]

    answers = report(used)
    assert answers["me"][0] == 200 and answers["me"][1]["name"] == "alice", answers
    assert answers["book"][0] == 201 and answers["book"][1]["owner"] == "alice", answers
    assert answers["launch"][0] == 403, answers  # kernels are started by her server only

    # Only gpuhive's API: the Hub and her own server do not know the token.
    assert call("GET", f"{team.hub.url}/hub/api/user", token).status == 403
    assert call("GET", team.hub.server_url("alice") + "api/status", token).status in (302, 403)
    # bob's launch of her kernel is refused and leaves her kernel's token as it was.
    bobs = team.service(team.service_tokens["bob"], "POST", f"kernels/{kid}/launch",
                        {"reservation_id": rid})  # fmt: skip
    assert bobs.status == 403, bobs
    assert team.proxied(token, "GET", "me").body["name"] == "alice"
    assert kernels(team, "alice", "DELETE", kid).status == 204
    after = team.proxied(token, "GET", "me")  # the kernel ended: so did its token
    assert after.status == 401 and "kernel has ended" in after.message, after


def server_pid(user: str) -> int:
    """The process of `user`'s single-user server (spawned by the Hub on this machine)."""
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes()
            env = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"jupyterhub.singleuser" in argv and f"JUPYTERHUB_USER={user}".encode() in env:
            return int(entry.name)
    raise AssertionError(f"no single-user server of {user}")


def test_a_kernel_whose_server_crashed_is_shut_down_after_its_lease(
    kteam: Team, cluster: SshdCluster, sockets: Path
) -> None:
    """Runs last: it kills alice's server. The service notices that nobody asks about her
    kernel any more and ends it (process on the host, sockets) within the lease."""
    team = kteam
    made = team.own("alice", "POST", "reservations",
                    {"title": "crash", "gpus": [f"{HOST}:3"], "duration": "1h"})  # fmt: skip
    assert made.status == 201, made
    before = {p for p in sockets.iterdir() if p.is_dir()}
    started = kernels(
        team, "alice", "POST", body={"name": listed_spec(team, "alice", made.body["id"])[0]}
    )
    assert started.status == 201, started
    kid = started.body["id"]
    (folder,) = {p for p in sockets.iterdir() if p.is_dir()} - before
    pid = report(cells(team, "alice", kid, REPORT)[0])["pid"]
    time.sleep(LEASE + 1)  # her server keeps it alive meanwhile (it polls every 3 s)
    assert folder.exists()
    alice = team.service_tokens["alice"]
    assert team.service(alice, "GET", f"kernels/{kid}/process").body["running"] is True

    os.kill(server_pid("alice"), signal.SIGKILL)
    killed = time.monotonic()
    deadline = killed + LEASE + LEASE / 3 + 10  # the lease, one reaper pass, slack
    while folder.exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    took = time.monotonic() - killed
    assert not folder.exists(), "the service kept the kernel of a crashed server"
    print(f"kernel of a crashed server ended after {took:.1f} s (lease {LEASE:.0f} s)")
    assert team.service(alice, "GET", f"kernels/{kid}/process").status == 404
    ps = cluster.ssh(HOST, "root", ["ps", "-o", "user=", "-p", str(pid)])
    assert ps.stdout.strip() == "", ps  # gone from the host too
