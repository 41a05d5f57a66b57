"""The replicas deployment of examples/deploy/, run here: a Hub, haproxy, N service replicas.

The recipe's files are used as they are; only the site's addresses and paths are replaced
(`render`): haproxy's frontend, replica and stats ports by free ports, /etc/gpuhive/ by a
directory of the run, /opt/jupyterhub/bin/python by this interpreter, the Hub's API port and
public URL by the test Hub's. A systemd unit is started the way systemd would start it (`unit_command`):
a minimal environment (systemd's PATH, the account's HOME, USER, LOGNAME, SHELL), then its
EnvironmentFile= and Environment= lines (%i is the instance: the replica's port), and its
ExecStart= as the command. The Hub is tests/support/team_hub.py's TeamHub, configured by
examples/jupyterhub_config.py with the environment of examples/deploy/jupyterhub-gpuhive.conf
(the balancer's URL and the shared token file). PostgreSQL is the caller's.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_gpuhive.sim.ports import free_port
from jupyter_gpuhive.sim.sshd import SYSTEM_PATH

from .team_hub import REPO, Reply, TeamHub, call
from .waiting import wait_for

DEPLOY = REPO / "examples" / "deploy"
HAPROXY_CFG = DEPLOY / "haproxy.cfg"
REPLICA_UNIT = DEPLOY / "gpuhive@.service"
REPLICA_ENV = DEPLOY / "replica.env"
HUB_DROPIN = DEPLOY / "jupyterhub-gpuhive.conf"
# The addresses the recipe's files name (a site's, as docs/how-to/replicas.md shows them).
SITE_BALANCER, SITE_STATS, SITE_HUB_API = "127.0.0.1:10100", "127.0.0.1:10109", "127.0.0.1:8081"
SITE_REPLICAS = ("127.0.0.1:10101", "127.0.0.1:10102")  # gpuhive@1, gpuhive@2
SITE_HEALTH = ("10111", "10112")  # their health ports
SITE_CONFIG = "/etc/gpuhive/gpuhive_config.py"
SITE_PUBLIC = "https://hub.example.org/"  # replica.env: the Hub's public URL + services/gpuhive/
SITE_ETC = "/etc/gpuhive/"
SITE_PYTHON = "/opt/jupyterhub/bin/python"
PREFIX = "/services/gpuhive/"


def render(text: str, replace: Mapping[str, str]) -> str:
    """`text` with each key replaced by its value, in order; every key must occur."""
    for old, new in replace.items():
        if old not in text:
            raise ValueError(f"{old!r} does not occur in the recipe's file")
        text = text.replace(old, new)
    return text


def find_haproxy() -> str:
    found = shutil.which("haproxy") or (
        "/usr/sbin/haproxy" if os.path.exists("/usr/sbin/haproxy") else None
    )
    if not found:
        raise RuntimeError(
            "haproxy was not found: run `make sysdeps` (it installs Debian's haproxy)."
        )
    return found


def read_environment_file(path: Path) -> dict[str, str]:
    """A systemd EnvironmentFile: KEY=value lines, # comments, optional quotes."""
    env: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        name, _, value = line.partition("=")
        env[name.strip()] = value.strip().strip("'\"")
    return env


@dataclass
class UnitCommand:
    """What systemd would run for a unit: the command and its environment."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)


def unit_environment(text: str, instance: str = "") -> dict[str, str]:
    """The environment a unit's [Service] section gives (a drop-in's too) for `instance`."""
    return unit_command(text, instance, need_exec=False).env


def unit_command(text: str, instance: str = "", *, need_exec: bool = True) -> UnitCommand:
    """The [Service] section's ExecStart and environment (files, then lines) for `instance`."""
    account = pwd.getpwuid(os.geteuid())
    env = {
        "PATH": SYSTEM_PATH,
        "LANG": "C.UTF-8",
        "HOME": account.pw_dir,
        "USER": account.pw_name,
        "LOGNAME": account.pw_name,
        "SHELL": account.pw_shell,
    }
    argv: list[str] = []
    section = ""
    lines: dict[str, str] = {}
    for raw in text.replace("%i", instance).splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line
            continue
        if section != "[Service]":
            continue
        key, _, value = line.partition("=")
        if key == "EnvironmentFile":
            optional = value.startswith("-")
            path = Path(value.lstrip("-"))
            if path.exists() or not optional:
                env.update(read_environment_file(path))
        elif key == "Environment":
            for item in shlex.split(value):
                name, _, val = item.partition("=")
                lines[name] = val
        elif key == "ExecStart":
            argv = shlex.split(value)
    env.update(lines)  # systemd: Environment= is read before EnvironmentFile= overrides it;
    # the recipe's files never set one name in both, so the order does not matter here.
    if need_exec and not argv:
        raise ValueError("the unit has no ExecStart=")
    return UnitCommand(argv, env)


