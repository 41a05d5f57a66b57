"""A real JupyterHub in team mode for the tests and `benchmarks/team.py`.

JupyterHub (DummyAuthenticator with a password, SimpleLocalProcessSpawner) behind a real
configurable-http-proxy from npm, configured by `examples/jupyterhub_config.py` itself
(the tested deployment example), with the gpuhive service managed by the Hub on a real
PostgreSQL. The generated jupyterhub_config.py is what a site's would be: its own settings
(authenticator, spawner, ports, groups, a service and role for the test driver), then, as
its last line, `load_subconfig` of the example, exactly as docs/team-mode.md says.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tests.fixtures.postgres import free_port

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "jupyterhub_config.py"
PASSWORD = "gpuhive-test-password"  # the DummyAuthenticator's shared password
CHP_ENV = "GPUHIVE_CHP"
LOCAL_CHP = REPO / ".venv" / "node" / "node_modules" / ".bin" / "configurable-http-proxy"

HOSTS = [
    {"name": f"gpu{h}", "address": "127.0.0.1", "transport": "local", "gpu_count": 4,
     "gpu_model": "Simulated A100"}
    for h in (1, 2, 3)
]  # fmt: skip


class HubSetupError(RuntimeError):
    """The Hub cannot be set up here; the message says what to install."""


def find_proxy() -> str:
    """configurable-http-proxy: $GPUHIVE_CHP, the Makefile's .venv/node copy, or PATH."""
    candidates = [
        os.environ.get(CHP_ENV, ""),
        str(LOCAL_CHP),
        shutil.which("configurable-http-proxy"),
    ]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise HubSetupError(
        "configurable-http-proxy (npm) was not found: run `make venv` (it installs it into "
        f".venv/node/), or `npm install --prefix .venv/node configurable-http-proxy`, or set "
        f"{CHP_ENV} to the binary."
    )


def check_jupyterhub() -> None:
    try:
        import jupyterhub  # noqa: F401
    except ImportError:
        raise HubSetupError(
            "jupyterhub is not installed in this environment: run `make venv` "
            "(pip install -e '.[test]')."
        ) from None


