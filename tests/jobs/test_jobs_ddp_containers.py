"""The DDP proof in containers (#29): the pytorch template's torchrun job over two real sshd
hosts, each task in the session's test image on the session's own dockerd.

As tests/jobs/test_jobs_ddp.py (two hosts with 2 simulated GPUs each, a gloo all-reduce of
`rank + 1` over 4 processes), but every node runs `docker run --network host` with the
project's venv and the worker's folder mounted read-only (the site's allowed mounts), as
the user running the tests (root under `make test`). Every rank must print the full sum, and
each node's CUDA_VISIBLE_DEVICES must name its own host's GPUs.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

from jupyter_gpuhive.model.containers import ContainerSpec
from jupyter_gpuhive.model.jobs import Job
from jupyter_gpuhive.sim.ports import free_port
from jupyter_gpuhive.sim.sshd import SshdCluster
from jupyter_gpuhive.sim.users import current_user
from tests.jobs.test_jobs_ddp import (
    GPUS_PER_HOST,
    HOSTS,
    TORCHRUN,
    WORLD,
    check_run,
    cluster,
    reports,
    run_job,
    worker,
)

__all__ = ["cluster", "worker"]  # the module's fixtures, shared


def test_ddp_in_containers_torchrun_two_nodes(
    cluster: SshdCluster, worker: str, docker: Any, container_image: Any
) -> None:
    folder = str(Path(worker).parent)
    venv = str(container_image.venv)
    engine = {
        "engine": "docker", "binary": docker.binary, "socket": docker.host, "gpu_flags": "none",
        "images": ["gpuhive-test/python:*"],
        "mounts": [{"path": venv, "read_only": True}, {"path": folder, "read_only": True}],
    }  # fmt: skip
    port = free_port()
    spec = Job(
        name=f"ddp-box-{uuid.uuid4().hex[:6]}",
        owner=current_user(),
        command=worker,
        template="pytorch",
        options={"mode": "torchrun", "master_port": port, "torchrun": TORCHRUN},
        env={"GLOO_SOCKET_IFNAME": "lo"},
        container=ContainerSpec(container_image.tag, (venv, folder), host_network=True),
    )
    began = int(time.time()) - 1
    job, logs, elapsed = run_job(cluster, spec, {"containers": engine})
    print(f"torchrun in containers: {elapsed:.1f} s from start to all tasks succeeded")
    found = check_run(job, logs)
    assert len(found) == WORLD
    uuids = {name: [g.uuid for g in cluster.host_config(name).gpus] for name in HOSTS}
    for task in job.tasks:
        ranks = reports(logs[task.index])
        assert len(ranks) == GPUS_PER_HOST
        for report in ranks:
            assert report["env"]["CUDA_VISIBLE_DEVICES"] == ",".join(uuids[task.host])
    # Each node ran in a container of its task's name, labelled, and none is left (--rm).
    events = docker.run(
        "events", "--since", str(began), "--until", str(int(time.time()) + 1),
        "--filter", "type=container", "--filter", "event=start",
        "--format", "{{.Actor.Attributes.name}} {{index .Actor.Attributes \"gpuhive.task\"}}",
    ).stdout.split("\n")  # fmt: skip
    started = sorted(line for line in events if line.startswith(f"gpuhive-{job.id}-"))
    assert started == sorted(f"{t.session} {t.index}" for t in job.tasks), events
    names = docker.run("ps", "-a", "--format", "{{.Names}}").stdout.split()
    assert not [n for n in names if n.startswith(f"gpuhive-{job.id}-")]
