"""A client-mode (team) server's refused kernel start is a JSON error with its own status,
through the kernel REST API and through a session (how JupyterLab opens a notebook)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jupyter_gpuhive.sim.ports import free_port
from tests.conftest import TOKENS
from tests.kernels.remote_helpers import kernels_api, sessions_api, write_spec


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'hive.sqlite'}"


@pytest.fixture
def hive_config(hive_config: dict[str, Any]) -> dict[str, Any]:
    """A server of the team whose service is down (nothing listens on its port)."""
    return {**hive_config, "service_url": f"http://127.0.0.1:{free_port()}/services/gpuhive/",
            "kernel_specs": False}  # fmt: skip


@pytest.fixture
def started(jp_serverapp: Any, jp_asyncio_loop: Any) -> Any:
    jp_asyncio_loop.run_until_complete(jp_serverapp._post_start())
    return jp_serverapp


async def test_a_refused_start_keeps_its_status_through_a_session(
    started: Any, jp_fetch: Any, jp_data_dir: Path
) -> None:
    name = write_spec(jp_data_dir, "r7", {"reservation_id": 7})
    direct = await kernels_api(jp_fetch, TOKENS["alice"], "POST", body={"name": name})
    assert direct.status == 503, direct
    assert direct.body["message"].startswith("The gpuhive service cannot be reached"), direct
    body = {"kernel": {"name": name}, "path": "n.ipynb", "type": "notebook", "name": "n.ipynb"}
    session = await sessions_api(jp_fetch, TOKENS["alice"], "POST", body=body)
    assert (session.status, session.body["message"]) == (503, direct.body["message"]), session
    assert (await sessions_api(jp_fetch, TOKENS["alice"], "GET")).body == []
