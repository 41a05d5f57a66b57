"""Provisioners find the kernel registry where it was handed, not by walking `.parent` with a
module-global fallback (issue #42 item 5): the server's kernel manager hands it to each
kernel's own manager as it makes it, and the provisioner looks on that manager only."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from jupyter_gpuhive.errors import Unavailable
from jupyter_gpuhive.hosts.pool import HostPool
from jupyter_gpuhive.kernels import registry
from jupyter_gpuhive.kernels.provisioner import find_registry
from jupyter_gpuhive.kernels.registry import KernelRegistry
from jupyter_gpuhive.model import Identity
from jupyter_gpuhive.store import Store


async def _run(fn: Any, *args: Any, **kwargs: Any) -> Any:
    return fn(*args, **kwargs)


def test_the_registry_is_found_on_the_kernels_own_manager_only(sqlite_url: str) -> None:
    store = Store(sqlite_url).open()
    try:
        kernels = KernelRegistry(store, HostPool([]), _run, identity_of=Identity)
        handed = SimpleNamespace(parent=SimpleNamespace(gpuhive_kernels=kernels))
        assert find_registry(handed) is kernels
        # a registry further up is not looked for: the kernel's manager was not handed one
        above = SimpleNamespace(parent=SimpleNamespace(parent=handed.parent))
        with pytest.raises(Unavailable, match="gpuhive server extension"):
            find_registry(above)
        assert not hasattr(registry, "ACTIVE")  # no process-wide fallback
        assert not hasattr(KernelRegistry, "activate")
    finally:
        store.close()


def test_the_servers_kernel_manager_hands_each_kernel_manager_the_registry(
    jp_serverapp: Any, jp_asyncio_loop: Any
) -> None:
    jp_asyncio_loop.run_until_complete(jp_serverapp._post_start())
    manager = jp_serverapp.kernel_manager
    own, _, _ = manager.pre_start_kernel("python3", {})
    assert own.parent is manager
    assert own.gpuhive_kernels is jp_serverapp.web_app.settings["gpuhive"].kernels
    assert find_registry(SimpleNamespace(parent=own)) is own.gpuhive_kernels
