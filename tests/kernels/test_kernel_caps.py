"""A notebook's kernel on a share of a GPU runs capped to the share: its real process carries
the framework caps (and, on a host running MPS, the MPS client limit), and gpuhive's start-up
is its `sitecustomize`, which queues PyTorch's per-process memory fraction when the user
imports it. A real Jupyter server, its kernel REST API and websocket, real UNIX users, real
ipykernel and PyTorch (CPU build) on a local host."""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from tests.kernels.remote_helpers import Notebook, kernels_api, write_spec
from tests.kernels.test_remote_kernel import OWNER, TOKENS
from tests.kernels.test_remote_kernel import jp_server_config as jp_server_config
from tests.kernels.test_remote_kernel import started as started
from tests.support.kernel_python import kernel_python

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="runs kernels as real users")

HOST = "kshare"
PROBE = (
    "import json, os, sys, torch\n"
    "queued = [getattr(c[0], '__qualname__', '') for c in torch.cuda._queued_calls]\n"
    "print(json.dumps({'site': sys.modules['sitecustomize'].__file__, 'queued': queued,\n"
    "                  'env': dict(os.environ)}))"
)


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'hive.sqlite'}"


@pytest.fixture
def hive_config() -> dict[str, Any]:
    python = kernel_python(["torch==2.13.0"])
    gpu = {"index": 0, "model": "Simulated A100", "memory_mib": 40960}
    host = {"name": HOST, "transport": "local", "gpus": [gpu], "kernel_python": python,
            "shareable": True, "mps": True}  # fmt: skip
    return {"hosts": [host], "poll_interval": 1.0, "site_timezone": "UTC",
            "kernel_specs": False, "min_reservation": "5m", "monitor": False}  # fmt: skip


async def test_a_kernel_on_a_share_is_capped_to_it(
    started: Any,
    api: Any,
    jp_fetch: Any,
    jp_ws_fetch: Any,
    jp_data_dir: Path,
) -> None:
    start = datetime.now(timezone.utc).isoformat()
    body = {"title": "notebook", "gpus": [f"{HOST}:0"], "start": start, "duration": "1h",
            "share": 0.25}  # fmt: skip
    made = await api(OWNER)("POST", "reservations", body)
    assert made.status == 201, made
    gpu = started.web_app.settings["gpuhive"].store.inventory.gpu(f"{HOST}:0")
    spec = write_spec(jp_data_dir, "share", {"reservation_id": made.body["id"]})
    kernel = await kernels_api(jp_fetch, TOKENS[OWNER], "POST", body={"name": spec})
    assert kernel.status == 201, kernel
    nb = await Notebook.open(jp_ws_fetch, kernel.body["id"], TOKENS[OWNER])
    cell = await nb.run(PROBE, timeout=120)
    assert cell.done and cell.error is None, cell
    seen = json.loads(cell.text.strip().splitlines()[-1])
    env = seen["env"]
    quarter = 40960 // 4
    assert env["XLA_PYTHON_CLIENT_MEM_FRACTION"] == env["GPUHIVE_SHARE"] == "0.25"
    assert env["PYTORCH_CUDA_ALLOC_CONF"] == "per_process_memory_fraction:0.25"
    assert env["GPUHIVE_SHARE_MIB"] == str(quarter)
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"{gpu.uuid}={quarter}M"  # mps: true
    assert "GPUHIVE_CAPS_SOURCE" not in env  # unpacked into the kernel's private folder
    assert seen["site"].endswith("/caps/sitecustomize.py")
    assert "cap_torch.<locals>.apply" in seen["queued"]
    nb.close()
    assert (await kernels_api(jp_fetch, TOKENS[OWNER], "DELETE", kernel.body["id"])).status == 204
