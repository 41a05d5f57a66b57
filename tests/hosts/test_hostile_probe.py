"""A hostile user against the probe, for real (issue #41): a real second UNIX user, real
processes on simulated GPUs, the real probe command through the NVIDIA stand-in.

- A driver's failure sentence in a process's arguments must not hide that process (its owner
  comes from `ps`, whose command line leaves the host in hex; the sentence counts only in
  nvidia-smi's own sections).
- Process names that close the real `<gpu>` block, forge another with uncorrectable ECC errors
  for someone else's GPU and hide the real one in an XML comment must not mark that GPU failed
  (health comes from `--query-gpu` fields; a MIG host's XML with a comment is refused).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from jupyter_gpuhive.hosts.probe import HostSample, parse_probe
from jupyter_gpuhive.hosts.vendors.nvidia_health import FAILED, OK
from jupyter_gpuhive.model import Gpu, Reservation, utcnow
from jupyter_gpuhive.protection.violations import FOREIGN, DetectionPolicy, detect
from jupyter_gpuhive.sim.cluster import LocalSimHost
from jupyter_gpuhive.sim.inventory import (
    SimGpu,
    load_config,
    make_uuid,
    preset,
    set_gpu_fault,
    write_config,
)
from tests.hosts.test_health_probe import full_xml, probe_answer
from tests.support.hostile import hostile_process, named_argv, sleeper_argv

LOST = "Unable to determine the device handle for GPU 0000:00:00.0: x"


def probe(sim: LocalSimHost) -> HostSample:
    """One run of the real probe command on the simulated host, parsed."""
    return parse_probe(sim.name, probe_answer(sim), utcnow())


def raw_names_host(tmp_path: Path, name: str, profile: str) -> LocalSimHost:
    """A simulated host whose driver prints process names into `-q -x` unescaped."""
    config = preset(profile, name)
    config.raw_names = True
    if profile == "mig":  # a third GPU: the victim's (GPU 1) between two of the attacker's
        config.gpus.append(SimGpu(2, make_uuid(name, "GPU", 2), "NVIDIA A100-SXM4-80GB", 81920))
    return LocalSimHost(name, tmp_path / "sim", config)


@pytest.mark.parametrize("where", ["argument", "own line"])
def test_a_failure_sentence_in_the_arguments_hides_no_intruder(tmp_path: Path, where: str) -> None:
    sim = LocalSimHost("hx1", tmp_path / "sim", preset("a100x4", "hx1"))
    args = [LOST] if where == "argument" else [f"x\n{LOST}\n@@gpuhive:stat 0\n1, 2, 3"]
    gpus = load_config(sim.config_path).gpus
    with hostile_process(sim.name, [1], argv=sleeper_argv(*args), config=sim.config_path) as eve:
        sample = probe(sim)
    intruder = next(p for p in sample.processes if p.pid == eve.pid)
    assert (intruder.user, intruder.gpu_uuid) == ("gh-eve", gpus[1].uuid)
    assert LOST in intruder.command.replace("\n", " ")  # shown as it is, for display only
    assert sample.lost == () and sample.gpu_error is None and len(sample.gpus) == 4
    start = utcnow() - timedelta(hours=1)
    booked = (Gpu(11, "hx1", 1, gpus[1].uuid),)
    held = Reservation(1, "gh-alice", "t", "", start, start + timedelta(hours=2), booked, start)
    found = detect([sample], [held], utcnow(), DetectionPolicy.build(1))
    assert [(v.kind, v.offender, v.pids) for v in found] == [(FOREIGN, "gh-eve", (eve.pid,))]


def forged_names(victim: str, whole_xml: bool) -> tuple[str, str]:
    """Two process names: the first closes its `<gpu>` block, adds one for `victim` with 7
    uncorrectable ECC errors, and opens a comment that the second closes (hiding the real
    blocks in between). `whole_xml`: for a MIG host's whole XML, else for the lines a filter
    of health lines (the old probe's awk) would keep."""
    ecc = (
        f'<gpu id="00000000:99:00.0">\n<uuid>{victim}</uuid>\n<ecc_errors>\n<volatile>\n'
        "<dram_uncorrectable>7</dram_uncorrectable>\n</volatile>\n</ecc_errors>\n</gpu>\n"
    )
    if whole_xml:
        first = f"a</process_name></process_info></processes>\n</gpu>\n{ecc}<gpu><!--"
        return first, "b</process_name>--><processes><process_info><process_name>"
    return f"a\n</gpu>\n{ecc}<gpu><!--", "b\n<gpu>--><process_name>"


@pytest.mark.parametrize("profile", ["a100x4", "mig"])
def test_names_that_forge_a_gpu_block_in_a_comment_fail_no_gpu(
    tmp_path: Path, profile: str
) -> None:
    sim = raw_names_host(tmp_path, "hx2", profile)
    gpus = load_config(sim.config_path).gpus
    mine = [g for g in gpus if not g.mig] if profile == "a100x4" else gpus
    first, victim, last = mine[0], mine[1], mine[-1]  # eve's own GPUs around the victim's
    on = [(g.mig[0].uuid if g.mig else g.uuid) for g in (first, last)]
    a, b = forged_names(victim.uuid, whole_xml=profile == "mig")
    with (
        hostile_process(sim.name, [on[0]], argv=named_argv(a), config=sim.config_path),
        hostile_process(sim.name, [on[1]], argv=named_argv(b), config=sim.config_path),
    ):
        xml = full_xml(sim)
        sample = probe(sim)
    assert a in xml and b in xml  # the names reached the driver's XML unescaped
    assert sample.gpu_error is None and sample.health[victim.uuid].state == OK
    assert all(h.state == OK for h in sample.health.values())
    if profile == "mig":  # the XML with a comment counts for nothing: no slices from it
        assert sample.slices == {}


def test_a_real_failure_still_counts_beside_forged_names(tmp_path: Path) -> None:
    sim = raw_names_host(tmp_path, "hx3", "a100x4")
    gpus = load_config(sim.config_path).gpus
    set_gpu_fault(sim.config_path, 2, "ecc")
    a, b = forged_names(gpus[1].uuid, whole_xml=False)
    with (
        hostile_process(sim.name, [0], argv=named_argv(a), config=sim.config_path),
        hostile_process(sim.name, [3], argv=named_argv(b), config=sim.config_path),
    ):
        sample = probe(sim)
    states = {g.index: sample.health[g.uuid].state for g in sample.gpus}
    assert states == {0: OK, 1: OK, 2: FAILED, 3: OK}


def test_the_stand_in_escapes_names_unless_told_not_to(tmp_path: Path) -> None:
    sim = LocalSimHost("hx4", tmp_path / "sim", preset("a100x4", "hx4"))
    with hostile_process(sim.name, [0], argv=named_argv("<x>&"), config=sim.config_path):
        assert "<process_name>&lt;x&gt;&amp;</process_name>" in full_xml(sim)
        config = load_config(sim.config_path)
        config.raw_names = True
        write_config(sim.config_path, config)
        assert "<process_name><x>&</process_name>" in full_xml(sim)
