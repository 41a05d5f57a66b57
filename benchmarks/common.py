"""Helpers for benchmarks: a real Jupyter server with gpuhive in a subprocess, HTTP timing."""

from __future__ import annotations

import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fixtures.postgres import free_port  # noqa: E402


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = min(len(ordered) - 1, max(0, round(pct / 100 * (len(ordered) - 1))))
    return ordered[k]


def summary_ms(values: list[float]) -> dict[str, float]:
    return {
        "p50": round(statistics.median(values) * 1000, 3),
        "p99": round(percentile(values, 99) * 1000, 3),
    }


class JupyterServer:
    """`jupyter server` with gpuhive and token users, in its own process."""

    def __init__(self, hive_config: dict[str, Any], users: dict[str, dict[str, Any]]) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="gpuhive-bench-"))
        config = {
            "ServerApp": {
                "jpserver_extensions": {"jupyter_gpuhive": True},
                "identity_provider_class": "jupyter_gpuhive.auth.TokenUsersIdentityProvider",
                "port": self.port,
                "ip": "127.0.0.1",
                "open_browser": False,
                "allow_root": True,
                "token": "bench-server-token",
                "root_dir": str(self.dir),
                "log_level": "WARN",
            },
            "TokenUsersIdentityProvider": {"users": users},
            "GpuHiveApp": hive_config,
        }
        (self.dir / "jupyter_server_config.json").write_text(json.dumps(config))
        env = {**os.environ, "JUPYTER_CONFIG_DIR": str(self.dir), "JUPYTER_DATA_DIR": str(self.dir)}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "jupyter_server", f"--config={self.dir}/jupyter_server_config.json"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=open(self.dir / "server.log", "wb"),  # noqa: SIM115
        )
        self._wait()

    def _wait(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError((self.dir / "server.log").read_text()[-3000:])
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                conn.request("GET", "/api/status", headers={"Authorization": "token bench-server-token"})
                if conn.getresponse().status == 200:
                    return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("server did not start")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()


class Client:
    """A keep-alive HTTP client acting as one user."""

    def __init__(self, port: int, token: str) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.headers = {"Authorization": f"token {token}", "Content-Type": "application/json"}

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any, float]:
        payload = json.dumps(body) if body is not None else None
        t0 = time.perf_counter()
        self.conn.request(method, "/gpuhive/api/" + path, body=payload, headers=self.headers)
        response = self.conn.getresponse()
        data = response.read()
        elapsed = time.perf_counter() - t0
        return response.status, json.loads(data) if data else None, elapsed
