"""The stand-in's fast path prints exactly what the full (dataclass) path prints, and stays light."""

from __future__ import annotations

import dataclasses
import io
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpuhive.sim import core, fastpath, nvidia_smi
from jupyter_gpuhive.sim.generations import unknown_field
from jupyter_gpuhive.sim.inventory import SimGpu, SimHostConfig, SimMig, preset, write_config
from jupyter_gpuhive.sim.query import APP_FIELDS, GPU_FIELDS
from jupyter_gpuhive.sim.users import start_gpu_process

PROFILES = ("a100x4", "mig", "gtx", "mixed")
# every field the profiles' drivers (470 to 550) know (sim/generations.py FIELDS_SINCE)
GPU_QUERY = ",".join(
    k
    for k in GPU_FIELDS
    if k != "timestamp" and not any(unknown_field(k, d) for d in ("470.82.01", "550.90.07"))
)
APPS_QUERY = ",".join(APP_FIELDS)
FORMATS = ("csv", "csv,noheader", "csv,nounits", "csv,noheader,nounits")


def run_main(
    config_path: Path, host: str, *args: str, fast: bool, monkeypatch: pytest.MonkeyPatch
) -> tuple[int, str]:
    """Run the stand-in in-process, with or without its fast path."""
    with monkeypatch.context() as patch:
        if not fast:
            patch.setattr(fastpath, "fast_answer", lambda *a, **k: None)
        out = io.StringIO()
        env = {core.CONFIG_ENV: str(config_path), core.HOST_ENV: host}
        status = nvidia_smi.main(list(args), env, out)
    return status, out.getvalue()


