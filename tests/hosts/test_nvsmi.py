"""The nvidia-smi parser on every sample output, on reordered and broken output."""

from __future__ import annotations

import contextlib
import random
from pathlib import Path

import pytest

from jupyter_gpuhive.hosts.vendors import nvidia_smi as nvsmi
from jupyter_gpuhive.hosts.vendors.nvidia_smi import NvsmiDriverError, NvsmiParseError

FIXTURES = Path(__file__).parent.parent / "fixtures" / "nvidia-smi"
PROFILES = ("a100x4", "mig", "gtx", "mixed")
QUERY = list(nvsmi.QUERY_GPU_FIELDS)
APPS = ["gpu_uuid", "pid", "process_name", "used_memory"]


def sample(name: str) -> str:
    return (FIXTURES / name).read_text()


def listed_uuids(profile: str) -> list[str]:
    return [gpu.uuid for gpu in nvsmi.parse_gpu_list(sample(f"L.{profile}.txt"))]


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("variant", ["csv", "noheader-nounits.csv"])
def test_query_gpu_samples_match_their_gpu_list(profile: str, variant: str) -> None:
    gpus = nvsmi.parse_query_gpu(sample(f"query-gpu.{profile}.{variant}"), QUERY)
    assert [g.uuid for g in gpus] == listed_uuids(profile)
    assert [g.index for g in gpus] == list(range(len(gpus)))
    assert all(g.temperature_c == 30 and g.mem_total_mib for g in gpus)


@pytest.mark.parametrize("profile", PROFILES)
def test_units_and_no_units_read_the_same(profile: str) -> None:
    with_units = nvsmi.parse_query_gpu(sample(f"query-gpu.{profile}.csv"))
    bare = nvsmi.parse_query_gpu(sample(f"query-gpu.{profile}.noheader-nounits.csv"), QUERY)
    assert with_units == bare


def test_unavailable_values_become_none() -> None:
    a100 = nvsmi.parse_query_gpu(sample("query-gpu.a100x4.csv"))[0]
    assert (a100.power_w, a100.fan_pct, a100.mem_used_mib, a100.util_gpu) == (55.0, None, 4, 0)
    gtx = nvsmi.parse_query_gpu(sample("query-gpu.gtx.csv"))[0]
    assert (gtx.power_w, gtx.fan_pct, gtx.mem_total_mib) == (None, 30, 4096)
    old, v100 = nvsmi.parse_query_gpu(sample("query-gpu.mixed.csv"))
    assert (old.util_gpu, old.util_mem, old.power_w, old.fan_pct) == (None, None, None, 30)
    assert (v100.util_gpu, v100.power_w, v100.fan_pct) == (0, 55.0, None)


def test_mig_gpu_has_no_utilization() -> None:
    mig, plain = nvsmi.parse_query_gpu(sample("query-gpu.mig.csv"))
    assert (mig.util_gpu, mig.util_mem, mig.mem_used_mib) == (None, None, 0)
    assert (plain.util_gpu, plain.mem_used_mib) == (0, 4)


def test_columns_are_read_by_header_name_not_position() -> None:
    text = sample("query-gpu.a100x4.csv").splitlines()
    table = [line.split(", ") for line in text]
    order = list(reversed(range(len(table[0]))))
    shuffled = "\n".join(", ".join(row[i] for i in order) for row in table) + "\n"
    assert nvsmi.parse_query_gpu(shuffled) == nvsmi.parse_query_gpu(sample("query-gpu.a100x4.csv"))


def test_extra_columns_are_kept_by_name() -> None:
    text = (
        "index, uuid, pci.bus_id, power.limit [W], persistence_mode, clocks.current.sm [MHz]\n"
        "0, GPU-1, 00000000:07:00.0, 400.00 W, Enabled, [N/A]\n"
    )
    (gpu,) = nvsmi.parse_query_gpu(text)
    assert (gpu.pci_bus_id, gpu.power_limit_w, gpu.persistence_mode) == (
        "00000000:07:00.0",
        400.0,
        True,
    )
    assert nvsmi.parse_csv(text)[0]["clocks.sm"] is None


