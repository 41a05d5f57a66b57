"""A real Prometheus (Debian's `prometheus` package) scraping a test server, and its HTTP API."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from jupyter_gpuhive.sim.ports import free_port

from .waiting import wait_for

BINARY = shutil.which("prometheus") or "/usr/bin/prometheus"


def available() -> bool:
    """Whether the prometheus binary is installed (make sysdeps installs it)."""
    return Path(BINARY).is_file()


class Prometheus:
    """`prometheus` on a free loopback port with the scrape jobs given, in a temp folder."""

    def __init__(self, jobs: list[dict[str, Any]]) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="gpuhive-prometheus-"))
        self.port = free_port()
        config = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
                  "scrape_configs": jobs}  # fmt: skip
        (self.dir / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
        self.process = subprocess.Popen(
            [
                BINARY,
                f"--config.file={self.dir / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.dir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=open(self.dir / "prometheus.log", "wb"),  # noqa: SIM115
        )
        wait_for(self._ready, 60, "Prometheus to start", ignore=(OSError,))

    def _ready(self) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError((self.dir / "prometheus.log").read_text()[-3000:])
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as r:
            return bool(r.status == 200)

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query's result vector (PromQL over the HTTP API)."""
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode(
            {"query": promql}
        )
        with urllib.request.urlopen(url, timeout=10) as reply:
            data = json.loads(reply.read())
        assert data["status"] == "success", data
        return list(data["data"]["result"])

    def targets(self) -> list[dict[str, Any]]:
        """The active scrape targets with their health and last error."""
        url = f"http://127.0.0.1:{self.port}/api/v1/targets"
        with urllib.request.urlopen(url, timeout=10) as reply:
            return list(json.loads(reply.read())["data"]["activeTargets"])

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        shutil.rmtree(self.dir, ignore_errors=True)
