"""Team mode's two ends apart from a Hub (the Hub end to end: tests/hub/test_team_kernels.py).

- A server that starts its kernels itself has no broker: the brokered-kernel routes answer
  a JSON 404 that says whose they are.
- In a client-mode server the `gpuhive` provisioner becomes TeamProvisioner. A server on
  another machine than the service (which cannot be made here) is stood in for by a service
  link that answers socket paths that do not exist on this machine: the start is refused with
  a 503 that says why, and the service is told to drop the kernel.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.kernelspec import KernelSpec
from traitlets import Any as AnyTrait
from traitlets.config import LoggingConfigurable

from jupyter_gpuhive.errors import Unavailable
from jupyter_gpuhive.kernels.provisioner import GpuHiveProvisioner
from jupyter_gpuhive.kernels.team import TeamProvisioner


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'hive.sqlite'}"


async def test_a_server_with_its_own_hosts_has_no_brokered_kernels(api: Any) -> None:
    kernel = "0b1c2d3e-aaaa-bbbb-cccc-000000000001"
    calls = {
        "launch": await api("alice")("POST", f"kernels/{kernel}/launch", {"reservation_id": 1}),
        "process": await api("alice")("GET", f"kernels/{kernel}/process"),
        "signal": await api("alice")("POST", f"kernels/{kernel}/signal", {"signal": "SIGINT"}),
        "cleanup": await api("alice")("POST", f"kernels/{kernel}/cleanup", {"restart": False}),
    }
    for name, reply in calls.items():
        assert reply.status == 404, (name, reply)
        assert "team-mode service" in reply.message, (name, reply)
    assert (await api(None)("GET", f"kernels/{kernel}/process")).status == 401


class ElsewhereService:
    """A gpuhive service on another machine: the sockets it names are not on this one."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []

    async def call(self, method: str, path: str, body: Any = None) -> Any:
        self.calls.append((method, path, body))
        if path.endswith("/launch"):
            ports = {"shell_port": 1, "iopub_port": 2, "stdin_port": 3, "control_port": 4,
                     "hb_port": 5}  # fmt: skip
            return {"connection": {"transport": "ipc", "ip": "/nonexistent/gpuhive/k",
                                   **ports, "key": "k" * 64, "signature_scheme": "hmac-sha256"},
                    "kernel": None}  # fmt: skip
        return {"running": False, "exit_status": 0, "state": "ended", "reason": None}


class ClientModeManager(LoggingConfigurable):
    """What service_link.install gives a client-mode server's kernel manager."""

    gpuhive_service = AnyTrait()
    gpuhive_provisioner = AnyTrait()


def test_a_server_elsewhere_than_the_service_is_refused_with_the_reason() -> None:
    service = ElsewhereService()
    manager = ClientModeManager(gpuhive_service=service, gpuhive_provisioner=TeamProvisioner)
    spec = KernelSpec(name="gpuhive-r7", display_name="r7", language="python",
                      argv=["python"], env={"MY_SETTING": "1"})  # fmt: skip
    provisioner = GpuHiveProvisioner(kernel_id="k-7", kernel_spec=spec, parent=manager,
                                     reservation_id=7)  # fmt: skip
    assert type(provisioner) is TeamProvisioner
    # Without a client-mode manager it stays the provisioner that runs kernels itself.
    assert type(GpuHiveProvisioner(kernel_id="k-8", kernel_spec=spec)) is GpuHiveProvisioner

    async def start() -> None:
        env = {"JPY_SESSION_NAME": "nb.ipynb", "JUPYTERHUB_API_TOKEN": "server-secret"}
        kwargs = await provisioner.pre_launch(env=env)
        await provisioner.launch_kernel(kwargs.pop("cmd"), **kwargs)

    with pytest.raises(Unavailable, match="this server runs elsewhere") as refused:
        asyncio.run(start())
    assert refused.value.status == 503
    (launch, cleanup) = service.calls
    assert launch == ("POST", "kernels/k-7/launch", {
        "reservation_id": 7, "host": None,
        "env": {"MY_SETTING": "1", "JPY_SESSION_NAME": "nb.ipynb"},  # not the server's token
    })  # fmt: skip
    assert cleanup == ("POST", "kernels/k-7/cleanup", {"restart": False})
    assert not provisioner.has_process
