"""gpuhive joins Jupyter through classes the server is configured with (issue #32 item 5):
a kernel manager and an authorizer mixed into the configured ones, nothing replaced on the
server's objects, and no private attribute of jupyter_server read."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.ioloop.restarter import AsyncIOLoopKernelRestarter
from jupyter_server.auth.authorizer import Authorizer
from jupyter_server.services.kernels.kernelmanager import AsyncMappingKernelManager
from traitlets.utils.importstring import import_item

from jupyter_gpuhive.kernels.restarts import FinalEnds
from jupyter_gpuhive.server.kernel_guard import SETTING as GUARD
from jupyter_gpuhive.server.kernel_guard import KernelGuard, KernelOwnerAuthorizer
from jupyter_gpuhive.server.kernel_manager import GpuHiveKernelManager
from jupyter_gpuhive.server.kernel_tokens import SETTING as TOKENS

PACKAGE = Path(__file__).resolve().parents[1] / "jupyter_gpuhive"
METHODS = {"start_kernel", "restart_kernel", "interrupt_kernel", "shutdown_kernel",
           "update_env", "is_authorized"}  # fmt: skip
PRIVATE = {"_trait_values", "_finished", "_restarter"}  # read or written


class NoContentsWrites(Authorizer):  # type: ignore[misc]
    """A site's own authorizer: nobody writes contents (gpuhive must keep it in force)."""

    def is_authorized(self, handler: Any, user: Any, action: str, resource: str) -> bool:
        return not (resource == "contents" and action == "write")


class SiteRestarter(AsyncIOLoopKernelRestarter):  # type: ignore[misc]
    """A site's own restarter class (gpuhive must keep it, mixed)."""


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
    config["ServerKernelManager"] = {"restarter_class": f"{__name__}.SiteRestarter"}
    return config


def jupyter_internals_touched(source: str, name: str) -> list[str]:
    """Where `source` reads or writes a private attribute of Jupyter's (`x._restarter`, or
    by name: `getattr(x, "_restarter")`) or replaces one of its methods on an object."""
    found = []
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, ast.Attribute) and node.attr in PRIVATE:
            found.append(f"{name}:{node.lineno} reads .{node.attr}")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in {"getattr", "setattr", "hasattr"}
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in PRIVATE
        ):
            found.append(f"{name}:{node.lineno} reads .{node.args[1].value}")
        targets = node.targets if isinstance(node, ast.Assign) else []
        for target in targets:
            if isinstance(target, ast.Attribute) and target.attr in METHODS:
                found.append(f"{name}:{node.lineno} sets .{target.attr}")
    return found


def test_no_method_of_jupyter_is_replaced_and_no_private_attribute_read() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        found += jupyter_internals_touched(path.read_text(), str(path.relative_to(PACKAGE)))
    assert not found, found


def test_the_internals_check_sees_a_private_restarter_touched() -> None:
    """The check above fails on the workaround gpuhive had: the restarter's limit set."""
    before = (
        "def no_restarts(km):\n"
        "    restarter = getattr(km, '_restarter', None)\n"
        "    restarter.restart_limit = 0\n"
        "    km._restarter.restart_limit = 0\n"
        "    km.start_kernel = None\n"
    )
    assert sorted(jupyter_internals_touched(before, "p.py")) == [
        "p.py:2 reads ._restarter",
        "p.py:4 reads ._restarter",
        "p.py:5 sets .start_kernel",
    ]


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
    # each kernel's manager: a restarter that heeds a final end, the site's own underneath
    restarter = import_item(manager.kernel_manager_class)(parent=manager).restarter_class
    assert issubclass(restarter, FinalEnds) and issubclass(restarter, SiteRestarter), restarter


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
