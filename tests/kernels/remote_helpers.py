"""Helpers for kernels on reservations: kernelspecs on disk, the kernel REST API as a user,
running a cell through the kernel's websocket (as JupyterLab does)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tornado.httpclient import HTTPClientError

from tests.conftest import Reply

UNIX = {"alice": "gh-alice", "bob": "gh-bob"}  # gpuhive user → the real UNIX user it runs as


def local_host(name: str, gpu_count: int, python: str) -> dict[str, Any]:
    """A host on this machine (no SSH) whose kernels run under `python`."""
    return {"name": name, "address": "127.0.0.1", "transport": "local", "gpu_count": gpu_count,
            "gpu_model": "Simulated A100", "kernel_python": python}  # fmt: skip


def write_spec(data_dir: Path, name: str, config: dict[str, Any]) -> str:
    """A kernelspec `name` in the server's data dir that uses the gpuhive provisioner."""
    folder = data_dir / "kernels" / name
    folder.mkdir(parents=True, exist_ok=True)
    spec = {
        "argv": ["python", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"Python on reservation ({name})",
        "language": "python",
        "metadata": {"kernel_provisioner": {"provisioner_name": "gpuhive", "config": config}},
    }
    (folder / "kernel.json").write_text(json.dumps(spec))
    return name


async def kernels_api(
    jp_fetch: Any, token: str, method: str, *path: str, body: Any = None
) -> Reply:
    """Jupyter's own kernel REST API (api/kernels/…) as the user of `token`."""
    return await _jupyter_api(jp_fetch, token, method, "kernels", *path, body=body)


async def sessions_api(
    jp_fetch: Any, token: str, method: str, *path: str, body: Any = None
) -> Reply:
    """Jupyter's session REST API (api/sessions/…) as the user of `token`."""
    return await _jupyter_api(jp_fetch, token, method, "sessions", *path, body=body)


async def _jupyter_api(
    jp_fetch: Any, token: str, method: str, *path: str, body: Any = None
) -> Reply:
    payload = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
    try:
        response = await jp_fetch(
            "api", *path, method=method, body=payload,
            headers={"Authorization": f"token {token}"}, allow_nonstandard_methods=True,
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


@dataclass
class CellResult:
    """What a cell printed, the error it raised (its ename), and whether it finished."""

    text: str = ""
    error: str | None = None
    done: bool = False
    statuses: list[str] = field(default_factory=list)


class Notebook:
    """A kernel's websocket (api/kernels/<id>/channels), as a front-end uses it."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.session = uuid.uuid4().hex

    @classmethod
    async def open(cls, jp_ws_fetch: Any, kernel_id: str, token: str) -> Notebook:
        ws = await jp_ws_fetch("api", "kernels", kernel_id, "channels",
                               headers={"Authorization": f"token {token}"})  # fmt: skip
        return cls(ws)

    def send(self, code: str) -> str:
        msg_id = uuid.uuid4().hex
        self.ws.write_message(json.dumps({
            "header": {"msg_id": msg_id, "msg_type": "execute_request", "username": "test",
                       "session": self.session, "date": "", "version": "5.3"},
            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": code, "silent": False, "store_history": True,
                        "user_expressions": {}, "allow_stdin": False, "stop_on_error": True},
        }))  # fmt: skip
        return msg_id

    async def result(self, msg_id: str, timeout: float = 60) -> CellResult:
        """Read messages until the cell `msg_id` is idle again (or `timeout`)."""
        out = CellResult()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                raw = await asyncio.wait_for(self.ws.read_message(), deadline - time.monotonic())
            except TimeoutError:
                break
            if raw is None:
                break  # the server closed the socket
            msg = json.loads(raw)
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                out.text += content["text"]
            elif kind == "error":
                out.error = content["ename"]
            elif kind == "status":
                out.statuses.append(content["execution_state"])
                if content["execution_state"] == "idle":
                    out.done = True
                    break
        return out

    async def run(self, code: str, timeout: float = 60) -> CellResult:
        return await self.result(self.send(code), timeout)

    def close(self) -> None:
        self.ws.close()


# A cell that reports who and where it runs, as one JSON line.
REPORT = """
import getpass, json, os
print(json.dumps({"user": getpass.getuser(), "pid": os.getpid(),
                  "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
                  "order": os.environ.get("CUDA_DEVICE_ORDER"),
                  "sim_host": os.environ.get("GPUHIVE_SIM_HOST"),
                  "env": dict(os.environ)}))
"""


def report(result: CellResult) -> dict[str, Any]:
    """The JSON a REPORT cell printed."""
    assert result.done and result.error is None, result
    return json.loads(result.text.strip().splitlines()[-1])
