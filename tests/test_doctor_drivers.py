"""`jupyter gpuhive doctor` on old and slow drivers (issue #43 item 5): it names the driver it
found and the fields that driver will not give, times each nvidia-smi command, and warns
when `-q -x` is slow with persistence mode off, saying how to turn it on."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jupyter_gpuhive.sim.inventory import load_config, write_config
from tests.test_doctor_cli import gpuhive, lines_of, sim_up


def test_an_old_slow_driver_is_named_with_what_it_lacks_and_how_to_speed_it_up(
    tmp_path: Path,
) -> None:
    path = sim_up(tmp_path)
    config = load_config(path)
    config.driver_version = "418.87.00"
    config.delay_s = 1.0  # every call, as nvidia-smi initialising the GPUs without persistence
    for gpu in config.gpus:
        gpu.persistence_mode = False
    write_config(path, config)
    done = gpuhive(tmp_path, "doctor", "sim1")
    lines = lines_of(done.stdout)
    driver = lines["sim1 driver"]
    assert driver.startswith("WARN") and "driver 418.87.00" in driver, done.stdout
    assert "does not report mig.mode.current" in driver and "no MIG mode" in driver
    assert "persistence mode is off on GPU 0, 1" in driver
    took = re.search(r"-q -x took (\d+\.\d) s", driver)
    assert took and float(took[1]) >= 1.0  # the stand-in waited a second: never less
    assert "nvidia-persistenced" in done.stdout and "nvidia-smi -pm 1" in done.stdout
    assert lines["sim1 query-gpu"].startswith("ok ")  # asked only what 418 knows
    timed = [n for n, line in lines.items() if re.search(r"\[\d+\.\d\d s\]", line)]
    assert {
        "sim1 query-gpu",
        "sim1 query-compute-apps",
        "sim1 q-x",
        "sim1 topo",
        "sim1 health",
    } <= set(timed)


def test_a_current_driver_lacks_nothing_and_persistence_on_is_quiet(tmp_path: Path) -> None:
    path = sim_up(tmp_path)
    config = load_config(path)
    config.driver_version = "590.48.01"
    write_config(path, config)
    done = gpuhive(tmp_path, "doctor", "sim1")
    driver = lines_of(done.stdout)["sim1 driver"]
    assert driver.startswith("ok ") and "driver 590.48.01" in driver, done.stdout
    assert "does not report" not in driver and "persistence mode on" in driver


@pytest.mark.parametrize(
    ("failure", "words"),
    [
        ("nvml_mismatch", "updated without a reboot"),
        ("no_devices", "sees no GPU"),
        ("not_loaded", "lsmod | grep nvidia"),
    ],
)
def test_a_failing_driver_is_named_with_what_to_do(tmp_path: Path, failure: str, words: str):
    path = sim_up(tmp_path)
    config = load_config(path)
    config.driver_failure = failure
    write_config(path, config)
    done = gpuhive(tmp_path, "doctor", "sim1")
    driver = lines_of(done.stdout)["sim1 driver"]
    assert done.returncode == 1 and driver.startswith("FAIL"), done.stdout
    assert words in driver