@pytest.mark.parametrize(
    "name", ["query-compute-apps.a100x4.csv", "query-compute-apps.a100x4.noheader-nounits.csv"]
)
def test_compute_apps_samples(name: str) -> None:
    procs = nvsmi.parse_compute_apps(sample(name), APPS)
    assert [(p.pid, p.process_name, p.used_memory_mib) for p in procs] == [
        (4242, "python", 1200),
        (5151, "/usr/bin/python3", 30112),
    ]
    uuids = listed_uuids("a100x4")
    assert [p.gpu_uuid for p in procs] == [uuids[0], uuids[2]]


def test_no_compute_apps_is_an_empty_list() -> None:
    assert nvsmi.parse_compute_apps(sample("query-compute-apps.none.csv")) == []
    assert nvsmi.parse_compute_apps("", APPS) == []


def test_process_name_with_comma_is_kept_whole() -> None:
    text = "pid, process_name, gpu_uuid, used_gpu_memory [MiB]\n7, train, v2, GPU-1, 10 MiB\n"
    (proc,) = nvsmi.parse_compute_apps(text)
    assert (proc.pid, proc.process_name, proc.gpu_uuid) == (7, "train, v2", "GPU-1")


@pytest.mark.parametrize("profile", PROFILES)
def test_xml_samples_match_their_gpu_list(profile: str) -> None:
    report = nvsmi.parse_query_xml(sample(f"q-x.{profile}.xml"))
    assert [g.uuid for g in report.gpus] == listed_uuids(profile)
    assert report.processes == ()
    assert report.driver_version
    assert report.cuda_version
    csv = nvsmi.parse_query_gpu(sample(f"query-gpu.{profile}.csv"))
    for from_xml, from_csv in zip(report.gpus, csv, strict=True):
        assert from_xml.mem_total_mib == from_csv.mem_total_mib
        assert from_xml.power_w == from_csv.power_w
        assert from_xml.fan_pct == from_csv.fan_pct


def test_xml_with_processes() -> None:
    report = nvsmi.parse_query_xml(sample("q-x.a100x4-with-processes.xml"))
    assert [(p.pid, p.process_name, p.used_memory_mib) for p in report.processes] == [
        (4242, "python", 1200),
        (5151, "/usr/bin/python3", 30112),
    ]
    assert report.processes[0].gpu_uuid == report.gpus[0].uuid
    assert report.processes[1].gpu_bus_id == "00000000:17:00.0"
    first = report.gpus[0]
    assert (first.util_gpu, first.util_mem, first.mem_used_mib, first.power_w) == (
        86,
        43,
        1204,
        270.0,
    )
    assert (first.temperature_c, first.power_limit_w, first.persistence_mode) == (58, 400.0, True)


def test_xml_mig_devices() -> None:
    mig, plain = nvsmi.parse_query_xml(sample("q-x.mig.xml")).gpus
    assert mig.mig_enabled is True
    assert plain.mig_enabled is False
    assert mig.util_gpu is None
    assert [
        (d.index, d.gpu_instance_id, d.mem_total_mib, d.multiprocessor_count) for d in mig.mig
    ] == [
        (0, 1, 40192, 42),
        (1, 5, 19968, 28),
        (2, 13, 9728, 14),
    ]
    assert plain.mig == ()


def test_xml_old_driver_power_and_unsupported_values() -> None:
    gtx = nvsmi.parse_query_xml(sample("q-x.gtx.xml")).gpus[0]
    assert (gtx.power_w, gtx.power_limit_w, gtx.fan_pct, gtx.mig_enabled) == (None, None, 30, None)
    old = nvsmi.parse_query_xml(sample("q-x.mixed.xml")).gpus[0]
    assert (old.util_gpu, old.util_mem) == (None, None)


