"""The nvidia-smi stand-in prints the samples' formats exactly, and its faults work."""

from __future__ import annotations

import io
import re
import subprocess
import time
from pathlib import Path

import pytest

from jupyter_gpuhive.hosts.vendors import nvidia_smi as nvsmi
from jupyter_gpuhive.sim import formats
from jupyter_gpuhive.sim.inventory import preset
from jupyter_gpuhive.sim.nvidia_smi import JUNK, main
from jupyter_gpuhive.sim.processes import Placement, SimProcess
from jupyter_gpuhive.sim.snapshot import snapshot
from jupyter_gpuhive.sim.table import summary_table

FIXTURES = Path(__file__).parent.parent / "fixtures" / "nvidia-smi"
PROFILES = ("a100x4", "mig", "gtx", "mixed")
README_QUERY = (
    "index,uuid,name,utilization.gpu,utilization.memory,memory.used,memory.total,"
    "temperature.gpu,power.draw,fan.speed"
)


def sample(name: str) -> str:
    return (FIXTURES / name).read_text()


def without_timestamp(xml: str) -> str:
    return re.sub(r"<timestamp>.*</timestamp>", "<timestamp/>", xml)


@pytest.mark.parametrize("profile", PROFILES)
def test_idle_output_equals_the_samples(profile: str, make_local_host, run_smi) -> None:
    host = make_local_host(profile, sample_uuids=True)
    query = f"--query-gpu={README_QUERY}"
    assert run_smi(host, query, "--format=csv").stdout == sample(f"query-gpu.{profile}.csv")
    bare = run_smi(host, query, "--format=csv,noheader,nounits").stdout
    assert bare == sample(f"query-gpu.{profile}.noheader-nounits.csv")
    assert run_smi(host, "-L").stdout == sample(f"L.{profile}.txt")
    xml = run_smi(host, "-q", "-x").stdout
    assert without_timestamp(xml) == without_timestamp(sample(f"q-x.{profile}.xml"))
    apps = run_smi(host, "--query-compute-apps=gpu_uuid,pid,used_memory", "--format=csv")
    assert apps.stdout == sample("query-compute-apps.none.csv")
    assert run_smi(host, "--query-compute-apps=pid", "--format=csv,noheader").stdout == ""


def sample_processes() -> list[SimProcess]:
    """The two processes of the a100x4 samples (pids 4242 and 5151)."""
    return [
        SimProcess(4242, "python", (Placement(0),), 1200, 86),
        SimProcess(5151, "/usr/bin/python3", (Placement(2),), 30112, 75),
    ]


def test_busy_output_equals_the_samples() -> None:
    snap = snapshot(preset("a100x4", "h", sample_uuids=True), sample_processes())
    xml = formats.query_xml(snap)
    assert without_timestamp(xml) == without_timestamp(sample("q-x.a100x4-with-processes.xml"))
    fields = ["gpu_uuid", "pid", "process_name", "used_memory"]
    assert formats.query_apps_csv(snap, fields) == sample("query-compute-apps.a100x4.csv")
    bare = formats.query_apps_csv(snap, fields, noheader=True, nounits=True)
    assert bare == sample("query-compute-apps.a100x4.noheader-nounits.csv")


def test_mig_processes_report_the_parent_gpu_and_instance() -> None:
    config = preset("mig", "h", sample_uuids=True)
    procs = [SimProcess(77, "train", (Placement(0, 1),), 5000, 40)]
    snap = snapshot(config, procs)
    (proc,) = nvsmi.parse_compute_apps(formats.query_apps_csv(snap, ["pid", "gpu_uuid"]))
    assert proc.gpu_uuid == config.gpus[0].uuid
    report = nvsmi.parse_query_xml(formats.query_xml(snap))
    assert (report.processes[0].pid, report.processes[0].gpu_instance_id) == (77, 5)
    assert [d.mem_used_mib for d in report.gpus[0].mig] == [0, 5000, 0]
    assert report.gpus[0].mem_used_mib == 5000
    assert report.gpus[0].util_gpu is None


@pytest.mark.parametrize("profile", PROFILES)
def test_round_trip_through_the_parser(profile: str) -> None:
    config = preset(profile, "rt")
    procs = [SimProcess(9, "a.out", (Placement(0, 0 if config.gpus[0].mig else None),), 100, 50)]
    snap = snapshot(config, procs)
    fields = [
        *README_QUERY.split(","),
        "pci.bus_id",
        "persistence_mode",
        "power.limit",
        "clocks.sm",
    ]
    for noheader in (False, True):
        for nounits in (False, True):
            text = formats.query_gpu_csv(snap, fields, noheader=noheader, nounits=nounits)
            gpus = nvsmi.parse_query_gpu(text, fields)
            assert [g.uuid for g in gpus] == [g.uuid for g in config.gpus]
            assert [g.mem_total_mib for g in gpus] == [g.memory_total_mib for g in config.gpus]
            assert [g.pci_bus_id for g in gpus] == [g.pci_bus_id for g in config.gpus]
            assert gpus[0].persistence_mode is True
            assert gpus[0].mem_used_mib == (100 if config.gpus[0].mig else 104)
    report = nvsmi.parse_query_xml(formats.query_xml(snap))
    assert [(p.pid, p.gpu_uuid, p.used_memory_mib) for p in report.processes] == [
        (9, config.gpus[0].uuid, 100)
    ]
    listing = nvsmi.parse_gpu_list(formats.list_gpus(snap))
    assert [m.uuid for m in listing[0].mig] == [m.uuid for m in config.gpus[0].mig]


