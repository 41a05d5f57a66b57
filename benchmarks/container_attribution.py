"""Container attribution cost (#29): resolving the containers of 100 GPU processes per sweep.

A fixture module (benchmarks/containers.py prints its figures; `python
benchmarks/container_attribution.py [--smoke]` runs it alone). Needs root: it starts its own
dockerd (tests/support/containers.py) and a local simulated host.

Real parts: 10 containers (``--smoke``: 4) of the test image, each running 10 processes (5)
that sit on a simulated GPU; the probe's real cgroup lines read from ``/proc``; the engine's
real ``docker inspect``; a SQLite store whose job table holds the container jobs gpuhive
"started". The containers are of three kinds, with the truth known: gpuhive's own (named after
a running task: its owner), labelled with the label the site trusts (that label), and forged
(gpuhive's labels and another user's uid, no trusted label: root).

`attribution_ms`: per sweep, once every container is known (the steady state: containers
outlive sweeps), the cost of reading the containers from the cgroup lines and attributing every
process (the job table read included), mean of the hit sweeps. The first sweep (every
container new: one batched ``inspect``) is reported on stderr as the miss sweep, and returned
as `attribution_miss_ms`. `misattributed`: processes whose owner differs from the truth.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pwd
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jupyter_gpuhive.hosts.containers import SiteRule, cgroups_after_ps, container_of
from jupyter_gpuhive.hosts.pool import HostPool
from jupyter_gpuhive.hosts.probe import PROBE_COMMAND, parse_probe, split_sections
from jupyter_gpuhive.jobs import GpuSlot
from jupyter_gpuhive.jobs.model import render_tasks
from jupyter_gpuhive.model import HostDecl, utcnow
from jupyter_gpuhive.model.containers import ContainerSpec
from jupyter_gpuhive.model.jobs import Job, TaskState
from jupyter_gpuhive.monitor.containers import ContainerOwners, own_containers
from jupyter_gpuhive.monitor.sampler import Sweep
from jupyter_gpuhive.sim.cluster import LocalSimHost
from jupyter_gpuhive.store import Store
from jupyter_gpuhive.store.jobs import TaskChange
from tests.support.containers import Engine, build_test_image, running_dockerd

SIM_ENV = ("PATH", "GPUHIVE_SIM_HOST", "GPUHIVE_SIM_CONFIG")
LABEL = "lab.owner"  # the label this site trusts


def _job_task(store: Store, owner: str, host: str, gpu: str, image: str) -> str:
    """A running container job of `owner` in the job table; its task's session (the name)."""
    spec = Job(name="bench", owner=owner, command="sleep 600", container=ContainerSpec(image))
    job = store.jobs.create(
        spec, render_tasks(spec, [(host, "127.0.0.1", [GpuSlot(host, "127.0.0.1", 0, gpu)])])
    )
    (task,) = job.tasks
    store.jobs.change_tasks([TaskChange(task.id, TaskState.STARTING)], {TaskState.PENDING})
    store.jobs.change_tasks([TaskChange(task.id, TaskState.RUNNING)], {TaskState.STARTING})
    return task.session


def _start(engine: Engine, image: str, name: str, host: str, each: int, uid: int,
           labels: list[str]) -> None:  # fmt: skip
    words = [w for label in labels for w in ("--label", label)]
    loop = f"i=0; while [ $i -lt {each} ]; do sleep 600 & i=$((i + 1)); done; wait"
    engine.run(
        "run", "-d", "--name", name, "--network", "none", "--user", f"{uid}:{uid}", *words,
        "--env", f"GPUHIVE_SIM_HOST={host}", "--env", "CUDA_VISIBLE_DEVICES=0",
        image, "/bin/sh", "-c", loop,
    )  # fmt: skip


