"""The probe's MIG part on the real sample outputs: slices joined from -L and -q -x, and each
process put on its slice by (GPU, GPU instance, compute instance)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from jupyter_gpuhive.hosts.probe import MARK, parse_probe
from jupyter_gpuhive.monitor.slices import discovered_slices
from tests.hosts.helpers import ps_line

FIXTURES = Path(__file__).parent.parent / "fixtures" / "nvidia-smi"
PARENT = "GPU-c1e2da59-5c26-e34c-59a7-373b4ab9404c"
APPS = (
    "pid, process_name, gpu_uuid, used_memory [MiB]\n"
    f"4242, python, {PARENT}, 700 MiB\n"
    f"5151, python, {PARENT}, 300 MiB\n"
)
PS = f"{ps_line(4242, 4242, 'gh-bob', 'python train.py')}\n{ps_line(5151, 5151, 'gh-carol', 'python eval.py')}\n"


def _with_processes(xml: str) -> str:
    """The sample's -q -x with two processes on GPU 0: GI 5 (2g.20gb) and GI 13 (1g.10gb)."""
    infos = "".join(
        f"<process_info><gpu_instance_id>{gi}</gpu_instance_id><compute_instance_id>0"
        f"</compute_instance_id><pid>{pid}</pid><type>C</type><process_name>python"
        f"</process_name><used_memory>{mem} MiB</used_memory></process_info>"
        for gi, pid, mem in ((5, 4242, 700), (13, 5151, 300))
    )
    return xml.replace("<processes>\n\t\t</processes>", f"<processes>{infos}</processes>", 1)


def answer() -> str:
    sections = {
        "gpus": (FIXTURES / "query-gpu.mig.csv").read_text(),
        "apps": APPS,
        "list": (FIXTURES / "L.mig.txt").read_text(),
        "ps": PS,
        "xml": _with_processes((FIXTURES / "q-x.mig.xml").read_text()),
    }
    return "".join(f"{MARK}{name} 0\n{text.rstrip()}\n" for name, text in sections.items())


def test_slices_and_the_slice_of_each_process() -> None:
    sample = parse_probe("mig1", answer(), datetime.now(UTC))
    assert sample.gpu_error is None
    parts = sample.slices[PARENT]
    assert [
        (m.profile, m.gpu_instance_id, m.compute_instance_id, m.mem_total_mib) for m in parts
    ] == [
        ("3g.40gb", 1, 0, 40192),
        ("2g.20gb", 5, 0, 19968),
        ("1g.10gb", 13, 0, 9728),
    ]
    assert parts[1].uuid == "MIG-5ebf3fb5-5ae3-1fb3-d239-40e3e35ae671"
    placed = {p.pid: (p.user, p.gpu_uuid, p.mig_uuid) for p in sample.processes}
    assert placed == {
        4242: ("gh-bob", PARENT, parts[1].uuid),
        5151: ("gh-carol", PARENT, parts[2].uuid),
    }
    assert [g.util_gpu for g in sample.gpus] == [None, 0]  # [N/A] on the MIG GPU, never 0
    found = discovered_slices(sample, PARENT, True, None)
    assert found is not None and [d.gpu_instance_id for d in found] == [1, 5, 13]
    other = sample.gpus[1].uuid
    assert discovered_slices(sample, other, False, None) == ()  # MIG off: no slices


def test_a_failed_mig_query_keeps_what_the_inventory_holds() -> None:
    text = answer().replace(f"{MARK}xml 0", f"{MARK}xml 9")
    sample = parse_probe("mig1", text, datetime.now(UTC))
    assert sample.slices == {} and sample.gpu_error is None
    assert all(p.mig_uuid is None for p in sample.processes)
    held = ()
    assert discovered_slices(sample, PARENT, True, held) is held
