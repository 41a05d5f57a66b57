"""The stand-in can be any driver generation (sim/generations.py, issue #43 item 3): the fields
it accepts and lists, the XML it prints and the failures it answers with, as a real one."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from jupyter_gpuhive.sim.cluster import LocalSimHost
from jupyter_gpuhive.sim.generations import FAILURES, generation, unknown_field
from jupyter_gpuhive.sim.inventory import preset

# field -> the first generation that knows it (None: every one)
SINCE = {
    "mig.mode.current": "470",
    "power.draw.instant": "535",
    "clocks_event_reasons.hw_thermal_slowdown": "535",
    "clocks_throttle_reasons.hw_thermal_slowdown": None,
    "power.draw": None,
}
ORDER = ("418", "470", "535", "570")
DRIVERS = dict(zip(ORDER, ("418.87.00", "470.82.01", "535.129.03", "570.124.04"), strict=True))


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, LocalSimHost]:
    made = {}
    for name, driver in DRIVERS.items():
        config = preset("mig", f"gen{name}")
        config.driver_version = driver
        made[name] = LocalSimHost(f"gen{name}", tmp_path_factory.mktemp(name), config)
    return made


def smi(host: LocalSimHost, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["nvidia-smi", *args], env=host.env({}), capture_output=True,
                          text=True, check=False, timeout=60)  # fmt: skip


def test_a_driver_version_picks_its_generation() -> None:
    assert [generation(d) for d in DRIVERS.values()] == list(ORDER)
    assert generation("384.66") == "418" and generation("610.57.04") == "570"
    assert not unknown_field("mig.mode.current", "") and unknown_field("mig.mode.current", "440.1")


@pytest.mark.parametrize("gen", ORDER)
def test_fields_accepted_and_listed_by_generation(hosts: dict[str, LocalSimHost], gen: str):
    host = hosts[gen]
    listed = smi(host, "--help-query-gpu")
    assert listed.returncode == 0
    for field, since in SINCE.items():
        knows = since is None or ORDER.index(gen) >= ORDER.index(since)
        answer = smi(host, f"--query-gpu=uuid,{field}", "--format=csv")
        assert (f'"{field}"' in listed.stdout) is knows, field
        if knows:
            assert answer.returncode == 0 and len(answer.stdout.splitlines()) == 3
        else:  # on stdout, exit 2: the whole query fails, as a real driver's does
            assert answer.returncode == 2 and answer.stderr == ""
            assert answer.stdout == f'Field "{field}" is not a valid field to query.\n\n'


@pytest.mark.parametrize(
    ("gen", "present", "absent"),
    [
        ("418", ["<power_readings>", "<power_draw>", "v10.dtd"], ["<mig_mode>", "<mig_devices>"]),
        ("470", ["<power_readings>", "<mig_mode>", "v11.dtd"], ["<gpu_power_readings>"]),
        ("535", ["<gpu_power_readings>", "<power_draw>", "v12.dtd"], ["<instant_power_draw>"]),
        ("570", ["<gpu_power_readings>", "<instant_power_draw>"], ["<power_draw>"]),
    ],
)
def test_xml_element_names_by_generation(
    hosts: dict[str, LocalSimHost], gen: str, present: list[str], absent: list[str]
) -> None:
    xml = smi(hosts[gen], "-q", "-x").stdout
    assert all(p in xml for p in present), present
    assert not any(a in xml for a in absent), absent
    assert re.search(r"<driver_version>(.*)</driver_version>", xml)[1] == DRIVERS[gen]  # type: ignore[index]


@pytest.mark.parametrize("failure", sorted(FAILURES))
def test_failures_print_on_stdout_with_their_status(tmp_path: Path, failure: str) -> None:
    config = preset("a100x4", "genf")
    config.driver_failure = failure
    host = LocalSimHost("genf", tmp_path, config)
    text, status = FAILURES[failure]
    for args in (["--query-gpu=index,uuid", "--format=csv"], ["-L"], ["-q", "-x"]):
        done = smi(host, *args)
        assert (done.returncode, done.stdout, done.stderr) == (status, text, "")
    assert smi(host, "--help-query-gpu").returncode == 0  # static text needs no driver
