"""Shared fixtures: a real PostgreSQL, a real Jupyter server with gpuhive, several users."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from tests.support.postgres import PostgresCluster, running_postgres

pytest_plugins = ["pytest_jupyter.jupyter_server"]

UTC = timezone.utc

# token -> identity; the same mechanism a site can use (jupyter_gpuhive.auth).
USERS = {
    "tok-alice": {"name": "alice", "groups": ["phd"]},
    "tok-bob": {"name": "bob", "groups": ["phd"]},
    "tok-carol": {"name": "carol", "groups": ["staff"]},
    "tok-root": {"name": "boss", "groups": ["admins"]},
}
TOKENS = {spec["name"]: token for token, spec in USERS.items()}

HOSTS = [
    {"name": f"gpu{h}", "address": "127.0.0.1", "transport": "local", "gpu_count": 4,
     "gpu_model": "Simulated A100"}
    for h in (1, 2, 3)
]  # fmt: skip


# Jupyter's and IPython's per-user folders, for this run only: a config, kernelspec, startup
# file or database that an earlier run (or the machine's owner) left in ~/.jupyter,
# ~/.local/share/jupyter or ~/.ipython never reaches a test. Fixtures that start servers set
# their own folders on top of these.
PER_RUN_DIRS = ("JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR", "IPYTHONDIR")
_run_home = Path(tempfile.mkdtemp(prefix="gpuhive-test-run-"))
for _name in PER_RUN_DIRS:
    os.environ[_name] = str(_run_home / _name.lower())
os.environ.pop("JUPYTER_PATH", None)
os.environ.pop("JUPYTER_CONFIG_PATH", None)


def pytest_unconfigure(config: pytest.Config) -> None:
    # The magics' tests start an IPython shell whose history lives in the run's IPYTHONDIR:
    # close it before that folder goes (else its exit hook writes to a deleted database).
    shell_module = sys.modules.get("IPython.core.interactiveshell")
    if shell_module is not None and shell_module.InteractiveShell.initialized():
        shell = shell_module.InteractiveShell.instance()
        if shell.history_manager is not None:
            shell.history_manager.end_session()
            shell.history_manager.close()
            shell.history_manager = None
    shutil.rmtree(_run_home, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresCluster]:
    with running_postgres() as cluster:
        yield cluster


# The databases the API tests run on; `make test-dates` narrows it to SQLite at some instants.
DATABASES = os.environ.get("GPUHIVE_TEST_DATABASES", "sqlite,postgresql").split(",")


@pytest.fixture(params=DATABASES)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'hive.sqlite'}"
    cluster: PostgresCluster = request.getfixturevalue("postgres")
    return cluster.new_database()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'hive.sqlite'}"


@pytest.fixture
def hive_config() -> dict[str, Any]:
    """GpuHiveApp settings a test may adjust before the server starts."""
    return {
        "hosts": HOSTS,
        "admin_groups": ["admins"],
        "site_timezone": "Europe/Warsaw",
        "min_reservation": "10m",
        "max_reservation": "3d",
        "booking_horizon": "30d",
    }


@pytest.fixture
def jp_server_config(db_url: str, hive_config: dict[str, Any]) -> dict[str, Any]:
    return {
        "ServerApp": {
            "jpserver_extensions": {"jupyter_gpuhive": True},
            "identity_provider_class": "jupyter_gpuhive.auth.TokenUsersIdentityProvider",
        },
        "TokenUsersIdentityProvider": {"users": USERS},
        "GpuHiveApp": {"db_url": db_url, **hive_config},
    }


@dataclass
class Reply:
    status: int
    body: Any

    @property
    def message(self) -> str:
        return str(self.body.get("message", "")) if isinstance(self.body, dict) else ""


Call = Callable[..., Awaitable[Reply]]


@pytest.fixture
def api(jp_fetch: Any, jp_server_config: dict[str, Any]) -> Callable[[str | None], Call]:
    """api('alice')('POST', 'reservations', body={...}) -> Reply (never raises on 4xx)."""

    users = jp_server_config.get("TokenUsersIdentityProvider", {}).get("users", USERS)
    tokens = {spec["name"]: token for token, spec in users.items()}

    def as_user(user: str | None) -> Call:
        async def call(
            method: str,
            path: str,
            body: Any = None,
            params: dict[str, Any] | None = None,
            raw: bytes | None = None,
            headers: dict[str, str] | None = None,
        ) -> Reply:
            sent = {"Authorization": f"token {tokens[user]}"} if user else {"Authorization": ""}
            headers = {**sent, **(headers or {})}
            payload: bytes | None = raw
            if payload is None and body is not None:
                payload = json.dumps(body).encode()
            if payload is None and method in ("POST", "PUT", "PATCH"):
                payload = b""
            try:
                response = await jp_fetch(
                    "gpuhive", "api", *path.strip("/").split("/"),
                    method=method, body=payload, headers=headers, params=params or {},
                    allow_nonstandard_methods=True,
                )  # fmt: skip
            except HTTPClientError as error:
                response = error.response
                assert response is not None, error
            text = response.body.decode() if response.body else ""
            try:
                data = json.loads(text) if text else None
            except ValueError:
                data = text
            return Reply(response.code, data)

        return call

    return as_user


def iso(instant: datetime) -> str:
    return instant.astimezone(UTC).isoformat()


async def book(
    call: Call, title: str, gpus: list[str], start: datetime, duration: str = "1h"
) -> Reply:
    """Reserve through `api(user)` (the REST API) and insist it was booked (201)."""
    made = await call(
        "POST", "reservations",
        {"title": title, "gpus": gpus, "start": iso(start), "duration": duration},
    )  # fmt: skip
    assert made.status == 201, made
    return made


def soon(hours: float = 1, *, days: int = 1) -> datetime:
    """A whole hour some days ahead (comfortably in the future)."""
    base = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    return base + timedelta(days=days, hours=hours)


@pytest.fixture
def running_hive(jp_serverapp: Any, jp_asyncio_loop: Any) -> Any:
    """The server's Hive with its background loops started (pytest-jupyter starts no extension)."""
    hive = jp_serverapp.web_app.settings["gpuhive"]
    jp_asyncio_loop.run_until_complete(hive.start())
    yield hive
    jp_asyncio_loop.run_until_complete(hive.stop())


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[Any]:
    """A dockerd of this session's own (tests/support/containers.py); skipped where none can run."""
    from tests.support.containers import running_dockerd, unavailable_reason

    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    with running_dockerd() as engine:
        yield engine


@pytest.fixture(scope="session")
def container_image(docker_engine: Any) -> Any:
    """The test image (the venv's Python, a shell, coreutils), built once per session."""
    from tests.support.containers import build_test_image

    return build_test_image(docker_engine)


@pytest.fixture
def docker(docker_engine: Any) -> Iterator[Any]:
    """The session's engine; containers the test started are removed after it."""
    before = set(docker_engine.run("ps", "-aq", "--no-trunc").stdout.split())
    yield docker_engine
    left = set(docker_engine.run("ps", "-aq", "--no-trunc").stdout.split()) - before
    if left:
        docker_engine.run("rm", "-f", *sorted(left), check=False, timeout=120)
