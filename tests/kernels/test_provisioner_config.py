"""A kernelspec whose gpuhive provisioner config has values of the wrong type is a clear JSON
422, not a 500 (issue #27, finding 7), through the kernel REST API and through a session."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TOKENS
from tests.kernels.remote_helpers import kernels_api, sessions_api, write_spec


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'hive.sqlite'}"


@pytest.fixture
def started(jp_serverapp: Any, jp_asyncio_loop: Any) -> Any:
    jp_asyncio_loop.run_until_complete(jp_serverapp._post_start())
    return jp_serverapp


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"reservation_id": "abc"}, "reservation_id"),
        ({"reservation_id": 7, "host": 123}, "host"),
        ({"reservation_id": [7]}, "reservation_id"),
        ({"reservation_id": 10**30}, "reservation_id"),  # was a 500 (OverflowError, #41)
        ({"reservation_id": -1}, "reservation_id"),
        ({"reservation_id": 7, "launch_timeout": "soon"}, "launch_timeout"),
    ],
)
async def test_a_bad_provisioner_config_is_a_json_422(
    started: Any, jp_fetch: Any, jp_data_dir: Path, config: dict[str, Any], field: str
) -> None:
    name = write_spec(jp_data_dir, f"bad-{field}", config)
    direct = await kernels_api(jp_fetch, TOKENS["alice"], "POST", body={"name": name})
    assert direct.status == 422, direct
    assert isinstance(direct.body, dict), direct
    message = direct.body["message"]
    assert field in message and "kernelspec" in message, message
    body = {"kernel": {"name": name}, "path": "n.ipynb", "type": "notebook", "name": "n.ipynb"}
    session = await sessions_api(jp_fetch, TOKENS["alice"], "POST", body=body)
    assert (session.status, session.body["message"]) == (422, message), session
    assert (await kernels_api(jp_fetch, TOKENS["alice"], "GET")).body == []
