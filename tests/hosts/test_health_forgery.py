"""GPU health is read from `nvidia-smi -q -x`, which also carries process names a user picks:
a forged `<gpu>` block must not mark another user's GPU failed (or hide a failure)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from jupyter_gpuhive.hosts.health import FAILED, parse_health
from jupyter_gpuhive.sim.cluster import LocalSimHost
from jupyter_gpuhive.sim.inventory import set_gpu_fault


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
