"""The shared container test infrastructure, and the stand-in seeing container processes (#29)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from jupyter_gpuhive.hosts.vendors import nvidia_smi as nvsmi
from tests.support.containers import container_id_of, main_pid_of
from tests.support.waiting import wait_for

APPS = ("--query-compute-apps=pid,process_name,gpu_uuid,used_memory", "--format=csv")


def test_image_runs_the_venv_python_read_only_as_any_user(
    docker: Any, container_image: Any
) -> None:
    """The venv, mounted read-only at its host path, runs inside as an unprivileged uid."""
    done = docker.run(
        "run", "--rm", "--network", "none", "--user", "4321:4321", *container_image.venv_mount(),
        container_image.tag, container_image.venv_python, "-I", "-c",
        "import os, sys, sqlite3, ssl; print(os.getuid(), sys.prefix); open(sys.prefix + '/x', 'w')",
        check=False,
    )  # fmt: skip
    assert done.stdout.split() == ["4321", str(container_image.venv)]
    assert "Read-only file system" in done.stderr
    assert container_image.tag.startswith("gpuhive-test/python:")
    assert docker.run("images", "-q", container_image.tag).stdout.strip()


def test_stand_in_sees_a_container_process_with_its_host_pid(
    docker: Any, container_image: Any, make_local_host: Any, run_smi: Any
) -> None:
    """A process in a rootful container, started with a GPU's variables, is on that GPU."""
    host = make_local_host()
    uuids = [g.uuid for g in host.config.gpus]
    name = f"intruder-{os.getpid()}"
    docker.run(
        "run", "-d", "--name", name, "--network", "none", "--user", "4321:4321",
        "--env", f"GPUHIVE_SIM_HOST={host.name}", "--env", f"CUDA_VISIBLE_DEVICES={uuids[2]}",
        container_image.tag, "sleep", "300",
    )  # fmt: skip
    pid = main_pid_of(docker, name)
    cid = container_id_of(docker, name)
    assert re.fullmatch(r"[0-9a-f]{64}", cid)
    assert cid in Path(f"/proc/{pid}/cgroup").read_text()  # the kernel names the container

    procs = wait_for(lambda: nvsmi.parse_compute_apps(run_smi(host, *APPS).stdout), timeout=10)
    assert [(p.pid, p.process_name, p.gpu_uuid) for p in procs] == [(pid, "sleep", uuids[2])]
    assert os.stat(f"/proc/{pid}").st_uid == 4321  # its real uid, as the host sees it

    docker.run("rm", "-f", name)
    assert wait_for(lambda: not nvsmi.parse_compute_apps(run_smi(host, *APPS).stdout), timeout=10)
