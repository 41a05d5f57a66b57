"""Provisioners find the kernel registry, and in client mode the service link, where they were
handed, not by walking `.parent` with a module-global fallback (issue #42 item 5): the
server's kernel manager hands them to each kernel's own manager as it makes it, and the
provisioner looks on that manager only."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from jupyter_client.kernelspec import KernelSpec
from traitlets import Any as AnyTrait
from traitlets.config import LoggingConfigurable

from jupyter_gpuhive.errors import Unavailable
from jupyter_gpuhive.hosts.pool import HostPool
from jupyter_gpuhive.kernels import registry
from jupyter_gpuhive.kernels.provisioner import GpuHiveProvisioner, find_registry
from jupyter_gpuhive.kernels.registry import KernelRegistry
from jupyter_gpuhive.kernels.team import TeamProvisioner, find_link
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


class _Link:
    async def call(self, method: str, path: str, body: Any = None) -> Any:
        raise AssertionError("not called")


class _Manager(LoggingConfigurable):
    """A kernel's own manager, handed the link (or not)."""

    gpuhive_service = AnyTrait()
    gpuhive_provisioner = AnyTrait()


def test_the_service_link_is_found_on_the_kernels_own_manager_only() -> None:
    link = _Link()
    own = _Manager(gpuhive_service=link, gpuhive_provisioner=TeamProvisioner)
    assert find_link(SimpleNamespace(parent=own)) is link
    spec = KernelSpec(name="gpuhive-r7", display_name="r7", language="python", argv=["python"])
    made = GpuHiveProvisioner(kernel_id="k-7", kernel_spec=spec, parent=own, reservation_id=7)
    assert type(made) is TeamProvisioner
    # a client-mode manager further up is not looked for: this kernel's was handed nothing
    above = _Manager(parent=own)
    assert find_link(SimpleNamespace(parent=above)) is None
    kept = GpuHiveProvisioner(kernel_id="k-8", kernel_spec=spec, parent=above, reservation_id=7)
    assert type(kept) is GpuHiveProvisioner


def test_a_client_mode_kernel_manager_hands_the_link_to_each_kernel_manager(
    jp_serverapp: Any, jp_asyncio_loop: Any
) -> None:
    jp_asyncio_loop.run_until_complete(jp_serverapp._post_start())
    manager = jp_serverapp.kernel_manager
    link = _Link()
    manager.gpuhive_service, manager.gpuhive_provisioner = link, TeamProvisioner
    own, _, _ = manager.pre_start_kernel("python3", {})
    assert (own.gpuhive_service, own.gpuhive_provisioner) == (link, TeamProvisioner)
    assert find_link(SimpleNamespace(parent=own)) is link
