"""No secret of the server reaches a job, a job's env is off every command line, its files are
private: real server, real screen, a real user, over `local` and a real sshd that accepts any
variable a client would send (AcceptEnv *)."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncssh
import pytest

from jupyter_gpuhive.hosts.environment import SAFE_PATH
from jupyter_gpuhive.hosts.pool import HostPool, SshSettings
from jupyter_gpuhive.model import HostDecl
from jupyter_gpuhive.sim.cluster import SshdCluster, ensure_user
from jupyter_gpuhive.sim.sshhost import SimHost
from tests.conftest import USERS
from tests.support.postgres import PostgresCluster
from tests.support.waiting import until

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="runs jobs as a real user (needs root)"),
    pytest.mark.skipif(shutil.which("screen") is None, reason="needs GNU screen"),
]

OWNER = "hivejob1"  # a real UNIX user; the gpuhive user of the same name owns the jobs
RUN = uuid.uuid4().hex[:10]
# Every secret the server holds, each a value that cannot turn up by chance.
SERVER_TOKEN = f"server-token-{RUN}"
HUB_TOKEN = f"hub-token-{RUN}"
ENV_SECRET = f"env-secret-{RUN}"
DB_PASSWORD = f"db-password-{RUN}"
SMTP_PASSWORD = f"smtp-password-{RUN}"
WEBHOOK_PASSWORD = f"webhook-password-{RUN}"
WEBHOOK_TOKEN = f"webhook-token-{RUN}"
SECRETS = (SERVER_TOKEN, HUB_TOKEN, ENV_SECRET, DB_PASSWORD, SMTP_PASSWORD, WEBHOOK_PASSWORD,
           WEBHOOK_TOKEN)  # fmt: skip
ALICE_SECRET = f"alice-{RUN} 'quoted' $HOME"
# Lines that could end the here-document or fill a placeholder of the start script.
NASTY = "one\nGPUHIVE_ENV_END\n%(screen)s %(env)s\n$(touch pwned) `touch pwned` \\ 'q' \"d\"\n"
HOST_MARK = f"host-{RUN}"
HANDLERS = {
    "email": {"host": "smtp.invalid", "port": 587, "starttls": True, "username": "hive",
              "password": SMTP_PASSWORD, "sender": "gpuhive@lab.invalid",
              "address_template": "{user}@lab.invalid"},
    "webhook": {"url": f"https://hook:{WEBHOOK_PASSWORD}@hooks.invalid/notify",
                "headers": {"Authorization": f"Bearer {WEBHOOK_TOKEN}"}},
}  # fmt: skip


class OpenEnvCluster(SshdCluster):
    """sshd hosts that accept every variable a client sends: anything sent would arrive."""

    def _write_sshd_config(self, host: SimHost) -> None:
        super()._write_sshd_config(host)
        with host.sshd_config.open("a", encoding="utf-8") as config:
            config.write("AcceptEnv *\n")


@pytest.fixture(scope="module")
def cluster() -> Iterator[SshdCluster]:
    if shutil.which("sshd", path="/usr/sbin:/usr/bin:/sbin:/bin") is None:
        pytest.skip("OpenSSH sshd is not installed")
    ensure_user(OWNER)
    with OpenEnvCluster(["gpu1"]) as running:
        running.add_user(OWNER)
        yield running


@pytest.fixture
def server_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    """The server's environment holds its token, a Hub token and a secret of its own."""
    monkeypatch.setenv("JUPYTER_TOKEN", SERVER_TOKEN)
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", HUB_TOKEN)
    monkeypatch.setenv("GPUHIVE_TEST_SECRET", ENV_SECRET)
    monkeypatch.setenv("SOME_COPY_OF_THE_TOKEN", SERVER_TOKEN)


