"""GPU health is read from `nvidia-smi -q -x`, which also carries process names a user picks:
a forged `<gpu>` block must not mark another user's GPU failed (or hide a failure)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from jupyter_gpuhive.hosts.health import FAILED, parse_health
from jupyter_gpuhive.hosts.probe import HEALTH_AWK
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


def test_a_forged_block_in_a_name_that_passes_the_probes_filter_is_trusted_for_nothing(
    tmp_path: Path,
) -> None:
    """On a host without MIG the probe's awk keeps only the lines health reads, and a name
    with newlines can bring lines that look like those: they count for nothing either."""
    xml, uuids = stand_in_xml(tmp_path)
    victim = uuids[1]
    forged = blocks(xml)[0].replace(uuids[0], victim)
    # the forged block as one process's name, unescaped, as nvidia-smi may print it: inside
    # the real block, and closing it first (then opening another, so that the XML still reads)
    for name in (f"x{forged}\n", f'x\n\t</gpu>{forged}\n\t<gpu id="00000000:99:00.0">\n'):
        named = xml.replace(
            "</processes>",
            f"\t\t\t<process_info>\n\t\t\t\t<process_name>{name}</process_name>\n"
            "\t\t\t</process_info>\n\t\t</processes>",
            1,
        )
        assert named != xml
        kept = subprocess.run(["awk", "-v", "all=", HEALTH_AWK], input=named,
                              capture_output=True, text=True, check=True).stdout  # fmt: skip
        lines = kept.replace("\n|", "\n").removeprefix("|")
        assert victim in lines and "<process_name" not in lines  # through awk...
        health = parse_health(lines, set(uuids))
        assert health.get(victim) is None or health[victim].state != FAILED  # ...for nothing
