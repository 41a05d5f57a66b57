"""`jupyter gpuhive doctor` through the real CLI against hosts simulated by `sim up` (issue #30,
item 3): every query parses, a failure preset is reported, a host without nvidia-smi is one
sentence and status 1, `--save` keeps outputs that gpuhive's parsers read again, `--json`."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_gpuhive.hosts.environment import SAFE_PATH
from jupyter_gpuhive.hosts.file import add_host
from jupyter_gpuhive.hosts.vendors.nvidia_doctor import QUERIES, Output, judge
from jupyter_gpuhive.hosts.vendors.nvidia_health import health_from_csv
from jupyter_gpuhive.hosts.vendors.nvidia_smi import (
    parse_compute_apps,
    parse_gpu_list,
    parse_query_gpu,
    parse_query_xml,
)
from jupyter_gpuhive.hosts.vendors.nvidia_topology import parse_topology
from jupyter_gpuhive.sim.inventory import load_config, set_gpu_fault, write_config
from tests.hosts.test_hostile_probe import forged_names
from tests.support.hostile import hostile_process, named_argv

CLI = [sys.executable, "-m", "jupyter_gpuhive.cli.main"]
NAMES = [
    "connection",
    "nvidia-smi",
    "driver",
    "q-x",
    "query-gpu",
    "query-compute-apps",
    "mig",
    "topo",
    "health",
    "screen",
    "kernel-python",
]


def gpuhive(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
        "JUPYTER_DATA_DIR": str(tmp_path / "data"),
        "PATH": "/usr/local/bin:/usr/bin:/bin",
    }
    return subprocess.run(
        [*CLI, *args],
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
        check=False,
    )


def sim_up(tmp_path: Path, *args: str) -> Path:
    """`sim up` one host of 2 GPUs; the stand-in's config file of sim1."""
    up = gpuhive(tmp_path, "sim", "up", "--gpus", "2", *args)
    assert up.returncode == 0, up.stderr
    return tmp_path / "data" / "gpuhive-sim" / "sim1" / "sim1.json"


def lines_of(text: str) -> dict[str, str]:
    """{check name: its line} of sim1's checks in the text report."""
    found = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) > 2 and words[0] in ("ok", "WARN", "FAIL"):
            found[f"{words[1]} {words[2]}"] = line
    return found


@pytest.mark.parametrize("mig", [False, True], ids=["plain", "mig"])
def test_every_check_passes_on_a_simulated_host(tmp_path: Path, mig: bool) -> None:
    sim_up(tmp_path, *(["--mig"] if mig else []))
    done = gpuhive(tmp_path, "doctor")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = lines_of(done.stdout)
    assert list(lines) == [f"sim1 {name}" for name in NAMES], done.stdout
    assert all(line.startswith("ok ") for line in lines.values()), done.stdout
    assert "driver 550.90.07, CUDA 12.4" in lines["sim1 driver"]
    assert "2 GPUs (NVIDIA A100" in lines["sim1 query-gpu"]
    assert "ipykernel" in lines["sim1 kernel-python"] and "-I" in lines["sim1 kernel-python"]
    if mig:
        assert "GPU 0: 3 slices (3g.40gb, 2g.20gb, 1g.10gb)" in lines["sim1 mig"]
    else:
        assert "2 GPUs, MIG off" in lines["sim1 mig"]
    assert "11 ok, 0 warn, 0 fail." in done.stdout


@pytest.mark.parametrize(
    ("preset", "words"), [("ecc", "uncorrectable ECC"), ("lost", "GPU is lost")]
)
def test_a_failed_gpu_fails_the_health_check(tmp_path: Path, preset: str, words: str) -> None:
    set_gpu_fault(sim_up(tmp_path), 1, preset)
    done = gpuhive(tmp_path, "doctor", "sim1")
    assert done.returncode == 1, done.stdout + done.stderr
    lines = lines_of(done.stdout)
    assert lines["sim1 health"].startswith("FAIL") and words in lines["sim1 health"]
    assert "refuses bookings" in lines["sim1 health"]
    others = [line for name, line in lines.items() if name != "sim1 health"]
    assert all(line.startswith("ok ") for line in others), done.stdout  # the other rows parse