async def _measure(smoke: bool, engine: Engine, image: str, work: Path) -> dict[str, Any]:
    containers, each = (4, 5) if smoke else (10, 10)
    sweeps = 5 if smoke else 20
    host = LocalSimHost(f"ca{uuid.uuid4().hex[:6]}", work / "sim")
    gpu = host.config.gpus[0].uuid
    store = Store(f"sqlite:///{work / 'hive.sqlite'}").open()
    uid = pwd.getpwnam("nobody").pw_uid
    truth: dict[str, str] = {}  # container name -> owner
    for i in range(containers):
        kind = i % 3
        if kind == 0:  # gpuhive's own
            owner = f"user{i}"
            name = await asyncio.to_thread(_job_task, store, owner, host.name, gpu, image)
            labels = ["gpuhive=1", f"gpuhive.owner={owner}"]
        elif kind == 1:  # the site's trusted label
            owner, name = f"user{i}", f"labelled-{i}"
            labels = [f"{LABEL}={owner}"]
        else:  # forged: gpuhive's labels, another uid, not in the job table
            owner, name = "root", f"forged-{i}"
            labels = ["gpuhive=1", "gpuhive.owner=user0", "gpuhive.job=1"]
        truth[name] = owner
        await asyncio.to_thread(_start, engine, image, name, host.name, each, uid, labels)

    env = host.env()
    decl = HostDecl(host.name, transport="local", extra={
        "env": {k: env[k] for k in SIM_ENV},
        "containers": {"engine": "docker", "binary": engine.binary, "socket": engine.host},
    })  # fmt: skip
    pool = HostPool([decl])

    async def run(fn: Any, *args: Any) -> Any:
        return await asyncio.to_thread(fn, *args)

    owners = ContainerOwners(pool, SiteRule(LABEL), own_containers(store, run))
    expected = containers * each
    deadline = time.monotonic() + 60
    while True:  # until every process sits on its GPU
        text = (await pool.run(host.name, PROBE_COMMAND, timeout=30)).stdout
        if len(parse_probe(host.name, text, utcnow()).processes) >= expected:
            break
        if time.monotonic() > deadline:
            raise RuntimeError("the containers' processes did not all reach their GPU")
        await asyncio.sleep(0.2)

    ps = split_sections(text)["ps"][1]
    timings = []
    for _ in range(sweeps + 1):
        sample = parse_probe(host.name, text, utcnow())
        bare = [replace(p, container=None) for p in sample.processes]
        began = time.perf_counter()
        cgroups = cgroups_after_ps(ps)  # what parse_probe does for containers, timed here
        found = {pid: container_of(t) for pid, t in cgroups.items()}
        placed = tuple(replace(p, container=found.get(p.pid)) for p in bare)
        sample = replace(sample, processes=placed)
        sweep = Sweep(utcnow(), 5.0, samples={host.name: sample})
        await owners.attribute_sweep(sweep)
        timings.append((time.perf_counter() - began) * 1000)
        resolved = sweep.samples[host.name].processes

    wrong = 0
    seen = 0
    for proc in resolved:
        if proc.container is None:
            continue
        seen += 1
        if truth.get(proc.container.name or "") != proc.user:
            wrong += 1
    wrong += expected - seen  # a process not seen in its container is misattributed too
    await pool.close()
    store.close()
    miss, hits = timings[0], timings[1:]
    print(
        f"container attribution: {seen} GPU processes in {containers} containers; miss sweep "
        f"{miss:.1f} ms ({owners.inspections} inspect), hit sweeps mean "
        f"{statistics.mean(hits):.2f} ms, max {max(hits):.2f} ms over {len(hits)}",
        file=sys.stderr,
    )
    return {
        "attribution_ms": round(statistics.mean(hits), 2),
        "attribution_miss_ms": round(miss, 2),
        "misattributed": wrong,
        "processes": seen,
    }


def measure(smoke: bool) -> dict[str, Any]:
    """Start an engine and containers, measure, clean up; the figures (see the docstring)."""
    work = Path(tempfile.mkdtemp(prefix="gpuhive-bench-ca-"))
    work.chmod(0o755)
    try:
        with running_dockerd() as engine:
            image = build_test_image(engine).tag
            return asyncio.run(_measure(smoke, engine, image, work))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="4 containers of 5 processes")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (it starts its own dockerd)")
    print(json.dumps(measure(args.smoke)))


if __name__ == "__main__":
    main()