def test_gpu_list_with_mig() -> None:
    mig, plain = nvsmi.parse_gpu_list(sample("L.mig.txt"))
    assert [(d.index, d.profile, d.uuid) for d in mig.mig] == [
        (0, "3g.40gb", "MIG-f9a16904-b58e-d520-c431-96244c7fdfaf"),
        (1, "2g.20gb", "MIG-5ebf3fb5-5ae3-1fb3-d239-40e3e35ae671"),
        (2, "1g.10gb", "MIG-dbbf4f9e-de61-bf85-9e9e-8d6d5f61c39a"),
    ]
    assert (plain.index, plain.name, plain.mig) == (1, "NVIDIA A100-SXM4-80GB", ())


@pytest.mark.parametrize(
    "parse",
    [
        lambda t: nvsmi.parse_query_gpu(t, QUERY),
        lambda t: nvsmi.parse_compute_apps(t, APPS),
        nvsmi.parse_query_xml,
        nvsmi.parse_gpu_list,
    ],
)
def test_driver_failure_is_a_driver_error(parse) -> None:
    with pytest.raises(NvsmiDriverError, match="couldn't communicate with the NVIDIA driver"):
        parse(sample("driver-failure.txt"))


def test_exit_status_alone_is_a_driver_error() -> None:
    with pytest.raises(NvsmiDriverError, match="status 9"):
        nvsmi.check_driver("", 9)
    nvsmi.check_driver(sample("query-gpu.gtx.csv"), 0)


def test_missing_column_names_its_line() -> None:
    text = sample("query-gpu.a100x4.csv").splitlines()
    text[2] = text[2].rsplit(", ", 3)[0]
    with pytest.raises(NvsmiParseError) as info:
        nvsmi.parse_query_gpu("\n".join(text))
    assert info.value.line == 3
    assert "expected 10 CSV fields, got 7" in str(info.value)


def test_garbage_values_are_parse_errors() -> None:
    with pytest.raises(NvsmiParseError, match=r"memory.used is not a number: '4 pigs'"):
        nvsmi.parse_query_gpu("index, uuid, memory.used [MiB]\n0, GPU-1, 4 pigs\n")
    with pytest.raises(NvsmiParseError, match="no CSV header"):
        nvsmi.parse_query_gpu(sample("query-gpu.gtx.noheader-nounits.csv"))
    with pytest.raises(NvsmiParseError, match="'uuid' field is missing"):
        nvsmi.parse_query_gpu("index, name\n0, x\n")
    with pytest.raises(NvsmiParseError, match="not valid nvidia-smi XML"):
        nvsmi.parse_query_xml(sample("q-x.mig.xml")[:500])
    with pytest.raises(NvsmiParseError, match="entities"):
        nvsmi.parse_query_xml('<!DOCTYPE a [<!ENTITY x "y">]><nvidia_smi_log/>')
    with pytest.raises(NvsmiParseError, match="unexpected XML root"):
        nvsmi.parse_query_xml("<html/>")
    with pytest.raises(NvsmiParseError, match="not an nvidia-smi -L line"):
        nvsmi.parse_gpu_list("GPU zero: what\n")


@pytest.mark.parametrize(
    "name", sorted(p.name for p in FIXTURES.iterdir() if p.suffix in (".csv", ".xml", ".txt"))
)
def test_mangled_samples_parse_or_fail_cleanly(name: str) -> None:
    """Random damage to any sample gives a result or an NvsmiParseError, never another error."""
    text = sample(name)
    rng = random.Random(name)
    parsers = [
        lambda t: nvsmi.parse_query_gpu(t, QUERY),
        lambda t: nvsmi.parse_compute_apps(t, APPS),
        nvsmi.parse_query_xml,
        nvsmi.parse_gpu_list,
    ]
    for _ in range(60):
        chars = list(text)
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(chars))
            chars[at : at + rng.randint(0, 6)] = rng.choice(
                ["", ",", ", ", "[N/A]", "<", "\x00", "9"]
            )
        for parse in parsers:
            with contextlib.suppress(NvsmiParseError):
                parse("".join(chars))