class Reply:
    """A decoded HTTP answer."""

    def __init__(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        self.status, self.body, self.headers = status, body, headers or {}

    @property
    def message(self) -> str:
        return str(self.body.get("message", "")) if isinstance(self.body, dict) else ""

    def __repr__(self) -> str:
        return f"Reply({self.status}, {self.body!r})"


def call(
    method: str,
    url: str,
    token: str | None = None,
    body: Any = None,
    headers: dict[str, str] | None = None,
    timeout: float = 30,
) -> Reply:
    """One HTTP request (new connection); JSON in and out; never raises on 4xx/5xx."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=timeout)
    sent = dict(headers or {})
    if token is not None:
        sent["Authorization"] = f"token {token}"
    payload = json.dumps(body).encode() if body is not None else None
    if payload is not None:
        sent["Content-Type"] = "application/json"
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    try:
        conn.request(method, path, body=payload, headers=sent)
        response = conn.getresponse()
        raw = response.read()
    finally:
        conn.close()
    try:
        data: Any = json.loads(raw) if raw else None
    except ValueError:
        data = raw.decode(errors="replace")
    return Reply(response.status, data, dict(response.getheaders()))


def wait_for(predicate: Any, timeout: float, what: str, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
        except OSError as error:
            last = error
        else:
            if last:
                return last
        time.sleep(interval)
    raise TimeoutError(f"{what} did not happen within {timeout:.0f} s (last: {last!r})")


def service_processes(config_file: Path) -> dict[int, dict[str, str]]:
    """Running `python -m jupyter_gpuhive.hub --config FILE` processes: pid -> environment."""
    found: dict[int, dict[str, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if b"jupyter_gpuhive.hub" not in argv or str(config_file).encode() not in argv:
                continue
            raw = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        env = dict(item.decode().split("=", 1) for item in raw if b"=" in item)
        found[int(entry.name)] = env
    return found


class TeamHub:
    """JupyterHub + proxy + the gpuhive service (Hub-managed) on a given PostgreSQL URL."""

    def __init__(
        self,
        db_url: str,
        users: dict[str, list[str]],
        *,
        service_settings: dict[str, Any] | None = None,
        home_files: dict[str, dict[str, str]] | None = None,
        log_level: str = "INFO",
    ) -> None:
        check_jupyterhub()
        self.proxy_bin = find_proxy()
        self.db_url = db_url
        self.users = users  # name -> groups
        self.dir = Path(tempfile.mkdtemp(prefix="gpuhive-hub-"))
        os.chmod(self.dir, 0o755)
        self._pick_ports()
        self.admin_token = secrets.token_hex(24)
        self.service_config = self.dir / "gpuhive_service_config.py"
        settings = {
            "db_url": db_url,
            "hosts": HOSTS,
            "site_timezone": "Europe/Warsaw",
            "monitor": False,
            "poll_interval": 1.0,
            "min_reservation": "10m",
            "max_reservation": "3d",
            "booking_horizon": "30d",
            **(service_settings or {}),
        }
        lines = ["c = get_config()  # noqa: F821"]
        lines += [f"c.GpuHiveApp.{key} = {value!r}" for key, value in settings.items()]
        self.service_config.write_text("\n".join(lines) + "\n")
        for user, files in (home_files or {}).items():
            for relative, text in files.items():
                target = self.home(user) / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text)
        self.config = self.dir / "jupyterhub_config.py"
        self.log_level = log_level
        self.config.write_text(self._hub_config(log_level))
        self.process: subprocess.Popen[bytes] | None = None
        self.token_ids: dict[str, str] = {}  # token -> its id in the Hub (for revoking)

    def home(self, user: str) -> Path:
        return self.dir / "home" / user

    def _hub_config(self, log_level: str) -> str:
        groups: dict[str, dict[str, list[str]]] = {}
        for user, user_groups in self.users.items():
            for group in user_groups:
                groups.setdefault(group, {"users": []})["users"].append(user)
        # A site's own jupyterhub_config.py, ending as docs/team-mode.md says: the example
        # is loaded last and adds to these settings (services, roles, Spawner.args, ...).
        return f"""\
# Generated by tests/hub/team_hub.py: a site's own settings, then the example (last).
c = get_config()  # noqa: F821

# --- the site's own settings (test-only: ports, files, authenticator, spawner) ---
c.JupyterHub.bind_url = {self.url!r}
c.JupyterHub.hub_bind_url = "http://127.0.0.1:{self.hub_port}"
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{self.proxy_api_port}"
c.ConfigurableHTTPProxy.command = [{self.proxy_bin!r}]
c.ConfigurableHTTPProxy.pid_file = {str(self.dir / "proxy.pid")!r}
c.JupyterHub.db_url = "sqlite:///{self.dir / "jupyterhub.sqlite"}"
c.JupyterHub.cookie_secret_file = {str(self.dir / "cookie_secret")!r}
c.JupyterHub.pid_file = {str(self.dir / "jupyterhub.pid")!r}
c.JupyterHub.log_level = {log_level!r}
c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = {PASSWORD!r}
c.Authenticator.allowed_users = {set(self.users)!r}
c.JupyterHub.load_groups = {groups!r}
c.JupyterHub.spawner_class = "simple"
c.SimpleLocalProcessSpawner.home_dir_template = {str(self.dir / "home" / "{username}")!r}
c.Spawner.cmd = [{sys.executable!r}, "-m", "jupyterhub.singleuser"]
c.Spawner.args = ["--allow-root"]  # we run as root here
c.JupyterHub.tornado_settings = {{"slow_spawn_timeout": 0}}  # spawn requests return at once
c.Spawner.start_timeout = 60
c.LocalProcessSpawner.interrupt_timeout = 1  # a server without a tty waits 5 s on SIGINT
c.Spawner.http_timeout = 60
# The test driver: a service token that may create users' tokens and start their servers.
c.JupyterHub.services = [{{"name": "test-driver", "api_token": {self.admin_token!r}}}]
c.JupyterHub.load_roles = [{{
    "name": "test-driver",
    "scopes": ["admin:users", "admin:servers", "tokens", "admin:groups", "read:services"],
    "services": ["test-driver"],
}}]

# --- gpuhive, as docs/team-mode.md says: the last line ---
load_subconfig({str(EXAMPLE)!r})  # noqa: F821
"""

    # --- lifecycle ------------------------------------------------------------------

    def _pick_ports(self) -> None:
        # Picked bind-then-close: another process may take one before the Hub binds it.
        self.port, self.hub_port, self.proxy_api_port, self.service_port = (
            free_port(), free_port(), free_port(), free_port()
        )  # fmt: skip
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60) -> TeamHub:
        """Start the Hub (and its gpuhive service); once more on new ports if one was taken."""
        try:
            return self._start(timeout)
        except RuntimeError as error:
            if "Address already in use" not in str(error):
                raise
        self._pick_ports()
        self.config.write_text(self._hub_config(self.log_level))
        return self._start(timeout)

    def _start(self, timeout: float) -> TeamHub:
        env = {
            **os.environ,
            "GPUHIVE_SERVICE_PORT": str(self.service_port),
            "GPUHIVE_SERVICE_CONFIG": str(self.service_config),
            "GPUHIVE_PYTHON": sys.executable,
        }
        self.log = open(self.dir / "jupyterhub.log", "wb")  # noqa: SIM115
        self.process = subprocess.Popen(
            [sys.executable, "-m", "jupyterhub", "-f", str(self.config)],
            cwd=self.dir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            wait_for(self._up, timeout, "JupyterHub start")
            wait_for(lambda: self.health(self.service_port).status == 200, timeout, "service start")
        except (TimeoutError, RuntimeError) as error:
            self.stop()
            raise RuntimeError(f"{error}\n--- jupyterhub.log ---\n{self.log_tail()}") from None
        return self

    def _up(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(f"JupyterHub exited with {self.process.returncode}")
        return call("GET", f"{self.url}/hub/api/", timeout=2).status == 200

    def log_tail(self, chars: int = 6000) -> str:
        try:
            return (self.dir / "jupyterhub.log").read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)  # the Hub stops servers, service, proxy
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(5)
        # Never leave anything behind, also when the Hub itself failed: whatever is left of
        # its process group (the proxy it started), and every service replica.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        pids = list(service_processes(self.service_config))
        with contextlib.suppress(OSError, ValueError):
            proxy = int((self.dir / "proxy.pid").read_text())
            if b"configurable-http-proxy" in Path(f"/proc/{proxy}/cmdline").read_bytes():
                pids.append(proxy)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.log.close()
        self.process = None

    def cleanup(self) -> None:
        """Stop everything; remove the files unless GPUHIVE_KEEP_HUB is set (for debugging)."""
        self.stop()
        if os.environ.get("GPUHIVE_KEEP_HUB"):
            print(f"gpuhive: Hub files kept in {self.dir}")
        else:
            shutil.rmtree(self.dir, ignore_errors=True)

    # --- Hub API --------------------------------------------------------------------

    def api(self, method: str, path: str, body: Any = None) -> Reply:
        return call(method, f"{self.url}/hub/api/{path.lstrip('/')}", self.admin_token, body)

    def token_for(self, user: str, scopes: Iterable[str], note: str = "test") -> str:
        """A new API token of `user`, with (at most) those scopes."""
        made = self.api("POST", f"users/{user}/tokens", {"scopes": list(scopes), "note": note})
        assert made.status in (200, 201), made
        token = str(made.body["token"])
        self.token_ids[token] = str(made.body["id"])
        return token

    def revoke(self, user: str, token: str) -> None:
        """Revoke one of `user`'s tokens made by `token_for`, through the Hub's API."""
        done = self.api("DELETE", f"users/{user}/tokens/{self.token_ids[token]}")
        assert done.status == 204, done

    def spawn(self, users: Iterable[str], timeout: float = 60) -> None:
        """Start the users' own servers (in parallel) and wait until all are ready."""
        users = list(users)
        for user in users:
            started = self.api("POST", f"users/{user}/server")
            if started.status not in (201, 202, 400):  # 400: already running
                raise RuntimeError(f"spawn {user}: {started}\n{self.log_tail()}")

        def ready() -> bool:
            for user in users:
                model = self.api("GET", f"users/{user}").body
                server = (model.get("servers") or {}).get("")
                if not server or not server.get("ready"):
                    return False
            return True

        try:
            wait_for(ready, timeout, f"servers of {', '.join(users)}", interval=0.25)
        except TimeoutError as error:
            raise RuntimeError(f"{error}\n--- jupyterhub.log ---\n{self.log_tail()}") from None

    # --- URLs -----------------------------------------------------------------------

    @property
    def service_prefix(self) -> str:
        return "/services/gpuhive/"

    def service_url(self, port: int | None = None) -> str:
        """The service itself (direct, not through the proxy)."""
        return f"http://127.0.0.1:{port or self.service_port}{self.service_prefix}"

    def proxied_service_url(self) -> str:
        """The service through the Hub's public proxy."""
        return f"{self.url}{self.service_prefix}"

    def server_url(self, user: str) -> str:
        """A user's own single-user server through the proxy."""
        return f"{self.url}/user/{user}/"

    def health(self, port: int) -> Reply:
        return call("GET", f"http://127.0.0.1:{port}{self.service_prefix}health", timeout=2)


class OwnServer:
    """A jupyter server a user runs on their own, in client mode, with their own config.

    `claims` maps tokens to the identities this server *says* its users have; `hub_token`
    is what it forwards to the service (JUPYTERHUB_API_TOKEN in its environment).
    """

    def __init__(
        self, service_url: str, hub_token: str, claims: dict[str, Any], extra: dict[str, Any]
    ) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="gpuhive-own-"))
        config = {
            "ServerApp": {
                "jpserver_extensions": {"jupyter_gpuhive": True},
                "identity_provider_class": "jupyter_gpuhive.auth.TokenUsersIdentityProvider",
                "port": self.port,
                "ip": "127.0.0.1",
                "open_browser": False,
                "allow_root": True,
                "root_dir": str(self.dir),
                "log_level": "WARN",
            },
            "TokenUsersIdentityProvider": {"users": claims},
            "GpuHiveApp": {"service_url": service_url, **extra},
        }
        (self.dir / "config.json").write_text(json.dumps(config))
        env = {
            **os.environ,
            "JUPYTER_CONFIG_DIR": str(self.dir),
            "JUPYTER_DATA_DIR": str(self.dir),
            "JUPYTERHUB_API_TOKEN": hub_token,
        }
        self.process = subprocess.Popen(
            [sys.executable, "-m", "jupyter_server", f"--config={self.dir}/config.json"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=open(self.dir / "server.log", "wb"),  # noqa: SIM115
        )
        self.token = next(iter(claims))

    def wait(self, timeout: float = 60) -> OwnServer:
        def up() -> bool:
            if self.process.poll() is not None:
                raise RuntimeError((self.dir / "server.log").read_text()[-3000:])
            return call("GET", f"{self.url}api/status", self.token, timeout=2).status == 200

        wait_for(up, timeout, "own server start")
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def api(self, method: str, path: str, body: Any = None) -> Reply:
        return call(method, f"{self.url}gpuhive/api/{path}", self.token, body)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        shutil.rmtree(self.dir, ignore_errors=True)