def test_ghost_load_without_processes() -> None:
    config = preset("a100x4", "g")
    config.gpus[1].ghost = {"memory_mib": 2000, "util": 60}
    gpus = nvsmi.parse_query_gpu(
        formats.query_gpu_csv(snapshot(config, []), README_QUERY.split(","))
    )
    assert (gpus[1].mem_used_mib, gpus[1].util_gpu, gpus[1].util_mem) == (2004, 60, 30)
    assert gpus[1].power_w == 205.0
    assert formats.query_apps_csv(snapshot(config, []), ["pid"], noheader=True) == ""


def test_command_line_errors(make_local_host, run_smi) -> None:
    host = make_local_host()
    bad = run_smi(host, "--query-gpu=index,bogus.field", "--format=csv")
    assert (bad.returncode, bad.stdout.strip()) == (
        2,
        'Field "bogus.field" is not a valid field to query.',
    )
    assert run_smi(host, "--query-gpu=index").returncode == 2
    assert run_smi(host, "--frobnicate").returncode == 2
    one = run_smi(host, "-i", "2", "--query-gpu=index,uuid", "--format=csv,noheader")
    assert one.stdout == f"2, {host.config.gpus[2].uuid}\n"
    assert run_smi(host, "-i", "9", "-L").returncode == 6


def test_in_process_main_and_missing_config() -> None:
    out = io.StringIO()
    assert main(["-L"], environ={}, out=out) == 1
    assert main(["-h"], environ={}, out=out) == 0
    assert "--query-gpu" in out.getvalue()


def test_driver_failure_fault(make_local_host, run_smi) -> None:
    host = make_local_host()
    host.set_fault(driver_failure=True)
    result = run_smi(host, "--query-gpu=index,uuid", "--format=csv")
    assert result.returncode == 9
    assert result.stdout == sample("driver-failure.txt").split("exit=")[0]
    with pytest.raises(nvsmi.NvsmiDriverError):
        nvsmi.parse_query_gpu(result.stdout)
    host.clear_faults()
    assert run_smi(host, "-L").returncode == 0


def test_junk_fault_gives_a_parse_error(make_local_host, run_smi) -> None:
    host = make_local_host()
    host.set_fault(junk=True)
    result = run_smi(host, "--query-gpu=index,uuid,memory.used", "--format=csv,noheader,nounits")
    assert (result.returncode, result.stdout) == (0, JUNK)
    with pytest.raises(nvsmi.NvsmiParseError):
        nvsmi.parse_query_gpu(result.stdout, ["index", "uuid", "memory.used"])
    with pytest.raises(nvsmi.NvsmiParseError):
        nvsmi.parse_query_xml(run_smi(host, "-q", "-x").stdout)
    host.set_fault(junk="index, uuid\n0, GPU-x, surplus\n")
    with pytest.raises(nvsmi.NvsmiParseError, match="expected 2 CSV fields"):
        nvsmi.parse_query_gpu(run_smi(host, "-q", "-x").stdout)


def test_delay_fault(make_local_host, run_smi) -> None:
    host = make_local_host()
    host.set_fault(delay_s=0.6)
    started = time.monotonic()
    assert run_smi(host, "-L").returncode == 0
    assert time.monotonic() - started >= 0.6


def test_hang_fault_never_answers_until_cleared(make_local_host) -> None:
    host = make_local_host()
    host.set_fault(hang=True)
    proc = subprocess.Popen(
        [str(host.bin_dir / "nvidia-smi"), "-L"], env=host.env(), stdout=subprocess.PIPE
    )
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            proc.communicate(timeout=1.0)
        host.clear_faults()
        out, _ = proc.communicate(timeout=5)
        assert (proc.returncode, out) == (1, b"")
    finally:
        proc.kill()
        proc.wait()


def test_plain_nvidia_smi_prints_a_summary_table(make_local_host, run_smi) -> None:
    host = make_local_host("mig")
    result = run_smi(host)
    assert result.returncode == 0
    assert "No running processes found" in result.stdout
    table = summary_table(snapshot(preset("a100x4", "t", sample_uuids=True), sample_processes()))
    assert "4242" in table
    assert "/usr/bin/python3" in table
    assert {len(line) for line in table.splitlines()[1:]} == {89}
