"""What the probe sends of `nvidia-smi -q -x` for health (issue #30): on a host without MIG
only the lines health reads (no process names, nothing that changes while a GPU is healthy),
on a MIG host the whole XML; the temperature is judged from the CSV query's reading."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from jupyter_gpuhive.hosts.health import DEGRADED, FAILED, OK, parse_health
from jupyter_gpuhive.hosts.nvsmi import NvsmiParseError
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
from jupyter_gpuhive.model import HostDecl, utcnow
from jupyter_gpuhive.sim.cluster import LocalSimHost
from jupyter_gpuhive.sim.inventory import preset, set_gpu_fault
from jupyter_gpuhive.sim.users import start_gpu_process

NAME = "gpuhive-health-probe-marker"


def probe_answer(sim: LocalSimHost) -> str:
    done = subprocess.run(["sh", "-c", PROBE_COMMAND], env=sim.env({}), capture_output=True,
                          text=True, check=True, timeout=60)  # fmt: skip
    return done.stdout


def full_xml(sim: LocalSimHost) -> str:
    done = subprocess.run(["nvidia-smi", "-q", "-x"], env=sim.env({}), capture_output=True,
                          text=True, check=True, timeout=60)  # fmt: skip
    return done.stdout


def test_without_mig_only_the_health_lines_leave_the_host(tmp_path: Path) -> None:
    sim = LocalSimHost("hp1", tmp_path / "sim", preset("a100x4", "hp1"))
    set_gpu_fault(sim.config_path, 1, "ecc")
    gpu = start_gpu_process("hp1", [0], command=("sleep", "120"), config=sim.config_path)
    try:
        full = full_xml(sim)
        first, second = probe_answer(sim), probe_answer(sim)
    finally:
        gpu.kill()
        gpu.wait()
    assert "<process_name>" in full and "<gpu_temp>" in full  # what the filter leaves behind
    sent = split_sections(first)["xml"][1]
    assert "<process_name" not in sent and "<processes>" not in sent
    assert "<gpu_temp>" not in sent and "<fb_memory_usage>" not in sent
    assert len(sent) * 2 < len(full)
    # a healthy host's lines are the same sweep after sweep (the reading is kept by text)
    assert sent == split_sections(second)["xml"][1]
    sample = parse_probe("hp1", first, utcnow())
    states = {g.index: sample.health[g.uuid].state for g in sample.gpus}
    assert states == {0: OK, 1: FAILED, 2: OK, 3: OK}
    # the same verdicts as the whole XML gives
    uuids = {g.uuid for g in sample.gpus}
    assert {u: h.state for u, h in parse_health(full, uuids).items()} == {
        u: h.state for u, h in sample.health.items()
    }


def test_a_mig_host_sends_the_whole_xml_for_its_slices(tmp_path: Path) -> None:
    sim = LocalSimHost("hp2", tmp_path / "sim", preset("mig", "hp2"))
    sent = split_sections(probe_answer(sim))["xml"][1]
    assert "<mig_devices>" in sent and "<gpu_temp>" in sent
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
    sim = LocalSimHost("hp4", tmp_path / "sim", preset("a100x4", "hp4"))
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
        version = first["xmlv"][1].strip()
        assert "xml" in first and seen["hp4"][0] == version
        assert {h.state for h in sample.health.values()} == {OK}
        second, again = await ask()
        assert "xml" not in second and second["xmlsame"][1].strip() == version
        assert again.health == sample.health
        # a change on the host: the lines come again, with a new version
        set_gpu_fault(sim.config_path, 3, "remapped")
        third, failed = await ask()
        assert "xml" in third and third["xmlv"][1].strip() != version
        assert failed.health[failed.gpus[3].uuid].state == FAILED
        # a client that names another version (or words that are no version) gets the lines;
        # what it sent is never run
        mark = tmp_path / "ran"
        for word in ("1.2", f"$(touch {mark})", "`id`;x"):
            answer, _ = await ask(say=word)
            assert "xml" in answer and "xmlsame" not in answer
        assert not mark.exists()
        # a new loop (the old one ended): its versions are its own, the lines come again
        await pool.close()
        pool = HostPool([decl])
        fresh, sample = await ask()
        assert "xml" in fresh and sample.health[sample.gpus[3].uuid].state == FAILED
    finally:
        await pool.close()


def test_an_answer_naming_lines_not_held_is_no_health(tmp_path: Path) -> None:
    sim = LocalSimHost("hp5", tmp_path / "sim", preset("a100x4", "hp5"))
    answer = probe_answer(sim)
    version = split_sections(answer)["xmlv"][1].strip()
    seen: dict[str, tuple[str, str]] = {}
    parse_probe("hp5", answer, utcnow(), seen)
    same = answer[: answer.index(f"{MARK}xml 0")] + f"{MARK}xmlsame 0\n{version}9\n"
    with pytest.raises(NvsmiParseError, match="not known here"):
        parse_probe("hp5", same, utcnow(), seen)
    assert "hp5" not in seen  # the next request asks for the lines afresh
