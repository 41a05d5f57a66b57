"""A jupyter server a user runs on their own (client mode) against the team Hub's service."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from jupyter_gpuhive.sim.ports import free_port
from tests.support.team_hub import Reply, call
from tests.support.waiting import wait_for


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

        wait_for(up, timeout, "own server start", interval=0.1, ignore=(OSError,))
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
