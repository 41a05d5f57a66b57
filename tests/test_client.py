"""How a kernel finds its gpuhive server, and what it says when it cannot."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from jupyter_gpuhive.notebook.client import HiveClient, HiveClientError, discover


def _clean(monkeypatch: pytest.MonkeyPatch, runtime: Path) -> None:
    for name in ("GPUHIVE_URL", "GPUHIVE_TOKEN", "JUPYTERHUB_API_TOKEN",
                 "JUPYTERHUB_SERVICE_PREFIX", "JUPYTERHUB_SERVICE_URL"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(runtime))


def test_the_extensions_variables_win(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _clean(monkeypatch, tmp_path)
    monkeypatch.setenv("GPUHIVE_URL", "http://127.0.0.1:9999/base/")
    monkeypatch.setenv("GPUHIVE_TOKEN", "abc")
    assert discover() == ("http://127.0.0.1:9999/base/", "abc")
    client = HiveClient()
    assert client.base == "/base/gpuhive/api/"


def test_a_hub_users_kernel_goes_through_their_own_server(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _clean(monkeypatch, tmp_path)
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "hubtoken")
    monkeypatch.setenv("JUPYTERHUB_SERVICE_PREFIX", "/user/alice/")
    monkeypatch.setenv("JUPYTERHUB_SERVICE_URL", "http://127.0.0.1:41234/user/alice/")
    assert discover() == ("http://127.0.0.1:41234/user/alice/", "hubtoken")


def test_runtime_files_pick_the_server_of_this_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    _clean(monkeypatch, runtime)
    work = tmp_path / "work" / "project"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    for port, root in ((8001, "/elsewhere"), (8002, str(tmp_path / "work")), (8003, "/")):
        info = {"url": f"http://127.0.0.1:{port}/", "token": f"t{port}", "root_dir": root,
                "pid": os.getpid(), "port": port, "base_url": "/", "secure": False}  # fmt: skip
        (runtime / f"jpserver-{port}.json").write_text(json.dumps(info))
    assert discover() == ("http://127.0.0.1:8002/", "t8002")


def test_no_server_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _clean(monkeypatch, tmp_path)
    with pytest.raises(HiveClientError, match="GPUHIVE_URL"):
        discover()
    unreachable = HiveClient("http://127.0.0.1:9/", "x", timeout=2)
    with pytest.raises(HiveClientError, match="Cannot reach the gpuhive server"):
        unreachable.me()
