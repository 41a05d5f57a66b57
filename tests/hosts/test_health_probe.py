"""What the probe sends for health: `--query-gpu` fields (issue #41; #30 kept its cost low:
unchanged lines are sent once per loop), never `-q -x`, which carries process names; the XML
comes only from MIG hosts, for their slices. The temperature is the CSV query's reading."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from jupyter_gpuhive.hosts.pool import HostPool
from jupyter_gpuhive.hosts.probe import (
    END,
    MARK,
    PROBE_COMMAND,
    PROBE_LOOP_COMMAND,
    HostSample,
    parse_probe,
    split_sections,
)
from jupyter_gpuhive.hosts.vendors.nvidia_health import DEGRADED, FAILED, OK, parse_health
from jupyter_gpuhive.hosts.vendors.nvidia_smi import NvsmiParseError
from jupyter_gpuhive.model import HostDecl, utcnow
from jupyter_gpuhive.sim.cluster import LocalSimHost
from jupyter_gpuhive.sim.inventory import load_config, preset, set_gpu_fault, write_config
from jupyter_gpuhive.sim.users import start_gpu_process
from tests.support.hostile import named_argv

NAME = "gpuhive-health-probe-marker"


def probe_answer(sim: LocalSimHost) -> str:
    done = subprocess.run(["sh", "-c", PROBE_COMMAND], env=sim.env({}), capture_output=True,
                          text=True, check=True, timeout=60)  # fmt: skip
    return done.stdout


def full_xml(sim: LocalSimHost) -> str:
    done = subprocess.run(["nvidia-smi", "-q", "-x"], env=sim.env({}), capture_output=True,
                          text=True, check=True, timeout=60)  # fmt: skip
    return done.stdout


def test_health_comes_from_query_fields_that_hold_no_process_name(tmp_path: Path) -> None:
    sim = LocalSimHost("hp1", tmp_path / "sim", preset("a100x4", "hp1"))
    set_gpu_fault(sim.config_path, 1, "ecc")
    gpu = start_gpu_process("hp1", [0], command=named_argv(NAME), config=sim.config_path)
    try:
        full = full_xml(sim)
        first, second = probe_answer(sim), probe_answer(sim)
    finally:
        gpu.kill()
        gpu.wait()
    assert NAME in full  # the XML would carry the name: the probe no longer asks for it
    sections = split_sections(first)
    assert "xml" not in sections and NAME not in sections["health"][1]
    assert "<" not in sections["health"][1]
    assert sections["health"][1] == split_sections(second)["health"][1]  # unchanged when healthy
    sample = parse_probe("hp1", first, utcnow())
    states = {g.index: sample.health[g.uuid].state for g in sample.gpus}
    assert states == {0: OK, 1: FAILED, 2: OK, 3: OK}
    # the same verdicts as the stand-in's whole XML gives
    uuids = {g.uuid for g in sample.gpus}
    assert {u: h.state for u, h in parse_health(full, uuids).items()} == {
        u: h.state for u, h in sample.health.items()
    }


def test_a_driver_without_remapped_row_fields_gets_the_rest(tmp_path: Path) -> None:
    """An unknown field fails a whole query: drivers that do not know remapped_rows.* (535 in
    the corpus) get the query without them, for the loop's life; 590 gets them."""
    sim = LocalSimHost("hp6", tmp_path / "sim", preset("a100x4", "hp6"))
    set_gpu_fault(sim.config_path, 1, "ecc")
    set_gpu_fault(sim.config_path, 2, "remapped")
    for driver, rows in (("535.129.03", False), ("590.48.01", True)):
        config = load_config(sim.config_path)
        config.driver_version = driver
        write_config(sim.config_path, config)
        answer = probe_answer(sim)
        assert ("remapped_rows.failure" in split_sections(answer)["health"][1]) is rows
        sample = parse_probe("hp6", answer, utcnow())
        assert sample.health[sample.gpus[1].uuid].state == FAILED
        assert sample.health[sample.gpus[2].uuid].state == (FAILED if rows else OK)


def test_a_mig_host_sends_the_whole_xml_for_its_slices(tmp_path: Path) -> None:
    sim = LocalSimHost("hp2", tmp_path / "sim", preset("mig", "hp2"))
    sent = split_sections(probe_answer(sim))["xml"][1]
    assert "<mig_devices>" in sent  # for the slices, never for health
    sample = parse_probe("hp2", probe_answer(sim), utcnow())
    assert sample.slices and all(h.state == OK for h in sample.health.values())


