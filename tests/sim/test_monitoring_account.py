"""What docs/how-to/add-host.md says of non-root monitoring accounts on simulated hosts holds.

The `nvidia-smi` stand-in finds processes by their environment (/proc/PID/environ, readable by
the owner and root only): a non-root monitoring account sees its own processes and none of
another user's. The real nvidia-smi shows every process; the how-to says so, and why.
"""

from __future__ import annotations

import os

import pytest

from jupyter_gpuhive.hosts.vendors import nvidia_smi as nvsmi
from jupyter_gpuhive.sim.users import start_gpu_process
from tests.support.team_hub import REPO

APPS = ("--query-compute-apps=pid,process_name,gpu_uuid,used_memory", "--format=csv")
HOWTO = REPO / "docs" / "how-to" / "add-host.md"


@pytest.mark.skipif(os.geteuid() != 0, reason="acting as other users needs root")
def test_the_how_to_says_what_a_non_root_account_sees_of_a_simulated_host(
    sim_users, make_local_host, run_smi, gpu_processes
) -> None:
    monitor, other = sim_users
    host = make_local_host()
    theirs = start_gpu_process(host.name, [0], user=other, mem_mib=10)
    own = start_gpu_process(host.name, [1], user=monitor, mem_mib=20)
    gpu_processes.extend([theirs, own])
    as_monitor = nvsmi.parse_compute_apps(run_smi(host, *APPS, user=monitor).stdout)
    assert [p.pid for p in as_monitor] == [own.pid]  # its own processes only
    as_root = nvsmi.parse_compute_apps(run_smi(host, *APPS).stdout)
    assert sorted(p.pid for p in as_root) == sorted([theirs.pid, own.pid])

    text = " ".join(HOWTO.read_text().split())
    assert "## The monitoring account" in HOWTO.read_text()
    for claim in (
        "A non-root monitoring account therefore sees its own processes only",
        "`/proc/PID/environ`), which Linux lets only the process's owner and root read",
        "Monitor simulated hosts as root",
        "This is the stand-in's limit, not the real `nvidia-smi`'s.",
    ):
        assert claim in text, claim
