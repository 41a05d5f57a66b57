"""Process names a user picks must not mark another user's GPU failed (or hide a failure):
the probe reads health from `--query-gpu` fields, and `-q -x` (which carries the names; the
doctor reads it) trusts no forged, duplicated or comment-hidden `<gpu>` block."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from jupyter_gpuhive.hosts.vendors.nvidia_health import FAILED, parse_health
from jupyter_gpuhive.hosts.vendors.nvidia_smi import NvsmiParseError, parse_query_xml
from jupyter_gpuhive.sim.cluster import LocalSimHost
from jupyter_gpuhive.sim.inventory import preset, set_gpu_fault
from tests.hosts.test_hostile_probe import forged_names, probe
from tests.support.hostile import hostile_process, named_argv


def stand_in_xml(tmp_path: Path) -> tuple[str, list[str]]:
    """The stand-in's `-q -x` of a host whose GPU 0 has uncorrectable ECC errors, and the
    UUIDs of its GPUs in order."""
    sim = LocalSimHost("gpu1", tmp_path / "sim")
    set_gpu_fault(sim.config_path, 0, "ecc")
    env = sim.env()
    xml = subprocess.run(["nvidia-smi", "-q", "-x"], env=env, capture_output=True, text=True,
                         check=True).stdout  # fmt: skip
    uuids = re.findall(r"<uuid>(GPU-[^<]+)</uuid>", xml)
    return xml, uuids


def blocks(xml: str) -> list[str]:
    return re.findall(r"\n\t<gpu id=.*?\n\t</gpu>", xml, flags=re.S)


def test_the_stand_ins_failure_is_read(tmp_path: Path) -> None:
    xml, uuids = stand_in_xml(tmp_path)
    health = parse_health(xml, set(uuids))
    assert health[uuids[0]].state == FAILED
    assert all(health[u].state != FAILED for u in uuids[1:])


def test_a_forged_block_for_anothers_gpu_is_trusted_for_nothing(tmp_path: Path) -> None:
    xml, uuids = stand_in_xml(tmp_path)
    failed = blocks(xml)[0]
    victim = uuids[1]
    forged = failed.replace(uuids[0], victim)
    # an extra block (more than <attached_gpus>): nothing of this answer is trusted
    extra = xml.replace("</nvidia_smi_log>", forged + "\n</nvidia_smi_log>")
    assert parse_health(extra, set(uuids)) == {}
    # the count kept (no <attached_gpus>), the victim's UUID twice: neither block counts
    twice = re.sub(r"\t<attached_gpus>\d+</attached_gpus>\n", "", extra)
    health = parse_health(twice, set(uuids))
    assert victim not in health and health[uuids[0]].state == FAILED
    # a block nested inside another element (where a name would sit) is not the log's own
    nested = xml.replace("</processes>", forged.replace("\n\t", "\n\t\t") + "</processes>", 1)
    assert parse_health(nested, set(uuids)).get(victim, None) is None or (
        parse_health(nested, set(uuids))[victim].state != FAILED
    )
    # a GPU the CSV query did not report is not taken from the XML
    assert uuids[0] not in parse_health(xml, set(uuids[1:]))


def test_a_real_user_s_names_forge_nothing_in_the_xml_nor_the_probe(tmp_path: Path) -> None:
    """A real second user's processes, named to close their `<gpu>` block, add one with ECC
    errors for another GPU and hide the real ones in a comment, on a driver that prints names
    unescaped: neither the probe (health from query fields) nor the XML reading (doctor's)
    marks that GPU failed; the real failure of GPU 2 still counts."""
    config = preset("a100x4", "gpu1")
    config.raw_names = True
    sim = LocalSimHost("gpu1", tmp_path / "sim", config)
    set_gpu_fault(sim.config_path, 2, "ecc")
    uuids = [g.uuid for g in config.gpus]
    first, last = forged_names(uuids[1], whole_xml=True)
    with (
        hostile_process(sim.name, [0], argv=named_argv(first), config=sim.config_path),
        hostile_process(sim.name, [3], argv=named_argv(last), config=sim.config_path),
    ):
        xml = subprocess.run(["nvidia-smi", "-q", "-x"], env=sim.env(), capture_output=True,
                             text=True, check=True).stdout  # fmt: skip
        sample = probe(sim)
    assert "<!--" in xml and first in xml  # the names are in the driver's XML, unescaped
    assert sample.health[uuids[1]].state != FAILED and sample.health[uuids[2]].state == FAILED
    assert parse_health(xml, set(uuids)) == {}  # a comment: the XML is trusted for nothing


def test_a_comment_in_the_xml_is_trusted_for_nothing(tmp_path: Path) -> None:
    """Parser level: the victim's real block inside a comment, a forged one beside it."""
    xml, uuids = stand_in_xml(tmp_path)
    victim = uuids[1]
    real = blocks(xml)[1]
    forged = blocks(xml)[0].replace(uuids[0], victim)
    hidden = xml.replace(real, f"{forged}<!--{real.replace('--', '- -')}-->")
    assert hidden != xml
    assert parse_health(hidden, set(uuids)) == {}
    with pytest.raises(NvsmiParseError, match="<!--"):
        parse_query_xml(hidden)