def test_the_temperature_comes_from_the_csv_reading(tmp_path: Path) -> None:
    sim = LocalSimHost("hp3", tmp_path / "sim", preset("a100x4", "hp3"))
    set_gpu_fault(sim.config_path, 2, "thermal")
    sample = parse_probe("hp3", probe_answer(sim), utcnow())
    hot = sample.gpus[2]
    assert hot.temperature_c == 95
    assert sample.health[hot.uuid].state == DEGRADED
    assert any("at 95 C" in reason for reason in sample.health[hot.uuid].reasons)
    # One text, two temperatures: the verdict follows the temperature given, not the text
    # read before (the threshold, 89 C, is in the XML; no slowdown reason is active on GPU 0).
    set_gpu_fault(sim.config_path, 2, None)
    set_gpu_fault(sim.config_path, 0, "thermal")
    xml = full_xml(sim).replace("<hw_thermal_slowdown>Active", "<hw_thermal_slowdown>Not Active")
    xml = xml.replace("<sw_thermal_slowdown>Active", "<sw_thermal_slowdown>Not Active")
    xml = xml.replace(
        "<clocks_event_reason_hw_thermal_slowdown>Active",
        "<clocks_event_reason_hw_thermal_slowdown>Not Active",
    ).replace(
        "<clocks_event_reason_sw_thermal_slowdown>Active",
        "<clocks_event_reason_sw_thermal_slowdown>Not Active",
    )
    cool = sample.gpus[0].uuid
    assert parse_health(xml, {cool}, {cool: 60})[cool].state == OK
    warm = parse_health(xml, {cool}, {cool: 90})[cool]
    assert warm.state == DEGRADED
    assert warm.reasons == ("90 C, at or above the slowdown threshold of 89 C",)
    assert parse_health(xml, {cool}, {cool: 60})[cool].state == OK


SIM_ENV = ("PATH", "GPUHIVE_SIM_HOST", "GPUHIVE_SIM_CONFIG")


async def test_unchanged_health_lines_are_sent_once_per_loop(tmp_path: Path) -> None:
    config = preset("a100x4", "hp4")
    config.driver_version = "590.48.01"  # knows remapped_rows.* in --query-gpu
    sim = LocalSimHost("hp4", tmp_path / "sim", config)
    env = sim.env({})
    decl = HostDecl("hp4", transport="local", extra={"env": {k: env[k] for k in SIM_ENV}})
    pool = HostPool([decl])
    seen: dict[str, tuple[str, str]] = {}

    async def ask(say: str | None = None) -> tuple[dict[str, tuple[int, str]], HostSample]:
        held = seen.get("hp4")
        word = say if say is not None else held[0] if held else ""
        answer = await pool.ask("hp4", PROBE_LOOP_COMMAND, end=END, timeout=30, say=word)
        return split_sections(answer), parse_probe("hp4", answer, utcnow(), seen)

    try:
        first, sample = await ask()
        version = first["healthv"][1].strip()
        assert "health" in first and seen["hp4"][0] == version
        assert {h.state for h in sample.health.values()} == {OK}
        second, again = await ask()
        assert "health" not in second and second["healthsame"][1].strip() == version
        assert again.health == sample.health
        # a change on the host: the lines come again, with a new version
        set_gpu_fault(sim.config_path, 3, "remapped")
        third, failed = await ask()
        assert "health" in third and third["healthv"][1].strip() != version
        assert failed.health[failed.gpus[3].uuid].state == FAILED
        # a client that names another version (or words that are no version) gets the lines;
        # what it sent is never run
        mark = tmp_path / "ran"
        for word in ("1.2", f"$(touch {mark})", "`id`;x"):
            answer, _ = await ask(say=word)
            assert "health" in answer and "healthsame" not in answer
        assert not mark.exists()
        # a new loop (the old one ended): its versions are its own, the lines come again
        await pool.close()
        pool = HostPool([decl])
        fresh, sample = await ask()
        assert "health" in fresh and sample.health[sample.gpus[3].uuid].state == FAILED
    finally:
        await pool.close()


def test_an_answer_naming_lines_not_held_is_no_health(tmp_path: Path) -> None:
    sim = LocalSimHost("hp5", tmp_path / "sim", preset("a100x4", "hp5"))
    answer = probe_answer(sim)
    version = split_sections(answer)["healthv"][1].strip()
    seen: dict[str, tuple[str, str]] = {}
    parse_probe("hp5", answer, utcnow(), seen)
    same = answer[: answer.index(f"{MARK}health 0")] + f"{MARK}healthsame 0\n{version}9\n"
    with pytest.raises(NvsmiParseError, match="not known here"):
        parse_probe("hp5", same, utcnow(), seen)
    assert "hp5" not in seen  # the next request asks for the lines afresh
