"""The hosts file as `jupyter gpuhive hosts add|remove` edit it, and its watcher."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tomllib

from jupyter_gpuhive.errors import Invalid
from jupyter_gpuhive.hosts.file import (
    HostsFileWatcher,
    add_host,
    read_hosts,
    remove_host,
    write_hosts,
)


def test_toml_add_keeps_what_was_there_and_remove_keeps_the_leading_comments(
    tmp_path: Path,
) -> None:
    path = tmp_path / "hosts.toml"
    path.write_text("# our lab\n\n[[hosts]]\nname = 'gpu1'  # the old one\naddress = 'g1'\n")
    add_host(path, {"name": "gpu2", "address": "g2", "port": 2222,
                    "env": {"PATH": "/opt/nv/bin:/usr/bin", "odd key": "x\"y"}})  # fmt: skip
    text = path.read_text()
    assert text.startswith("# our lab\n\n[[hosts]]\nname = 'gpu1'  # the old one\n")
    assert read_hosts(path) == [
        {"name": "gpu1", "address": "g1"},
        {"name": "gpu2", "address": "g2", "port": 2222,
         "env": {"PATH": "/opt/nv/bin:/usr/bin", "odd key": 'x"y'}},
    ]  # fmt: skip
    with pytest.raises(Invalid, match="already has a host named 'gpu2'"):
        add_host(path, {"name": "gpu2", "address": "elsewhere"})
    remove_host(path, "gpu1")
    assert path.read_text().startswith('# our lab\n\n[[hosts]]\nname = "gpu2"\n')
    assert [h["name"] for h in read_hosts(path)] == ["gpu2"]
    with pytest.raises(Invalid, match="has no host named 'gpu1'"):
        remove_host(path, "gpu1")


def test_a_new_file_is_created_and_an_inline_array_is_rewritten(tmp_path: Path) -> None:
    fresh = tmp_path / "new" / "gpuhive_hosts.toml"
    assert read_hosts(fresh) == []
    add_host(fresh, {"name": "a", "transport": "local"})
    assert tomllib.loads(fresh.read_text()) == {"hosts": [{"name": "a", "transport": "local"}]}
    assert fresh.stat().st_mode & 0o777 == 0o644
    inline = tmp_path / "inline.toml"
    inline.write_text('hosts = [{ name = "a" }]\n')
    add_host(inline, {"name": "b"})  # appending [[hosts]] would be invalid TOML here
    assert read_hosts(inline) == [{"name": "a"}, {"name": "b"}]


def test_json_files_and_unreadable_ones(tmp_path: Path) -> None:
    path = tmp_path / "hosts.json"
    path.write_text('{"hosts": [{"name": "a"}]}')
    add_host(path, {"name": "b", "port": 22})
    assert json.loads(path.read_text()) == [{"name": "a"}, {"name": "b", "port": 22}]
    write_hosts(path, [])
    assert read_hosts(path) == []
    path.write_text("{not json")
    with pytest.raises(Invalid, match="is not valid JSON"):
        read_hosts(path)
    path.write_text('{"hosts": 3}')
    with pytest.raises(Invalid, match="must hold a list of hosts"):
        read_hosts(path)
    toml = tmp_path / "bad.toml"
    toml.write_text("[[hosts]\n")
    with pytest.raises(Invalid, match="is not valid TOML"):
        read_hosts(toml)


async def test_the_watcher_sees_creation_changes_and_removal(tmp_path: Path) -> None:
    path = tmp_path / "hosts.toml"
    calls: list[int] = []

    async def changed() -> None:
        calls.append(len(read_hosts(path)))

    watcher = HostsFileWatcher(path, 0.05, changed)
    assert not await watcher.check()
    add_host(path, {"name": "a"})
    assert await watcher.check()
    assert not await watcher.check()
    add_host(path, {"name": "b"})
    assert await watcher.check()
    path.unlink()
    assert await watcher.check()
    assert calls == [1, 2, 0]