class Replica:
    """One gpuhive@PORT.service, started from the recipe's unit file."""

    def __init__(
        self, name: str, port: int, health_port: int, command: UnitCommand, log: Path
    ) -> None:
        self.name, self.port, self.health_port = name, port, health_port
        self.command, self.log_path = command, log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, cwd: Path) -> None:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.command.argv,
                env=self.command.env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def url(self, path: str = "") -> str:
        return f"http://127.0.0.1:{self.port}{PREFIX}{path}"

    def health(self, timeout: float = 2) -> Reply:
        """PREFIX/health on the service's own port (answered by its event loop)."""
        return call("GET", self.url("health"), timeout=timeout)

    def probe(self, timeout: float = 2) -> Reply:
        """The health port haproxy checks (answered by a thread of its own)."""
        return call("GET", f"http://127.0.0.1:{self.health_port}/health", timeout=timeout)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(20)
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(5)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, chars: int = 4000) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-chars:]
        return ""


class ReplicaStack:
    """JupyterHub + haproxy + `replicas` gpuhive replicas on `db_url`, from examples/deploy/."""

    def __init__(
        self,
        db_url: str,
        users: dict[str, list[str]],
        *,
        replicas: int = 2,
        service_settings: dict[str, Any] | None = None,
        log_level: str = "WARN",
        hub_db_url: str | None = None,
    ) -> None:
        if not 1 <= replicas <= len(SITE_REPLICAS):
            raise ValueError(f"the recipe's haproxy.cfg has {len(SITE_REPLICAS)} replicas")
        self.haproxy_bin = find_haproxy()
        self.dir = Path(tempfile.mkdtemp(prefix="gpuhive-deploy-"))
        os.chmod(self.dir, 0o755)
        self.etc = self.dir / "etc-gpuhive"
        self.etc.mkdir()
        self.balancer_port, self.stats_port = free_port(), free_port()
        self.replica_ports = [free_port() for _ in range(replicas)]
        self.health_ports = [free_port() for _ in range(replicas)]
        # The shared service token: one secret file, 0600, read by the Hub and the replicas.
        self.token = secrets.token_hex(32)
        token_file = self.etc / "service-token.env"
        token_file.write_text(f"JUPYTERHUB_API_TOKEN={self.token}\n")
        token_file.chmod(0o600)
        hub_env = unit_environment(self._render(HUB_DROPIN.read_text()))
        self.hub = TeamHub(
            db_url,
            users,
            service_settings=service_settings,
            log_level=log_level,
            balancer_url=hub_env["GPUHIVE_SERVICE_URL"],
            service_token_file=Path(hub_env["GPUHIVE_SERVICE_TOKEN_FILE"]),
            hub_db_url=hub_db_url,
            # c.JupyterHub.public_url, under another name of the proxy's address (so that a
            # URL built from it is told apart from one built from a request's Host)
            public_host="localhost",
        )
        self.replicas: list[Replica] = []
        self.haproxy: subprocess.Popen[bytes] | None = None
        self.haproxy_cfg = self.dir / "haproxy.cfg"

    # --- the recipe's files, rendered ----------------------------------------------------

    def _render(self, text: str, **extra: str) -> str:
        """Replace the site's addresses and paths that occur in `text` by this run's."""
        replace = {
            SITE_BALANCER: f"127.0.0.1:{self.balancer_port}",
            SITE_STATS: f"127.0.0.1:{self.stats_port}",
            **{
                site: f"127.0.0.1:{port}"
                for site, port in zip(SITE_REPLICAS, self.replica_ports, strict=False)
            },
            **{
                f"{form}{site}": f"{form}{port}"
                for site, port in zip(SITE_HEALTH, self.health_ports, strict=False)
                for form in ("check port ", "health_port=")
            },
            **extra,
            SITE_ETC: f"{self.etc}/",
            SITE_PYTHON: sys.executable,
        }
        return render(text, {old: new for old, new in replace.items() if old in text})

    def haproxy_config(self) -> str:
        """examples/deploy/haproxy.cfg for this run (unused replica lines dropped)."""
        text = HAPROXY_CFG.read_text()
        for unused in SITE_REPLICAS[len(self.replica_ports) :]:
            text = "\n".join(ln for ln in text.splitlines() if unused not in ln) + "\n"
        return self._render(text)

    def check_haproxy(self) -> subprocess.CompletedProcess[str]:
        """`haproxy -c` on the rendered file."""
        self.haproxy_cfg.write_text(self.haproxy_config())
        return subprocess.run(
            [self.haproxy_bin, "-c", "-f", str(self.haproxy_cfg)],
            capture_output=True,
            text=True,
            timeout=30,
        )

    def replica_unit(self, instance: int) -> str:
        """gpuhive@.service for gpuhive@`instance` (%i substituted, then rendered)."""
        text = REPLICA_UNIT.read_text().replace("%i", str(instance))
        return self._render(text, **{SITE_CONFIG: str(self.hub.service_config)})

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self, timeout: float = 90) -> ReplicaStack:
        """Start the Hub and, meanwhile, the replicas and haproxy; wait until all serve."""
        hub_error: list[BaseException] = []

        def start_hub() -> None:
            try:
                self.hub.start(timeout)
            except BaseException as error:  # re-raised below, in the caller's thread
                hub_error.append(error)

        hub_thread = threading.Thread(target=start_hub, name="hub-start")
        hub_thread.start()
        try:
            api_port = self.hub.hub_port
            self._start_replicas(timeout)
            hub_thread.join()
            if hub_error:
                raise hub_error[0]
            if self.hub.hub_port != api_port:  # the Hub moved to other ports (one was taken)
                for replica in self.replicas:
                    replica.kill(signal.SIGTERM)
                self.replicas.clear()
                self._start_replicas(timeout)
            checked = self.check_haproxy()
            if checked.returncode != 0:
                raise RuntimeError(f"haproxy -c: {checked.stdout}{checked.stderr}")
            with open(self.dir / "haproxy.log", "ab") as log:
                self.haproxy = subprocess.Popen(
                    [self.haproxy_bin, "-db", "-f", str(self.haproxy_cfg)],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            wait_for(
                lambda: self.up() == {r.name for r in self.replicas},
                timeout,
                "haproxy: every replica up",
                0.2,
                (OSError,),
            )
        except BaseException:
            hub_thread.join()
            tails = "".join(f"\n--- {r.name} ---\n{r.log_tail()}" for r in self.replicas)
            print(f"--- jupyterhub.log ---\n{self.hub.log_tail()}{tails}", file=sys.stderr)
            self.stop()
            raise
        return self

    def _start_replicas(self, timeout: float) -> None:
        """Every replica from the unit file, all at once on the new database."""
        env_file = self.etc / "replica.env"
        env_file.write_text(
            render(
                REPLICA_ENV.read_text(),
                {SITE_HUB_API: f"127.0.0.1:{self.hub.hub_port}", SITE_PUBLIC: self.hub.public_url},
            )
        )
        for i, (port, health) in enumerate(
            zip(self.replica_ports, self.health_ports, strict=True), 1
        ):
            command = unit_command(self.replica_unit(i))
            replica = Replica(f"replica{i}", port, health, command, self.dir / f"replica{i}.log")
            replica.start(self.dir)  # all at once, as `systemctl start gpuhive@1 gpuhive@2`:
            self.replicas.append(replica)  # they take turns at the schema (Database.migrate)
        for replica in self.replicas:
            self._wait_up(replica, timeout)

    def _wait_up(self, replica: Replica, timeout: float) -> None:
        wait_for(
            lambda: self._replica_up(replica), timeout, f"{replica.name} start", 0.1, (OSError,)
        )

    def _replica_up(self, replica: Replica) -> bool:
        if not replica.alive():
            raise RuntimeError(f"{replica.name} exited:\n{replica.log_tail()}")
        return replica.health().status == 200

    def up(self) -> set[str]:
        """The replicas haproxy's status page shows UP."""
        reply = call("GET", f"http://127.0.0.1:{self.stats_port}/;csv", timeout=2)
        names = set()
        for line in str(reply.body).splitlines():
            cells = line.split(",")
            server = len(cells) > 17 and cells[1] not in ("FRONTEND", "BACKEND")
            if server and cells[0] == "gpuhive_replicas" and cells[17].startswith("UP"):
                names.add(cells[1])
        return names

    def stop(self) -> None:
        for replica in self.replicas:
            replica.kill(signal.SIGTERM)
        if self.haproxy is not None and self.haproxy.poll() is None:
            self.haproxy.terminate()
            try:
                self.haproxy.wait(10)
            except subprocess.TimeoutExpired:
                self.haproxy.kill()
                self.haproxy.wait(5)
        self.hub.stop()

    def cleanup(self) -> None:
        """Stop everything; remove the files unless GPUHIVE_KEEP_HUB is set."""
        self.stop()
        self.hub.cleanup()
        if os.environ.get("GPUHIVE_KEEP_HUB"):
            print(f"gpuhive: deployment files kept in {self.dir}")
        else:
            shutil.rmtree(self.dir, ignore_errors=True)

    # --- URLs -----------------------------------------------------------------------------

    @property
    def balancer_url(self) -> str:
        """The service through haproxy (what the Hub's route and users' servers call)."""
        return f"http://127.0.0.1:{self.balancer_port}{PREFIX}"

    def replica(self, name: str) -> Replica:
        return next(r for r in self.replicas if r.name == name)

    def leaders(self) -> set[str]:
        """The replicas whose /health says they lead (a dead or silent one says nothing)."""
        found = set()
        for replica in self.replicas:
            with contextlib.suppress(OSError):
                reply = replica.health(timeout=1)
                if (
                    reply.status == 200
                    and isinstance(reply.body, dict)
                    and reply.body.get("leader")
                ):
                    found.add(replica.name)
        return found
