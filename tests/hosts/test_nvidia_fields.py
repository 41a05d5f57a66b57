"""What one nvidia-smi knows and says it cannot (hosts/vendors/nvidia_fields.py, issue #43 item
1): placeholders with their reasons, the field list, failure outputs as states, both XML
generations, `topo -m` with colours. Outputs come from the stand-in playing each driver."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from jupyter_gpuhive.hosts.probe import PROBE_COMMAND, parse_probe
from jupyter_gpuhive.hosts.vendors.nvidia_fields import (
    NOT_KNOWN,
    PLACEHOLDERS,
    driver_state,
    help_fields,
    known,
    placeholder_reason,
)
from jupyter_gpuhive.hosts.vendors.nvidia_health import DEGRADED, parse_health
from jupyter_gpuhive.hosts.vendors.nvidia_probe import GPU_FIELDS
from jupyter_gpuhive.hosts.vendors.nvidia_smi import (
    NvsmiDriverError,
    check_driver,
    parse_query_gpu,
    parse_query_xml,
)
from jupyter_gpuhive.hosts.vendors.nvidia_topology import parse_topology
from jupyter_gpuhive.model import utcnow
from jupyter_gpuhive.sim.cluster import LocalSimHost
from jupyter_gpuhive.sim.inventory import preset, set_gpu_fault


def stand_in(tmp_path: Path, driver: str, name: str = "nf1") -> LocalSimHost:
    config = preset("a100x4", name)
    config.driver_version = driver
    return LocalSimHost(name, tmp_path / name, config)


def smi(sim: LocalSimHost, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["nvidia-smi", *args], env=sim.env({}), capture_output=True,
                          text=True, check=False, timeout=60)  # fmt: skip


@pytest.mark.parametrize("placeholder", sorted(PLACEHOLDERS))
def test_every_placeholder_is_not_reported_with_its_reason(placeholder: str) -> None:
    text = (
        "index, uuid, name, memory.used [MiB], memory.total [MiB], power.draw [W]\n"
        f"0, GPU-1, Tesla, 10 MiB, 100 MiB, [{placeholder}]\n"
    )
    (gpu,) = parse_query_gpu(text)
    assert gpu.power_w is None and gpu.mem_used_mib == 10
    assert gpu.unreported == (("power.draw", PLACEHOLDERS[placeholder]),)
    assert placeholder_reason(placeholder) == placeholder_reason(f"[{placeholder}]")
    assert placeholder_reason("250.00 W") is None


@pytest.mark.parametrize(
    ("output", "state"),
    [
        ("Failed to initialize NVML: Driver/library version mismatch\n", "nvml_mismatch"),
        ("No devices were found\n", "no_devices"),
        (
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
            "Make sure that the latest NVIDIA driver is installed and running.\n",
            "driver_not_loaded",
        ),
        (
            "Unable to determine the device handle for GPU 0000:02:00.0: GPU is lost. "
            "Reboot the system to recover this GPU\n",
            "gpu_lost",
        ),
        ('Field "mig.mode.current" is not a valid field to query.\n\n', "unknown_field"),
    ],
)
def test_failure_outputs_are_states_even_on_stdout_with_a_status(output: str, state: str) -> None:
    found = driver_state(output)
    assert found is not None and found.state == state
    assert output.strip().splitlines()[0][:30] in found.message  # what nvidia-smi said, too
    with pytest.raises(NvsmiDriverError) as raised:
        check_driver(output, 2)
    assert raised.value.state == state and str(raised.value) == found.message


def test_the_field_list_of_each_generation(tmp_path: Path) -> None:
    old, new = stand_in(tmp_path, "418.87.00", "nf4"), stand_in(tmp_path, "590.48.01", "nf5")
    listed_old, listed_new = (
        help_fields(smi(old, "--help-query-gpu").stdout),
        help_fields(smi(new, "--help-query-gpu").stdout),
    )
    assert "mig.mode.current" not in listed_old and "gpu_uuid" in listed_old
    assert {"mig.mode.current", "remapped_rows.pending", "clocks_event_reasons.sw_thermal_slowdown"} <= listed_new  # fmt: skip
    assert known(GPU_FIELDS, listed_old) == GPU_FIELDS[:-1]  # all but mig.mode.current
    assert known(GPU_FIELDS, frozenset()) == GPU_FIELDS  # no list: ask everything
    refused = smi(old, "--query-gpu=index,mig.mode.current", "--format=csv")
    assert refused.returncode == 2
    assert refused.stdout.startswith('Field "mig.mode.current" is not a valid field to query.')


@pytest.mark.parametrize(
    ("driver", "power", "draw", "reasons"),
    [
        ("418.87.00", "power_readings", "power_draw", "clocks_throttle_reasons"),
        ("535.129.03", "gpu_power_readings", "power_draw", "clocks_event_reasons"),
        ("570.124.04", "gpu_power_readings", "instant_power_draw", "clocks_event_reasons"),
    ],
)
def test_both_xml_generations_give_power_and_health(
    tmp_path: Path, driver: str, power: str, draw: str, reasons: str
) -> None:
    sim = stand_in(tmp_path, driver)
    set_gpu_fault(sim.config_path, 2, "thermal")
    xml = smi(sim, "-q", "-x").stdout
    assert f"<{power}>" in xml and f"<{draw}>" in xml and f"<{reasons}>" in xml
    report = parse_query_xml(xml)
    assert [g.power_w for g in report.gpus][:2] == [55.0, 55.0]
    assert report.driver_version == driver
    health = parse_health(xml)
    assert health[report.gpus[2].uuid].state == DEGRADED
    assert "thermal slowdown" in " ".join(health[report.gpus[2].uuid].reasons)
    assert {h.state for u, h in health.items() if u != report.gpus[2].uuid} == {"ok"}


def test_topo_with_and_without_colours_reads_the_same() -> None:
    plain = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV4\t0-15\nGPU1\tNV4\t X \t0-15\n"
    coloured = plain.replace("NV4", "\x1b[32mNV4\x1b[0m").replace("GPU0\t", "\x1b[1mGPU0\x1b[0m\t")
    assert parse_topology(coloured) == parse_topology(plain)
    assert set(parse_topology(plain).links.values()) == {"NV4"}


def test_without_a_field_list_the_probe_leaves_out_the_refused_field(tmp_path: Path) -> None:
    """A host whose nvidia-smi prints no field list (a wrapper, a locked-down host) is asked
    everything; the field it refuses ('is not a valid field') is left out, the rest read."""
    sim = stand_in(tmp_path, "418.87.00", "nf6")
    real = sim.bin_dir / "nvidia-smi"
    wrapped = sim.bin_dir / "nvidia-smi.real"
    real.rename(wrapped)
    real.write_text(
        '#!/bin/sh\ncase "$1" in --help-query-gpu) echo "Invalid combination"; exit 2 ;; esac\n'
        f'exec "{wrapped}" "$@"\n'
    )
    real.chmod(0o755)
    answer = subprocess.run(["sh", "-c", PROBE_COMMAND], env=sim.env({}), capture_output=True,
                            text=True, check=True, timeout=60)  # fmt: skip
    sample = parse_probe("nf6", answer.stdout, utcnow())
    assert sample.gpu_error is None and len(sample.gpus) == 4
    assert all(g.mem_total_mib == 40960 for g in sample.gpus)
    gone = {f for f, why in sample.gpus[0].unreported if why == NOT_KNOWN}
    assert gone == {"mig.mode.current"}  # the refused field only: asked again without it
    assert all(g.temperature_c == 30 and g.mig_enabled is None for g in sample.gpus)
