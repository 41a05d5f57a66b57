"""The amd-smi stand-in's own JSON writer prints what json.dumps prints (process names are a
user's text: quotes, newlines, control and non-ASCII characters must come out escaped)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from jupyter_gpuhive.hosts.vendors.amd_read import serial_of_uuid
from jupyter_gpuhive.sim.amd_smi import dumps
from jupyter_gpuhive.sim.cluster import LocalSimHost
from jupyter_gpuhive.sim.inventory import preset

NAMES = ['a"b\\c', "line\nbreak\r\t\b\f", "\x00\x01\x1f\x7f", "é😀\u2028", "", "@@gpuhive:x 0"]


@pytest.mark.parametrize("indent", [None, 4])
def test_dumps_matches_json(indent: int | None) -> None:
    value = [
        {"gpu": 0, "process_list": [{"process_info": {"name": n, "pid": 7}} for n in NAMES]},
        {"gpu": 1, "process_list": [], "x": {}, "v": {"value": 2.5, "unit": "W"}, "n": None},
        {"ok": True, "no": False, "big": 10**20, "neg": -3},
    ]
    assert dumps(value, indent) == json.dumps(value, indent=indent)
    assert json.loads(dumps(value, indent)) == value


def test_list_uuid_holds_the_serial_as_amd_smi_prints_it(tmp_path: Path) -> None:
    sim = LocalSimHost("al1", tmp_path, preset("mi300x", "al1"))
    done = subprocess.run(["amd-smi", "list", "--json"], env=sim.env(), capture_output=True,
                          text=True, check=True)  # fmt: skip
    listed = json.loads(done.stdout)
    assert [f"GPU-{serial_of_uuid(g['uuid'])}" for g in listed] == [g.uuid for g in sim.config.gpus]
