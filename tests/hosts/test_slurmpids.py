"""Which processes run inside Slurm jobs, read from `scontrol listpids` (numbers only), and the
vendor probe's sample merged onto Slurm's GPUs by index (Slurm's IDX). Pure: no cluster."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from jupyter_gpuhive.errors import Invalid
from jupyter_gpuhive.hosts.backends.slurm import slurm_uuid
from jupyter_gpuhive.hosts.backends.slurmnode import merge, reach_of
from jupyter_gpuhive.hosts.backends.slurmsteps import job_gpus
from jupyter_gpuhive.hosts.probe import HostSample, ProcessInfo
from jupyter_gpuhive.hosts.slurmpids import parse_listpids
from jupyter_gpuhive.model import HostDecl
from jupyter_gpuhive.model.gpus import GpuMetrics

# As Slurm 22.05 prints it (tests/slurm runs it for real), with lines no row may come from.
LISTPIDS = """PID      JOBID    STEPID   LOCALID GLOBALID
21287    1        1        0       0
21301    7        batch    0       0
1        7        extern   -       -
x21302   7        0        0       0
slurmstepd: [9.0]
"""


def test_only_rows_of_numbers_name_a_pid_and_its_job() -> None:
    assert parse_listpids(LISTPIDS) == {21287: 1, 21301: 7}
    assert parse_listpids("No job steps exist on this node.\n") == {}
    assert parse_listpids("") == {}


def _gpu(index: int, uuid: str, util: int | None) -> GpuMetrics:
    return GpuMetrics(index, uuid, "vendor name", util, None, 100, 40000, 40, 60.0, None)


def test_the_probe_lands_on_slurms_gpus_by_index_and_marks_processes_in_jobs() -> None:
    at = datetime(2026, 1, 5, 10, tzinfo=UTC)
    ours = [slurm_uuid("n1", "n1", i) for i in range(2)]
    slurm = HostSample("n1", at, gpus=tuple(
        GpuMetrics(i, ours[i], "a100", *([None] * 7)) for i in range(2)))  # fmt: skip
    probe = HostSample("n1", at, gpus=(_gpu(1, "GPU-b", 90), _gpu(0, "GPU-a", 5)), processes=(
        ProcessInfo(10, "GPU-b", "gh-bob", "python train.py", 300),
        ProcessInfo(11, "GPU-a", "gh-bob", "slurmstepd: [7.0]", 300),
        ProcessInfo(12, "GPU-zz", "gh-bob", "elsewhere", 300),
    ), mem_total_mib=8000)  # fmt: skip
    merged = merge(slurm, probe, {10: 7})
    assert [(g.index, g.uuid, g.name, g.util_gpu) for g in merged.gpus] == [
        (0, ours[0], "a100", 5), (1, ours[1], "a100", 90)]  # fmt: skip
    assert [(p.pid, p.gpu_uuid, p.confined_by) for p in merged.processes] == [
        (10, ours[1], "Slurm job 7"),
        (11, ours[0], None),
    ]  # its name counts for nothing
    assert merged.mem_total_mib == 8000


def test_a_node_is_reached_only_as_the_site_says() -> None:
    assert reach_of(HostDecl("n1", transport="slurm", extra={"slurm": {"node": "n1"}})) is None
    local = HostDecl("n1", transport="slurm", extra={"slurm": {"probe": "local"}})
    assert reach_of(local) == "local"
    with pytest.raises(Invalid, match="probe must be one of local, not 'rsh'"):
        reach_of(HostDecl("n1", transport="slurm", extra={"slurm": {"probe": "rsh"}}))


def test_a_jobs_gpus_are_its_idx_on_the_node() -> None:
    shown = (
        "   JOB_GRES=gpu:a100:4\n"
        "     Nodes=n1 CPU_IDs=0 Mem=0 GRES=gpu:a100:4(IDX:0-3)\n"
        "     Nodes=n[2-3] CPU_IDs=0 Mem=0 GRES=gpu:a100:2(IDX:0,2),gpu:h100:1(IDX:5)\n"
    )
    assert job_gpus(shown, "n1") == (0, 1, 2, 3)
    assert job_gpus(shown, "n3") == (0, 2, 5)
    assert job_gpus(shown, "n9") == ()
    assert job_gpus("", "n1") == ()
