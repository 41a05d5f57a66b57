"""docs/team-mode.md's quick start and replicas.md's shell loop, run from the docs' own blocks.

The quick start's blocks are read from the document and run in order, as real processes:
its shell commands with bash, its two Python files written where their first line says. Only
the site's values are replaced: /srv/gpuhive-trial by a temporary folder, /opt/jupyterhub/bin/
by this environment's bin/, and the Hub's four ports by free ones (`trial_values`). The Hub
runs with the documented SharedPasswordAuthenticator and SimpleLocalProcessSpawner, starts the gpuhive
service itself, and is stopped with SIGINT, as Ctrl-C in its terminal would. The install block
(pip, apt-get, npm) is the one block not run: this environment has what it installs.

The shell loop of "Without systemd" (examples/deploy/gpuhive-replicas.sh) is installed and
started by the how-to's two commands and runs two replicas on a real PostgreSQL.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_gpuhive._version import __version__
from jupyter_gpuhive.sim.ports import free_port
from jupyter_gpuhive.sim.sshd import SYSTEM_PATH
from tests.support.deploy import REPLICA_ENV, SITE_HUB_API, SITE_PUBLIC, render
from tests.support.docblocks import Block, code_blocks
from tests.support.postgres import PostgresCluster
from tests.support.team_hub import REPO, Reply, call, find_proxy, service_processes
from tests.support.waiting import wait_for

pytestmark = pytest.mark.hub

DOC = REPO / "docs" / "team-mode.md"
QUICK_START = "Quick start: a trial on one machine"
REPLICAS_DOC = REPO / "docs" / "how-to" / "replicas.md"
TRIAL = "/srv/gpuhive-trial"
VENV_BIN = Path(sys.executable).parent
SITE_PORTS = ("127.0.0.1:8000", "127.0.0.1:8081", "127.0.0.1:8001", "GPUHIVE_SERVICE_PORT=10101")
PASSWORD = "try-gpuhive"  # the quick start's shared password


def trial_values(folder: Path) -> dict[str, str]:
    """The site's values in the quick start, and this run's in their place."""
    values = {site: f"{site.rstrip('0123456789')}{free_port()}" for site in SITE_PORTS}
    values[TRIAL] = str(folder)
    values["/opt/jupyterhub/bin/"] = f"{VENV_BIN}/"
    return values


def rendered(block: Block, values: dict[str, str]) -> str:
    return render(block.text, {site: ours for site, ours in values.items() if site in block.text})


def shell_env(home: Path) -> dict[str, str]:
    """A login-like environment; the proxy on the PATH, as `npm install --global` puts it."""
    return {"PATH": f"{Path(find_proxy()).parent}:{SYSTEM_PATH}", "HOME": str(home),
            "LANG": "C.UTF-8", "USER": "root", "LOGNAME": "root"}  # fmt: skip


def bash(script: str, env: dict[str, str], cwd: Path) -> str:
    """Run `script` with bash, stop at the first failing command; its standard output."""
    done = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", script],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, (script, done.stdout, done.stderr)
    return done.stdout


def json_lines(output: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in output.splitlines() if line.strip()]


class Trial:
    """The quick start's Hub, started from the document's block (and everything it starts)."""

    def __init__(self, folder: Path, values: dict[str, str]) -> None:
        self.folder, self.values = folder, values
        self.url = "http://" + values["127.0.0.1:8000"]
        self.hub: subprocess.Popen[bytes] | None = None

    def start(self, block: str, env: dict[str, str]) -> None:
        with open(self.folder / "hub.log", "wb") as log:
            self.hub = subprocess.Popen(
                ["bash", "-e", "-c", block], env=env, cwd=self.folder, stdout=log,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        wait_for(self._serves, 90, "the trial Hub and its gpuhive service", 0.2, (OSError,))

    def _serves(self) -> bool:
        assert self.hub is not None and self.hub.poll() is None, self.log_tail()
        return call("GET", f"{self.url}/services/gpuhive/health", timeout=2).status == 200

    def log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return (self.folder / "hub.log").read_text(errors="replace")[-5000:]
        return ""

    def token(self, user: str, *scopes: str) -> str:
        """A token made as the quick start makes alice's: the Hub's API, name and password."""
        body = {"auth": {"username": user, "password": PASSWORD},
                "scopes": ["access:services!service=gpuhive", *scopes]}  # fmt: skip
        made = call("POST", f"{self.url}/hub/api/users/{user}/tokens", body=body)
        assert made.status in (200, 201), made
        return str(made.body["token"])

    def api(self, token: str | None, method: str, path: str, body: object = None) -> Reply:
        return call(method, f"{self.url}/services/gpuhive/api/{path}", token, body)

    def leftovers(self) -> list[int]:
        """The service and proxy processes still running."""
        pids = list(service_processes(self.folder / "jupyter_gpuhive_config.py"))
        with contextlib.suppress(OSError, ValueError):
            proxy = int((self.folder / "jupyterhub-proxy.pid").read_text())
            if b"configurable-http-proxy" in Path(f"/proc/{proxy}/cmdline").read_bytes():
                pids.append(proxy)
        return pids

    def interrupt(self) -> int | None:
        """Ctrl-C in the Hub's terminal (SIGINT to its process group); the Hub's exit status."""
        if self.hub is None or self.hub.poll() is not None:
            return None if self.hub is None else self.hub.returncode
        os.killpg(self.hub.pid, signal.SIGINT)
        try:
            return self.hub.wait(30)
        except subprocess.TimeoutExpired:
            return None

    def kill_all(self) -> None:
        if self.hub is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.hub.pid, signal.SIGKILL)
            self.hub.wait(5)
        for pid in self.leftovers():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_the_quick_start_books_through_the_hub_as_written(tmp_path: Path) -> None:
    blocks = code_blocks(DOC, QUICK_START)
    installs = [b for b in blocks if "pip install" in b.text]
    assert len(installs) == 1 and "npm install --global configurable-http-proxy" in installs[0].text
    assert f"jupyter_gpuhive-{__version__}-py3-none-any.whl[hub,lab]" in installs[0].text
    values = trial_values(tmp_path / "trial")
    env = shell_env(tmp_path)
    trial = Trial(tmp_path / "trial", values)
    steps = [b for b in blocks if b not in installs]
    try:
        outputs = []
        for index, block in enumerate(steps):
            text = rendered(block, values)
            if block.language == "python":  # a file: its first line names where it goes
                path = Path(text.splitlines()[0].removeprefix("# ").split(":")[0])
                assert path.parent == trial.folder, text.splitlines()[0]
                path.write_text(text)
            elif "jupyterhub -f" in text:  # the Hub, in the foreground of its own terminal
                trial.start(text, env)
            elif "TOKEN=$(" in text:  # the token and the calls that use it: one shell
                outputs.append(bash(text + rendered(steps[index + 1], values), env, REPO))
                break
            else:
                outputs.append(bash(text, env, REPO))
        assert (trial.folder / "hosts.toml").exists(), "sim up wrote no hosts file"
        health, calls = json_lines(outputs[-2]), json_lines(outputs[-1])
        assert health == [{"ok": True, "leader": True}]
        me, booked = calls
        assert (me["name"], me["admin"]) == ("alice", False), me
        assert (booked["owner"], booked["title"]) == ("alice", "first try"), booked
        assert booked["gpus"] == ["sim1:0"], booked

        # What the quick start says one sees next, checked through the same Hub.
        bob, carol = trial.token("bob"), trial.token("carol", "custom:gpuhive:admin")
        hosts = trial.api(bob, "GET", "hosts")
        assert hosts.status == 200, hosts
        assert {h["name"]: len(h["gpus"]) for h in hosts.body["hosts"]} == {"sim1": 4, "sim2": 4}
        clash = trial.api(bob, "POST", "reservations",
                          {"title": "mine", "gpus": ["sim1:0"], "duration": "1h"})  # fmt: skip
        assert clash.status == 409, clash
        refused = trial.api(bob, "DELETE", f"reservations/{booked['id']}")
        assert refused.status == 403, refused
        assert trial.api(None, "GET", "me").status == 401  # no token: nobody
        cancelled = trial.api(carol, "DELETE", f"reservations/{booked['id']}")
        assert cancelled.status in (200, 204), cancelled  # carol is in `admins`

        # Ctrl-C stops everything the Hub started.
        assert trial.leftovers(), "no service or proxy process found while the Hub ran"
        assert trial.interrupt() is not None, "the Hub did not stop on SIGINT"
        wait_for(lambda: not trial.leftovers(), 20, "the service and proxy stop with the Hub")
    except BaseException:
        print(f"--- the trial Hub's log ---\n{trial.log_tail()}", file=sys.stderr)
        raise
    finally:
        trial.kill_all()


# --- Without systemd: the shell loop ---------------------------------------------------------


@pytest.fixture
def loop_site(tmp_path: Path, postgres: PostgresCluster) -> Iterator[dict[str, str]]:
    """/etc/gpuhive/ for two replicas (their config, replica.env, the how-to's token file)."""
    etc = tmp_path / "etc-gpuhive"
    etc.mkdir()
    config = etc / "gpuhive_config.py"
    config.write_text(
        "c = get_config()  # noqa: F821\n"
        f"c.GpuHiveApp.db_url = {postgres.new_database()!r}\n"
        "c.GpuHiveApp.hosts = []\nc.GpuHiveApp.poll_interval = 1.0\n"
    )
    replace = {SITE_HUB_API: f"127.0.0.1:{free_port()}", SITE_PUBLIC: "http://127.0.0.1:8000/"}
    (etc / "replica.env").write_text(render(REPLICA_ENV.read_text(), replace))
    (made,) = code_blocks(REPLICAS_DOC, "1. The token")  # the how-to's token file, made here
    bash(render(made.text, {"/etc/gpuhive": str(etc)}), shell_env(tmp_path), tmp_path)
    token = (etc / "service-token.env").read_text()
    assert re.fullmatch(r"JUPYTERHUB_API_TOKEN=[0-9a-f]{64}\n", token), token
    assert (etc / "service-token.env").stat().st_mode & 0o777 == 0o600
    (tmp_path / "bin").mkdir()
    yield {"/etc/gpuhive": str(etc), "/opt/jupyterhub/bin/": f"{tmp_path}/bin/",
           "config": str(config)}  # fmt: skip
    for pid in service_processes(config):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def replicas_by_port(config: str) -> dict[int, int]:
    """Running replicas of `config`: their port -> pid."""
    found = {}
    for pid, env in service_processes(Path(config)).items():
        found[int(env["JUPYTERHUB_SERVICE_URL"].rsplit(":", 1)[1])] = pid
    return found


def leading(ports: list[int]) -> list[bool]:
    """Each replica's /health: whether it leads (raises while one does not answer)."""
    answers = [call("GET", f"http://127.0.0.1:{p}/services/gpuhive/health", timeout=2)
               for p in ports]  # fmt: skip
    assert all(a.status == 200 for a in answers), answers
    return [bool(a.body["leader"]) for a in answers]


def test_the_shell_loop_runs_restarts_and_stops_the_replicas(
    tmp_path: Path, loop_site: dict[str, str]
) -> None:
    section = code_blocks(REPLICAS_DOC, "Without systemd")
    install, start = (b.text for b in section[:2])
    assert install.startswith("install ") and "gpuhive-replicas.sh" in install
    assert start.strip().startswith("/opt/jupyterhub/bin/gpuhive-replicas ")
    ports = {site: str(free_port()) for site in ("10101", "10102", "10111", "10112")}
    values = {"/opt/jupyterhub/bin/": loop_site["/opt/jupyterhub/bin/"], **ports}
    env = shell_env(tmp_path)
    bash(render(install, {k: v for k, v in values.items() if k in install}), env, REPO)
    installed = tmp_path / "bin" / "gpuhive-replicas"
    assert os.access(installed, os.X_OK)
    # The script's two site paths, as its header says to edit them.
    installed.write_text(render(installed.read_text(), {
        "ETC=/etc/gpuhive": f"ETC={loop_site['/etc/gpuhive']}",
        "PYTHON=/opt/jupyterhub/bin/python": f"PYTHON={sys.executable}",
    }))  # fmt: skip
    argv = shlex.split(render(start, values))
    api = [int(ports["10101"]), int(ports["10102"])]
    with open(tmp_path / "loop.log", "wb") as log:
        loop = subprocess.Popen(argv, env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    try:
        wait_for(lambda: sorted(leading(api)) == [False, True], 60, "two replicas, one leads",
                 0.2, (OSError, AssertionError))  # fmt: skip
        first = replicas_by_port(loop_site["config"])
        assert sorted(first) == sorted(api), first
        os.kill(first[api[0]], signal.SIGKILL)
        wait_for(
            lambda: replicas_by_port(loop_site["config"]).get(api[0], first[api[0]]) != first[api[0]]
            and sorted(leading(api)) == [False, True],
            30, "the killed replica restarted", 0.2, (OSError, AssertionError),
        )  # fmt: skip
        loop.send_signal(signal.SIGTERM)
        assert loop.wait(30) == 0
        assert replicas_by_port(loop_site["config"]) == {}  # every replica ended with the loop
        text = (tmp_path / "loop.log").read_text(errors="replace")
        assert f"the replica on port {api[0]} exited" in text, text[-3000:]
    finally:
        if loop.poll() is None:
            os.killpg(loop.pid, signal.SIGKILL)
            loop.wait(5)
