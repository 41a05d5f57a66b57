"""gpuhive joins Jupyter through classes the server is configured with (issue #32 item 5):
a kernel manager and an authorizer mixed into the configured ones, nothing replaced on the
server's objects, and no private attribute of jupyter_server read."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest
from jupyter_server.auth.authorizer import Authorizer
from jupyter_server.services.kernels.kernelmanager import AsyncMappingKernelManager

from jupyter_gpuhive.server.kernel_guard import SETTING as GUARD
from jupyter_gpuhive.server.kernel_guard import KernelGuard, KernelOwnerAuthorizer
from jupyter_gpuhive.server.kernel_manager import GpuHiveKernelManager
from jupyter_gpuhive.server.kernel_tokens import SETTING as TOKENS

PACKAGE = Path(__file__).resolve().parents[1] / "jupyter_gpuhive"
METHODS = {"start_kernel", "restart_kernel", "interrupt_kernel", "shutdown_kernel",
           "update_env", "is_authorized"}  # fmt: skip
PRIVATE = {"_trait_values", "_finished"}


class NoContentsWrites(Authorizer):  # type: ignore[misc]
    """A site's own authorizer: nobody writes contents (gpuhive must keep it in force)."""

    def is_authorized(self, handler: Any, user: Any, action: str, resource: str) -> bool:
        return not (resource == "contents" and action == "write")


@pytest.fixture
def db_url(sqlite_url: str) -> str:
    return sqlite_url


@pytest.fixture
def hive_config(hive_config: dict[str, Any]) -> dict[str, Any]:
    return {**hive_config, "monitor": False}


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    config = json.loads(json.dumps(jp_server_config))
    config["ServerApp"]["authorizer_class"] = f"{__name__}.NoContentsWrites"
    return config


def test_no_method_of_jupyter_is_replaced_and_no_private_attribute_read() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and node.attr in PRIVATE:
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} reads .{node.attr}")
            targets = node.targets if isinstance(node, ast.Assign) else []
            for target in targets:
                if isinstance(target, ast.Attribute) and target.attr in METHODS:
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} sets .{target.attr}")
    assert not found, found


def test_the_server_builds_gpuhives_classes(jp_serverapp: Any, jp_asyncio_loop: Any) -> None:
    jp_asyncio_loop.run_until_complete(jp_serverapp._post_start())
    manager, authorizer = jp_serverapp.kernel_manager, jp_serverapp.authorizer
    assert isinstance(manager, GpuHiveKernelManager)
    assert isinstance(manager, AsyncMappingKernelManager)  # the server's default, mixed
    assert isinstance(authorizer, KernelOwnerAuthorizer)
    assert isinstance(authorizer, NoContentsWrites)  # the configured one, mixed
    assert not METHODS & set(vars(manager)), "a kernel manager method replaced on the object"
    assert not METHODS & set(vars(authorizer)), "is_authorized replaced on the object"
    settings = jp_serverapp.web_app.settings
    assert isinstance(settings[GUARD], KernelGuard) and manager.gpuhive_guard is settings[GUARD]
    assert manager.gpuhive_tokens.tokens is settings[TOKENS]
    assert manager.gpuhive_kernels is settings["gpuhive"].kernels


async def test_a_configured_authorizer_stays_in_force(
    jp_fetch: Any, jp_serverapp: Any, jp_server_config: dict[str, Any]
) -> None:
    from tornado.httpclient import HTTPClientError

    await jp_serverapp._post_start()
    token = next(iter(jp_server_config["TokenUsersIdentityProvider"]["users"]))
    headers = {"Authorization": f"token {token}"}
    assert (await jp_fetch("api", "contents", headers=headers)).code == 200
    with pytest.raises(HTTPClientError) as refused:
        await jp_fetch("api", "contents", "x.txt", method="PUT", headers=headers,
                       body=json.dumps({"type": "file", "format": "text", "content": "x"}))  # fmt: skip
    assert refused.value.code == 403