def host_spec(transport: str, cluster: SshdCluster | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": "gpu1", "gpu_count": 2, "env": {"HOST_MARK": HOST_MARK}}
    if cluster is None:
        return {**spec, "transport": "local"}
    host = cluster["gpu1"]
    return {**spec, "address": host.address, "port": host.port, "user": "root"}


@pytest.fixture(params=["local", "ssh"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def db_url(postgres: PostgresCluster) -> str:
    """A PostgreSQL URL with a password in it (the test cluster trusts any)."""
    url = postgres.new_database()
    return url.replace(f"//{postgres.user}@", f"//{postgres.user}:{DB_PASSWORD}@")


@pytest.fixture
def hive_config(request: pytest.FixtureRequest, transport: str) -> dict[str, Any]:
    config: dict[str, Any] = {"monitor": False, "site_timezone": "UTC",
                              "violation_handlers": HANDLERS}  # fmt: skip
    cluster = request.getfixturevalue("cluster") if transport == "ssh" else None
    config["hosts"] = [host_spec(transport, cluster)]
    if cluster is not None:
        config.update(ssh_key=str(cluster.client_key), known_hosts=[str(cluster.known_hosts)])
    return config


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any], server_secrets: None) -> dict[str, Any]:
    users = {**USERS, "tok-hivejob1": {"name": OWNER, "groups": []}}
    jp_server_config["TokenUsersIdentityProvider"] = {"users": users}
    jp_server_config["IdentityProvider"] = {"token": SERVER_TOKEN}
    return jp_server_config


@pytest.fixture
def started(jp_serverapp: Any, jp_asyncio_loop: Any) -> Any:
    """The server as `jupyter server` starts it: extensions' start hooks run (the hive too)."""
    jp_asyncio_loop.run_until_complete(jp_serverapp._post_start())
    assert jp_serverapp.identity_provider.token == SERVER_TOKEN
    return jp_serverapp


def on_host(path: str) -> Path:
    """A task file's path on this machine (the hosts here are this machine)."""
    home = pwd.getpwnam(OWNER).pw_dir
    return Path(home) / path[2:] if path.startswith("~/") else Path(path)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_a_job_sees_no_secret_and_shows_its_own_to_nobody(
    api: Any, started: Any, transport: str
) -> None:
    owner = api(OWNER)
    command = (
        'env; printf "NASTY<%s>\\n" "$NASTY"; echo "UMASK=$(umask)"; echo READY; exec sleep 60'
    )
    body = {"name": f"dump-{transport}", "gpus": ["gpu1:0"], "start": True, "command": command,
            "env": {"ALICE_SECRET": ALICE_SECRET, "NASTY": NASTY}}  # fmt: skip
    created = await owner("POST", "jobs", body)
    assert created.status == 201, created
    job_id = created.body["id"]
    try:

        async def logged() -> str | None:
            reply = await owner("GET", f"jobs/{job_id}/log", params={"task": 0})
            text = str(reply.body.get("text", "")) if isinstance(reply.body, dict) else ""
            return text if "READY" in text else None

        log = await until(logged, timeout=20)
        lines = log.splitlines()
        assert f"ALICE_SECRET={ALICE_SECRET}" in lines  # the job's env, verbatim
        assert f"HOST_MARK={HOST_MARK}" in lines  # the host's configured env
        assert f"NASTY<{NASTY}>" in log
        assert not list(on_host("~/").glob("pwned*")), "a value was run by a shell"
        assert "UMASK=0077" not in lines  # only gpuhive's own files are private
        for secret in SECRETS:
            assert secret not in log, f"a server secret reached the job:\n{log}"
        ours = ("GPUHIVE_TOKEN=", "GPUHIVE_URL=", "GPUHIVE_UMASK=", "JUPYTER")
        assert not [line for line in lines if line.startswith(ours)], log
        if transport == "local":
            assert f"PATH={SAFE_PATH}" in lines  # the fixed base, not the server's PATH

        job = (await owner("GET", f"jobs/{job_id}")).body
        [task] = job["tasks"]
        listing = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        assert task["session"] in listing  # it is running while we look
        assert f"alice-{RUN}" not in listing, "the job's env is on a command line"

        log_file = on_host(task["log_path"])
        env_file = log_file.with_suffix(".env")
        assert mode(log_file.parent) == 0o700
        assert mode(log_file) == 0o600
        assert mode(env_file) == 0o600
        assert env_file.owner() == log_file.owner() == OWNER
        assert f"alice-{RUN}" in env_file.read_text()
    finally:
        stopped = await owner("POST", f"jobs/{job_id}/stop")
    assert stopped.status == 200, stopped
    exit_file = log_file.with_suffix(".exit")
    assert exit_file.exists()
    assert mode(exit_file) == 0o600


async def test_files_of_an_older_run_become_private(api: Any, started: Any) -> None:
    """A log dir and log made 0755/0644 by an older gpuhive are made private on the next start."""
    owner = api(OWNER)
    body = {"name": "again", "gpus": ["gpu1:1"], "command": "echo hello"}
    created = await owner("POST", "jobs", body)
    assert created.status == 201, created
    [task] = created.body["tasks"]
    account = pwd.getpwnam(OWNER)
    log_file = on_host(task["log_path"])
    log_file.parent.mkdir(parents=True, exist_ok=True)
    log_file.write_text("an old run\n")
    for path in (log_file.parent, log_file):
        os.chown(path, account.pw_uid, account.pw_gid)
    log_file.parent.chmod(0o755)
    log_file.chmod(0o644)
    reply = await owner("POST", f"jobs/{created.body['id']}/start")
    assert reply.status == 200, reply

    async def done() -> bool:
        job = (await owner("GET", f"jobs/{created.body['id']}")).body
        return job["status"] == "succeeded" or log_file.with_suffix(".exit").exists()

    await until(done, timeout=20)
    assert mode(log_file.parent) == 0o700
    assert mode(log_file) == 0o600
    assert log_file.read_text().splitlines()[-1] == "hello"


# --- the pool itself: checks, probe loops, kills, messages -------------------------------


def local_decl() -> HostDecl:
    return HostDecl("gpu1", transport="local", extra={"env": {"HOST_MARK": HOST_MARK}})


LOOP = 'while read -r t; do env; printf "%s\\n" "@@end$t"; done'
# What a shell adds by itself to the environment it was given.
SHELL_NAMES = {"PWD", "OLDPWD", "SHLVL", "_"}


def names(text: str) -> set[str]:
    return {line.split("=", 1)[0] for line in text.splitlines() if "=" in line}


@pytest.mark.parametrize("as_owner", [False, True])
async def test_local_commands_get_only_the_base_and_the_hosts_env(
    server_secrets: None, as_owner: bool
) -> None:
    ensure_user(OWNER)
    pool = HostPool([local_decl()])
    try:
        user = OWNER if as_owner else None
        ran = await pool.run("gpu1", "env", user=user)
        looped = await pool.ask("gpu1", LOOP, end="@@end")
    finally:
        await pool.close()
    expected = {"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "TZ", "HOST_MARK"}
    for text in (ran.stdout, looped):
        for secret in SECRETS:
            assert secret not in text, text
        assert names(text) - SHELL_NAMES <= expected, text
        assert f"HOST_MARK={HOST_MARK}" in text.splitlines()
    assert f"USER={OWNER}" in ran.stdout.splitlines() or not as_owner
    home = pwd.getpwnam(OWNER).pw_dir if as_owner else pwd.getpwuid(os.getuid()).pw_dir
    assert f"HOME={home}" in ran.stdout.splitlines()


async def test_ssh_sends_no_variable_of_the_server(server_secrets: None, cluster: Any) -> None:
    host = cluster["gpu1"]
    settings = SshSettings(client_keys=[str(cluster.client_key)],
                           known_hosts=[str(cluster.known_hosts)])  # fmt: skip
    pool = HostPool([HostDecl("gpu1", host.address, host.port, OWNER)], settings)
    try:
        ran = await pool.run("gpu1", "env")
        looped = await pool.ask("gpu1", LOOP, end="@@end")
    finally:
        await pool.close()
    for text in (ran.stdout, looped):
        assert f"USER={OWNER}" in text.splitlines()
        for secret in SECRETS:
            assert secret not in text, text
    # The host would have taken it: a client that sends the variable gets it through.
    async with asyncssh.connect(
        **host.asyncssh_options(OWNER), config=[], send_env=["GPUHIVE_TEST_SECRET"]
    ) as conn:
        sent = await conn.run("env", check=True)
    assert f"GPUHIVE_TEST_SECRET={ENV_SECRET}" in str(sent.stdout).splitlines()