def both_paths(
    config_path: Path, host: str, *args: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[int, str]:
    """The fast path's answer, after checking that the full path gives the same.

    A config the full path chokes on (it raises) must make the fast path raise the same.
    """
    answers: list[Any] = []
    for fast in (True, False):
        try:
            answers.append(run_main(config_path, host, *args, fast=fast, monkeypatch=monkeypatch))
        except Exception as exc:
            answers.append(repr(exc))
    assert answers[0] == answers[1], args
    return answers[0]


@pytest.fixture
def busy_host(
    make_local_host: Callable[..., Any], gpu_processes: list[subprocess.Popen[bytes]]
) -> Callable[[str], Any]:
    """A local host of a profile with processes on its GPUs (fixed loads: comparable output)."""

    def make(profile: str) -> Any:
        host = make_local_host(profile)
        config = host.config
        loads = [(0, 700, 40), (0, 300, 90), (1, 1200, 10)]
        for gpu, mem, util in loads:
            gpu_processes.append(start_gpu_process(host.name, [gpu], mem_mib=mem, util=util))
        uuid = config.gpus[-1].uuid
        gpu_processes.append(start_gpu_process(host.name, [uuid], mem_mib=64, util=5))
        for gpu in config.gpus:
            if gpu.mig:
                gpu_processes.append(
                    start_gpu_process(host.name, [gpu.mig[-1].uuid], mem_mib=512, util=30)
                )
        for _ in range(200):  # until every process has exec'd sleep (with its environment)
            if all(core.comm(p.pid) == "sleep" for p in gpu_processes):
                break
            time.sleep(0.01)
        return host

    return make


@pytest.mark.parametrize("profile", PROFILES)
def test_fast_path_prints_what_the_full_path_prints(profile, busy_host, monkeypatch) -> None:
    host = busy_host(profile)
    for fmt in FORMATS:
        for query in (f"--query-gpu={GPU_QUERY}", f"--query-compute-apps={APPS_QUERY}"):
            status, text = both_paths(
                host.config_path, host.name, query, f"--format={fmt}", monkeypatch=monkeypatch
            )
            assert status == 0
            assert text
    status, text = both_paths(host.config_path, host.name, "-L", monkeypatch=monkeypatch)
    assert status == 0
    assert text.startswith("GPU 0: ")
    status, text = both_paths(
        host.config_path,
        host.name,
        "--query-compute-apps=pid,used_memory",
        "--format=csv,noheader",
        monkeypatch=monkeypatch,
    )
    assert len(text.splitlines()) == (3 if profile == "gtx" else 4 + (profile == "mig"))


def test_fast_path_handles_ghosts_and_unavailable_fields(shared_dir, monkeypatch) -> None:
    config = preset("mixed", "ghosty")
    config.gpus[1].ghost = {"util": 55, "memory_mib": 2048}
    config.gpus[1].unavailable = {"fan.speed": core.NA, "clocks.sm": core.NOT_SUPPORTED}
    config.gpus[0].pci_bus_id = "00000000:AA:00.0"
    path = write_config(shared_dir / "ghosty.json", config)
    assert fastpath.load_light_config(str(path)) is not None
    for fmt in FORMATS:
        status, _ = both_paths(
            path, "", f"--query-gpu={GPU_QUERY}", f"--format={fmt}", monkeypatch=monkeypatch
        )
        assert status == 0


def test_unknown_fields_are_refused_alike(make_local_host, monkeypatch) -> None:
    host = make_local_host()
    for query in ("--query-gpu=index,bogus", "--query-compute-apps=pid,bogus"):
        status, text = both_paths(
            host.config_path, host.name, query, "--format=csv", monkeypatch=monkeypatch
        )
        assert status == nvidia_smi.USAGE_EXIT
        assert text == 'Field "bogus" is not a valid field to query.\n\n'


BAD_CONFIGS: list[Any] = [
    {"host": "h", "gpus": [{"index": 0, "uuid": "GPU-1", "name": "X", "memory_total_mib": 1}]},
    {"host": "h", "driver_failure": True},
    {"host": "h", "junk": "garbage\n"},
    {"host": "h", "delay_s": 0.01},
    {"host": "h", "delay_s": True},
    {"host": "h", "surprise": 1},
    {"gpus": []},
    {"host": 7},
    {"host": "h", "gpus": None},
    {"host": "h", "gpus": {"index": 0}},
    {"host": "h", "gpus": [{"index": 0, "uuid": "GPU-1", "name": "X"}]},
    {"host": "h", "gpus": [{"index": "0", "uuid": "GPU-1", "name": "X", "memory_total_mib": 1}]},
    {
        "host": "h",
        "gpus": [{"index": 0, "uuid": "G", "name": "X", "memory_total_mib": 1, "mig": None}],
    },
    {
        "host": "h",
        "gpus": [{"index": 0, "uuid": "G", "name": "X", "memory_total_mib": 1, "mig": [{}]}],
    },
    [],
    "text",
]


@pytest.mark.parametrize("index", range(len(BAD_CONFIGS)))
def test_odd_configs_take_the_full_path(index, shared_dir, monkeypatch) -> None:
    data = BAD_CONFIGS[index]
    path = shared_dir / "odd.json"
    path.write_text(json.dumps(data))
    if index == 0:  # the healthy reference
        assert fastpath.load_light_config(str(path)) is not None
    else:
        assert fastpath.load_light_config(str(path)) is None
    monkeypatch.setattr("time.sleep", lambda s: None)  # the delay knob
    for query in ("--query-gpu=index,memory.used", "--query-compute-apps=pid"):
        both_paths(path, "h", query, "--format=csv", monkeypatch=monkeypatch)
    both_paths(path, "h", "-L", monkeypatch=monkeypatch)


@pytest.mark.parametrize("text", ["", "{", '{"host": "h"} x', '\ufeff{"host": "h"}', "[1,]"])
def test_malformed_json_takes_the_full_path(text, shared_dir, monkeypatch) -> None:
    path = shared_dir / "bad.json"
    path.write_text(text, encoding="utf-8")
    assert fastpath.load_light_config(str(path)) is None
    status, _ = both_paths(path, "h", "--query-gpu=index", "--format=csv", monkeypatch=monkeypatch)
    assert status == 1


def test_parse_json_agrees_with_json() -> None:
    text = '  {"a": [1, -2.5e3, null, true, false, "x\\u00e9\\n"], "b": {}, "c": NaN}\n'
    assert repr(fastpath.parse_json(text)) == repr(json.loads(text))


def _defaults(cls: type) -> tuple[tuple[str, ...], dict[str, Any]]:
    required, defaults = [], {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            defaults[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            defaults[f.name] = f.default_factory()
        else:
            required.append(f.name)
    return tuple(required), defaults


def test_light_records_mirror_the_dataclasses() -> None:
    assert _defaults(SimMig) == (fastpath.MIG_REQUIRED, fastpath.MIG_DEFAULTS)
    required, defaults = _defaults(SimGpu)
    assert required == fastpath.GPU_REQUIRED
    assert defaults == {**fastpath.GPU_DEFAULTS, "mig": [], "unavailable": {}}
    required, defaults = _defaults(SimHostConfig)
    assert required == fastpath.HOST_REQUIRED
    assert defaults == {**fastpath.HOST_DEFAULTS, "gpus": []}
    for profile in PROFILES:
        config = preset(profile, "mirror")
        light = fastpath.light_config(json.loads(json.dumps(config.to_dict())))
        for gpu, record in zip(config.gpus, light.gpus, strict=True):
            for name, value in dataclasses.asdict(gpu).items():
                if name == "mig":
                    value = [SimMig(**m) for m in value]
                    assert [vars(m) for m in record.mig] == [vars(m) for m in value]
                else:
                    assert getattr(record, name) == value, name
            assert record.mig_enabled == gpu.mig_enabled


def test_installed_stand_in_imports_nothing_heavy(make_local_host) -> None:
    """The CSV queries and -L must not import dataclasses, json, re, pathlib or typing."""
    host = make_local_host("mig")
    script = host.bin_dir / "nvidia-smi"
    probe = (
        "import sys\n"
        "sys.argv = sys.argv[1:]\n"
        "with open(sys.argv[0]) as f:\n"
        "    code = compile(f.read(), sys.argv[0], 'exec')\n"
        "try:\n"
        "    exec(code, {'__name__': '__main__'})\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = {'dataclasses', 'json', 're', 'pathlib', 'typing', 'inspect'}\n"
        "print(sorted(heavy & set(sys.modules)))\n"
    )
    calls = {
        "index": ["--query-gpu=index,memory.used,mig.mode.current", "--format=csv"],
        "pid": ["--query-compute-apps=pid", "--format=csv"],
        "GPU 0": ["-L"],
    }
    for first, args in calls.items():
        done = subprocess.run(
            [sys.executable, "-IS", "-c", probe, str(script), *args],
            env=host.env(),
            capture_output=True,
            text=True,
            check=True,
        )
        assert done.stdout.startswith(first), done.stdout + done.stderr
        assert done.stdout.splitlines()[-1] == "[]", done.stdout + done.stderr