def test_a_host_without_nvidia_smi_is_one_sentence_and_status_1(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    add_host(
        tmp_path / "config" / "gpuhive_hosts.toml",
        {"name": "bare", "transport": "local", "env": {"PATH": "/usr/bin:/bin"}},
    )
    done = gpuhive(tmp_path, "doctor")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    lines = lines_of(done.stdout)
    assert list(lines) == [
        "bare connection",
        "bare nvidia-smi",
        "bare screen",
        "bare kernel-python",
    ]
    line = lines["bare nvidia-smi"]
    assert line.startswith("FAIL") and "no nvidia-smi on the PATH" in line
    assert "(/usr/bin:/bin)" in line and line.count(". ") == 0  # one sentence (and the fix)


def test_an_ssh_host_that_does_not_answer_fails_the_connection(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    add_host(tmp_path / "config" / "gpuhive_hosts.toml",
             {"name": "far", "address": "127.0.0.1", "port": 1, "user": "monitor"})  # fmt: skip
    done = gpuhive(tmp_path, "doctor", "--json")
    assert done.returncode == 1, done.stderr
    (check,) = json.loads(done.stdout)["checks"]
    assert (check["name"], check["status"]) == ("connection", "fail")
    assert "ssh monitor@127.0.0.1:1" in check["detail"] and "refused" in check["detail"]


def test_save_keeps_raw_outputs_that_parse_again(tmp_path: Path) -> None:
    config = sim_up(tmp_path, "--mig")
    set_gpu_fault(config, 1, "ecc")
    done = gpuhive(tmp_path, "doctor", "--save", str(tmp_path / "saved"))
    assert done.returncode == 1, done.stdout + done.stderr
    folder = tmp_path / "saved" / "sim1"
    about = json.loads((folder / "doctor.json").read_text())
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        ["doctor.json", *(file for _, file, _ in QUERIES)]
    )
    assert {o["file"]: o["command"] for o in about["outputs"]} == {f: c for _, f, c in QUERIES}
    text = {f: (folder / f).read_text() for _, f, _ in QUERIES}
    assert len(parse_query_gpu(text["query-gpu.csv"])) == 2
    assert parse_compute_apps(text["query-compute-apps.csv"]) == []
    assert len(parse_gpu_list(text["L.txt"])[0].mig) == 3
    assert parse_query_xml(text["q-x.xml"]).driver_version == "550.90.07"
    health = health_from_csv(text["query-gpu-health.csv"])
    assert health[parse_query_gpu(text["query-gpu.csv"])[1].uuid].state == "failed"
    assert len(parse_topology(text["topo-m.txt"]).gpus) == 2
    outputs = {
        o["file"]: Output(o["file"], o["command"], o["exit_status"], text[o["file"]])
        for o in about["outputs"]
    }
    again = {c.name: c.status for c in judge("sim1", outputs)}
    assert again == {c["name"]: c["status"] for c in about["checks"] if c["name"] in again}


def test_json_has_one_entry_per_check(tmp_path: Path) -> None:
    sim_up(tmp_path)
    text = gpuhive(tmp_path, "doctor")
    done = gpuhive(tmp_path, "doctor", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [c["name"] for c in report["checks"]] == NAMES
    assert len(report["checks"]) == len(lines_of(text.stdout))
    assert all(
        set(c) == {"host", "name", "status", "detail", "fix", "command"} for c in report["checks"]
    )
    assert report["summary"] == {"ok": 11, "warn": 0, "fail": 0}
    assert report["gpuhive"] and report["hosts"][0]["host"] == "sim1"


def test_an_unknown_host_is_one_sentence(tmp_path: Path) -> None:
    sim_up(tmp_path)
    done = gpuhive(tmp_path, "doctor", "nope")
    assert done.returncode == 1
    assert done.stderr.strip() == "No host 'nope'; the hosts are sim1 (jupyter gpuhive hosts)."


@pytest.mark.skipif(bool(shutil.which("nvidia-smi", path=SAFE_PATH)), reason="a GPU machine")
def test_with_no_hosts_configured_it_checks_this_machine(tmp_path: Path) -> None:
    from jupyter_gpuhive.hosts.config import local_host_name

    done = gpuhive(tmp_path, "doctor", "--json")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert {c["host"] for c in report["checks"]} == {local_host_name()}
    assert [c["name"] for c in report["checks"]][:2] == ["connection", "nvidia-smi"]
    assert report["summary"]["fail"] == 1 and report["hosts"][0]["where"].startswith("this machine")


def test_a_users_process_names_neither_forge_nor_hide_the_health_check(tmp_path: Path) -> None:
    """A real second user's processes with names that forge a failed `<gpu>` block for GPU 1
    and hide the real XML in a comment (a driver that prints names unescaped): the doctor's
    health comes from the `--query-gpu` fields, as the probe's, and says every GPU is ok."""
    config = sim_up(tmp_path)
    sim = load_config(config)
    sim.raw_names = True
    write_config(config, sim)
    a, b = forged_names(sim.gpus[1].uuid, whole_xml=True)
    with (
        hostile_process("sim1", [0], argv=named_argv(a), config=config),
        hostile_process("sim1", [1], argv=named_argv(b), config=config),
    ):
        done = gpuhive(tmp_path, "doctor", "--json")
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    assert checks["health"]["status"] == "ok"
    assert re.fullmatch(r"2 GPUs: ok \[\d+\.\d\d s\]", checks["health"]["detail"])  # and its time
    assert "nvidia-smi --query-gpu=uuid,ecc" in checks["health"]["command"]
    assert checks["query-gpu"]["status"] == "ok"  # read though -q -x was not
