"""Containers (#29): what running a job or a reservation kernel in an image costs at start.

Run: ``.venv/bin/python benchmarks/containers.py [--smoke]`` as root (it starts its own
dockerd, tests/support/containers.py, builds the test image, starts a real OpenSSH sshd on
loopback, jupyter_gpuhive/sim/sshd.py, and runs jobs and kernels as a real test user who may
use that dockerd and log in to that sshd).

Two simulated hosts (the nvidia-smi stand-in), both with the same engine, image and allowed
mounts: ``cbench2``, reached over SSH (the `ssh` transport, a real sshd on 127.0.0.1, the
owner's own key login), and ``cbench1``, the `local` transport (commands run on this machine
as the owner, no SSH). Measured the same way on each, bare and container runs alternating, in
the same run:

- job start: from ``Launcher.start`` to the task's command having run its first statement
  (it creates a file in the owner's home), for a bare job and for the same job in the test
  image (``docker run --rm --init``…, ``gpu_flags: none``). The owner's SSH connection is
  opened before the first run (a running server keeps it open), so no run pays for the login,
  and one container is run before any is measured, so no run pays for a cold engine.
  ``container_job_start_ratio`` is the ratio of the medians on the SSH host (target <= 2.0):
  the headline, because sites with GPU servers reach every one of them over SSH, so that is
  the start their users see. ``container_job_start_ratio_local`` is the same ratio on the
  local host (the one-machine case), reported beside it, not hidden: there a bare start is
  cheapest (no SSH round trip), so the engine's fixed cost (``docker run`` creating and
  starting a container, ~0.1 s here) weighs the most. Both sshd and dockerd are on loopback:
  a real network adds its round trip to bare and container starts alike, which brings a
  real site's ratio down, never up;
- kernel start: from ``start_kernel`` to the first ``kernel_info`` reply on the local host,
  a bare reservation kernel (a world-usable venv with ipykernel,
  tests/support/kernel_python.py) against the same reservation's kernel in the test image
  (the project's venv, mounted read-only); ``container_kernel_start_ratio`` is the ratio of
  the medians (target <= 2.0). The two interpreters differ (the image holds the project's
  Python, which test users cannot run on the host), which the figure includes.

The floor under a container start: one round of each of these after each pair of job starts
above, so that they see the same load (median of 20 rounds; 4 at ``--smoke``), each a process
this script starts and waits for, as root:

- ``bare_true_s``: fork and exec of ``/bin/true`` (every figure below includes that much);
  ``bare_screen_s``: ``screen -DmS NAME /bin/true``, the session a bare job's task starts in;
- ``engine_run_s``: ``docker run --rm --network host --pull never --log-driver none IMAGE
  /bin/true``, the engine alone (no gpuhive, no screen, no SSH; ``--log-driver none`` as in
  gpuhive's line); its split ``engine_create_s`` (``docker create``) and ``engine_start_s``
  (``docker start -a`` of that container, which is then removed unmeasured);
- ``engine_run_gpuhive_s``: gpuhive's own ``run`` line (``hosts/engines.py``: ``--init``,
  ``--user``, ``--cap-drop ALL``, labels, env file, home mount…) for ``/bin/true``, through
  ``bash -c`` as root: beside ``engine_run_s``, what gpuhive's flags and line add;
- ``engine_first_s``: the same ``docker run`` (``--rm``, the marks' folder mounted) until the
  container's first statement (it creates a file), measured as a job start is: its exit and
  removal, which ``engine_run_s`` includes, are not in it;
- ``runtime_run_s``: the OCI runtime below the engine, ``runc run`` of a bundle made from
  the test image (``docker export``, once) with ``runc spec``'s configuration, ``/bin/true``,
  and no network namespace (as ``--network host``); where runc cannot run, its figures are
  null and ``runtime_error`` (only then present) holds runc's own message;
- ``floor_ratio_engine`` = (``job_start_bare_s`` + ``engine_run_s``) / ``job_start_bare_s``
  and ``floor_ratio_engine_first`` and ``floor_ratio_runtime`` likewise with
  ``engine_first_s`` and ``runtime_run_s`` (``*_local``: the local
  host's bare start): the lowest ``container_job_start_ratio`` that a launcher adding nothing
  of its own could reach with that engine, or with runc driven directly.

``attribution_ms`` and ``misattributed`` come from ``benchmarks/container_attribution.py``
(its own dockerd and containers). Both job ratios are printed on stderr with their medians.
The last line printed is one JSON object with those five figures, the medians behind the
ratios (``job_start_*_s``: the SSH host; ``job_start_*_local_s``: the local host) and the
floor's figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pwd
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jupyter_client.ioloop import AsyncIOLoopKernelManager
from jupyter_client.kernelspec import KernelSpec

from jupyter_gpuhive.hosts.config import parse_hosts
from jupyter_gpuhive.hosts.engines import Engine, labels, run_line
from jupyter_gpuhive.hosts.pool import HostPool, SshSettings
from jupyter_gpuhive.jobs import GpuSlot
from jupyter_gpuhive.jobs.containers import engines
from jupyter_gpuhive.jobs.launcher import Launcher
from jupyter_gpuhive.jobs.model import render_tasks
from jupyter_gpuhive.kernels.registry import KernelRegistry
from jupyter_gpuhive.model import Identity, utcnow
from jupyter_gpuhive.model.containers import ContainerSpec
from jupyter_gpuhive.model.jobs import Job
from jupyter_gpuhive.sim.cluster import LocalSimHost
from jupyter_gpuhive.sim.sshd import SshdCluster
from jupyter_gpuhive.store import Store
from jupyter_gpuhive.store.jobs import Jobs
from tests.support.containers import build_test_image, running_dockerd
from tests.support.engine_access import engine_user
from tests.support.kernel_python import kernel_python

USER = "gh-alice"
HOST = "cbench1"  # the local host
SSH_HOST = "cbench2"  # the SSH host (a real sshd on loopback)
SIM_ENV = ("PATH", "GPUHIVE_SIM_HOST", "GPUHIVE_SIM_CONFIG")
BEGAN = time.perf_counter()
# The OCI runtime that Debian's containerd runs (runc ships with docker.io's dependencies).
RUNC = shutil.which("runc", path="/usr/sbin:/usr/bin:/sbin:/bin") or "/usr/sbin/runc"
# The floor's JSON names: which of Floor's series, and the digits kept.
FLOOR_FIGURES = {
    "bare_true_s": ("true", 4),
    "bare_screen_s": ("screen", 4),
    "engine_run_s": ("run", 3),
    "engine_create_s": ("create", 3),
    "engine_start_s": ("start", 3),
    "engine_run_gpuhive_s": ("line", 3),
    "engine_first_s": ("first", 3),
    "runtime_run_s": ("runc", 3),
}
SYSTEM_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LC_ALL": "C"}


class _Kernels:
    """The registry the benchmark's kernel managers are handed (set once it exists)."""

    registry: KernelRegistry | None = None


KERNELS = _Kernels()


def say(message: str) -> None:
    print(f"[{time.perf_counter() - BEGAN:6.1f}s] {message}", file=sys.stderr, flush=True)


async def appears(path: Path, limit: float = 60.0) -> float:
    """Wait until `path` exists; the perf_counter time it was seen."""
    deadline = time.perf_counter() + limit
    while not os.path.exists(path):  # noqa: ASYNC240 - a stat per poll; a thread hop would add its own delay to the figure
        if time.perf_counter() > deadline:
            raise TimeoutError(f"{path} did not appear within {limit} s")
        await asyncio.sleep(0.005)
    return time.perf_counter()


async def job_starts(
    store: Store, pool: HostPool, host: str, runs: int, image: str, floor: Floor
) -> dict[str, list[float]]:
    """Seconds from Launcher.start to the command's first statement on `host`, bare and in
    the image, alternating, with a round of `floor` after each pair; the owner's connection to
    the host is opened first (unmeasured)."""
    home = Path(pwd.getpwnam(USER).pw_dir)
    marks = home / f".gpuhive-bench-{uuid.uuid4().hex[:8]}"
    marks.mkdir()
    shutil.chown(marks, USER, USER)
    jobs = Jobs(store.db, log_dir=f"~/.gpuhive/bench-{uuid.uuid4().hex[:8]}")
    launcher = Launcher(pool, jobs, grace=1.0)
    decl = pool.hosts[host]
    gpu = decl.gpus[0].uuid
    layout = [(host, decl.address, [GpuSlot(host, decl.address, 0, gpu)])]
    out: dict[str, list[float]] = {"bare": [], "container": []}
    try:
        await pool.run(host, "true", user=USER)  # an SSH host: the owner's connection, opened
        for i in range(runs):
            for kind in ("bare", "container"):
                mark = marks / f"{kind}-{i}"
                spec = Job(name=f"{kind}{i}", owner=USER, command=f": > {mark} && exec sleep 60",
                           container=ContainerSpec(image) if kind == "container" else None)  # fmt: skip
                job = await asyncio.to_thread(jobs.create, spec, render_tasks(spec, layout))
                began = time.perf_counter()
                report = await launcher.start(job)
                if report.failures:
                    raise RuntimeError(f"{kind} job did not start on {host}: {report.failures}")
                out[kind].append(await appears(mark) - began)
                await launcher.stop(job.id, grace=1.0)
            await asyncio.to_thread(floor.round)
    finally:
        shutil.rmtree(marks, ignore_errors=True)
        shutil.rmtree(home / jobs.log_dir[2:], ignore_errors=True)
    return out


def kernel_spec(reservation_id: int, image: str | None) -> KernelSpec:
    config: dict[str, Any] = {"reservation_id": reservation_id}
    if image:
        config["image"] = image
    metadata = {"kernel_provisioner": {"provisioner_name": "gpuhive", "config": config}}
    return KernelSpec(argv=["python", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                      display_name="bench", language="python", metadata=metadata)  # fmt: skip


async def kernel_start(spec: KernelSpec) -> float:
    """Seconds from start_kernel to the first kernel_info reply; the kernel is shut down."""
    km = AsyncIOLoopKernelManager()
    km.gpuhive_kernels = KERNELS.registry  # type: ignore[attr-defined]  # as the server does
    km._kernel_spec = spec
    began = time.perf_counter()
    await km.start_kernel()
    kc = km.client()
    kc.start_channels()
    try:
        await kc.wait_for_ready(timeout=60)
        took = time.perf_counter() - began
    finally:
        kc.stop_channels()
        await km.shutdown_kernel(now=True)
    return took


async def kernel_starts(
    store: Store, pool: HostPool, runs: int, image: str
) -> dict[str, list[float]]:
    async def run(fn: Any, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(fn, *args, **kwargs)

    KERNELS.registry = KernelRegistry(store, pool, run, identity_of=Identity)
    begin = utcnow() - timedelta(seconds=1)
    gpu = store.inventory.gpu(f"{HOST}:0")
    assert gpu is not None
    res = store.reservations.create(USER, "bench", "", begin, begin + timedelta(hours=2),
                                    [gpu.id])  # fmt: skip
    out: dict[str, list[float]] = {"bare": [], "container": []}
    for _ in range(runs):
        out["bare"].append(await kernel_start(kernel_spec(res.id, None)))
        out["container"].append(await kernel_start(kernel_spec(res.id, image)))
    return out


def runc_bundle(engine: Any, image: str, work: Path) -> Path:
    """An OCI bundle of `image` for runc: its files (``docker export``) and ``runc spec``'s
    configuration, running ``/bin/true``, without a network namespace."""
    bundle = work / "bundle"
    (bundle / "rootfs").mkdir(parents=True)
    made = engine.run("create", "--pull", "never", image, "/bin/true").stdout.strip()
    exported = subprocess.Popen(engine.argv("export", made), stdout=subprocess.PIPE,
                                env=engine.env())  # fmt: skip
    subprocess.run(["tar", "-x", "-C", str(bundle / "rootfs")], stdin=exported.stdout, check=True)
    if exported.wait(timeout=120) != 0:
        raise RuntimeError(f"docker export {made} failed")
    engine.run("rm", made)
    timed([RUNC, "spec", "--bundle", str(bundle)], SYSTEM_ENV)
    config = json.loads((bundle / "config.json").read_text())
    config["process"].update(terminal=False, args=["/bin/true"])
    spaces = config["linux"]["namespaces"]
    config["linux"]["namespaces"] = [n for n in spaces if n["type"] != "network"]
    (bundle / "config.json").write_text(json.dumps(config))
    return bundle


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    """Seconds `argv` took, start to exit, and its stdout; its error text when it fails."""
    began = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    took = time.perf_counter() - began
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip() or done.returncode}")
    return took, done.stdout.strip()


class Floor:
    """The start floor: one round of /bin/true bare, in screen, via the engine (whole and
    split) and via runc alone; rounds run between the job starts, so both see the same load."""

    def __init__(self, engine: Any, image: str, work: Path, site: Engine) -> None:
        self.engine, self.image, self.site = engine, image, site
        self.state = work / "runc-state"
        self.runc_error: str | None = None  # why runc could not run here, if it could not
        try:
            self.bundle = runc_bundle(engine, image, work)
        except (OSError, RuntimeError) as error:  # no runc, or one that cannot work here
            self.bundle, self.runc_error = work, str(error)
        self.env_file = work / "floor.env"
        self.env_file.write_text("GPUHIVE_BENCH=1\n")
        self.marks = work / "floor-marks"
        self.marks.mkdir()
        self.out: dict[str, list[float]] = {key: [] for key, _ in FLOOR_FIGURES.values()}

    def container(self, *verb: str) -> list[str]:
        return self.engine.argv(*verb, "--network", "host", "--pull", "never",
                                "--log-driver", "none", self.image, "/bin/true")  # fmt: skip

    def line(self, i: int) -> str:
        """gpuhive's own `run` line for a task running /bin/true (as root here, no GPUs)."""
        return run_line(self.site, image=self.image, name=f"floor-{os.getpid()}-{i}",
                        owner="root", argv=["/bin/true"], uuids=[],
                        env_file=str(self.env_file), workdir=None,
                        label_values=labels("root", job=1, task=0), host_network=True)  # fmt: skip

    def first(self, i: int) -> float:
        """Seconds from `docker run` to the container's first statement (as a job start is
        measured), not to its exit; the container is removed after, unmeasured."""
        mark, name = self.marks / f"m{i}", f"first-{os.getpid()}-{i}"
        run = self.container("run", "--rm", "--name", name, "-v", f"{self.marks}:{self.marks}")
        run[-1:] = ["sh", "-c", f": > {mark} && exec sleep 60"]
        began = time.perf_counter()
        client = subprocess.Popen(run, env=self.engine.env(), stdout=subprocess.DEVNULL)
        try:
            return asyncio.run(appears(mark)) - began
        finally:
            self.engine.run("rm", "-f", name)
            client.wait(timeout=60)

    def round(self) -> None:
        i, env, out = len(self.out["true"]), self.engine.env(), self.out
        out["true"].append(timed(["/bin/true"], SYSTEM_ENV)[0])
        screen = ["screen", "-DmS", f"floor-{os.getpid()}-{i}", "/bin/true"]
        out["screen"].append(timed(screen, {**SYSTEM_ENV, "TERM": "xterm"})[0])
        out["run"].append(timed(self.container("run", "--rm"), env)[0])
        out["line"].append(timed(["bash", "-c", self.line(i)], SYSTEM_ENV)[0])
        out["first"].append(self.first(i))
        took, made = timed(self.container("create"), env)
        out["create"].append(took)
        out["start"].append(timed(self.engine.argv("start", "-a", made), env)[0])
        self.engine.run("rm", made)
        if self.runc_error is None:
            name = f"gpuhive-floor-{os.getpid()}-{i}"  # also its cgroup's name: unique
            runc = [RUNC, "--root", str(self.state), "run", "--bundle", str(self.bundle), name]
            try:
                out["runc"].append(timed(runc, SYSTEM_ENV)[0])
            except RuntimeError as error:
                self.runc_error = str(error)


def attribution(smoke: bool) -> dict[str, Any]:
    """The figures of benchmarks/container_attribution.py (its own engine and containers)."""
    from benchmarks import container_attribution

    found = container_attribution.measure(smoke)
    return {"attribution_ms": found["attribution_ms"], "misattributed": found["misattributed"]}


def ratio(starts: dict[str, list[float]]) -> tuple[float, float, float]:
    """The medians of bare and container starts and their ratio."""
    bare, boxed = statistics.median(starts["bare"]), statistics.median(starts["container"])
    return bare, boxed, boxed / bare


async def run(smoke: bool, work: Path) -> dict[str, Any]:
    job_runs, kernel_runs = (2, 1) if smoke else (10, 5)
    with running_dockerd() as engine, SshdCluster([SSH_HOST]) as cluster:
        image = build_test_image(engine)
        # The engine and image are new: one container first, so neither host's first run
        # pays for a cold daemon (a site's engine has started containers before).
        engine.run("run", "--rm", "--network", "host", "--log-driver", "none", image.tag, "true")
        say(f"dockerd, sshd and image {image.tag} ready")
        engine_user(engine, USER)
        cluster.add_user(USER)
        sim = LocalSimHost(HOST, work / "sim")
        env = sim.env()
        containers = {
            "engine": "docker", "binary": engine.binary, "socket": engine.host,
            "gpu_flags": "none", "images": [image.tag],
            "mounts": [{"path": str(image.venv), "read_only": True}],
            "kernel_python": image.venv_python,
        }  # fmt: skip
        ssh = cluster[SSH_HOST]
        decls = parse_hosts([
            {"name": HOST, "transport": "local", "containers": containers,
             "env": {k: env[k] for k in SIM_ENV},
             "gpus": [{"index": g.index, "uuid": g.uuid} for g in sim.config.gpus],
             "kernel_python": kernel_python()},
            {"name": SSH_HOST, "address": ssh.address, "port": ssh.port, "containers": containers,
             "gpus": [{"index": g.index, "uuid": g.uuid}
                      for g in cluster.host_config(SSH_HOST).gpus]},
        ])  # fmt: skip
        store = Store(f"sqlite:///{work / 'hive.sqlite'}").open()
        store.inventory.sync(decls)
        settings = SshSettings(client_keys=[str(cluster.client_key)],
                               known_hosts=[str(cluster.known_hosts)],
                               connect_timeout=5, command_timeout=60)  # fmt: skip
        pool = HostPool(decls, settings)
        try:
            site = engines(pool.hosts)[HOST]
            floor = await asyncio.to_thread(Floor, engine, image.tag, work, site)
            over_ssh = await job_starts(store, pool, SSH_HOST, job_runs, image.tag, floor)
            say(f"job starts, ssh host: {over_ssh}")
            local = await job_starts(store, pool, HOST, job_runs, image.tag, floor)
            say(f"job starts, local host: {local}")
            kernels = await kernel_starts(store, pool, kernel_runs, image.tag)
            say(f"kernel starts: {kernels}")
            say(f"floor: {floor.out}")
        finally:
            await pool.close()
            store.close()
    job_bare, job_boxed, job_ratio = ratio(over_ssh)
    local_bare, local_boxed, local_ratio = ratio(local)
    k_bare, k_boxed, k_ratio = ratio(kernels)
    say(f"container_job_start_ratio (ssh host): {job_ratio:.2f} "
        f"({job_boxed:.3f} s / {job_bare:.3f} s)")  # fmt: skip
    say(f"container_job_start_ratio_local (local host): {local_ratio:.2f} "
        f"({local_boxed:.3f} s / {local_bare:.3f} s)")  # fmt: skip
    least = {key: statistics.median(values) for key, values in floor.out.items() if values}
    if floor.runc_error:  # the figures that need runc are null, and the reason is printed
        say(f"runc cannot run here: {floor.runc_error}")
    say(f"bare_true_s: {least['true']:.4f} s (fork and exec of /bin/true); bare_screen_s: "
        f"{least['screen']:.4f} s (screen -DmS NAME /bin/true)")  # fmt: skip
    say(f"engine_run_s: {least['run']:.3f} s (docker run --rm /bin/true; create "
        f"{least['create']:.3f} s + start -a {least['start']:.3f} s)")  # fmt: skip
    say(f"engine_run_gpuhive_s: {least['line']:.3f} s (gpuhive's own run line, /bin/true)")
    say(f"engine_first_s: {least['first']:.3f} s (docker run to the container's first statement)")
    runc_s = f"{least['runc']:.3f} s" if "runc" in least else "none"
    say(f"runtime_run_s: {runc_s} (runc run /bin/true, no engine)")
    parts = {"engine": "run", "engine_first": "first", "runtime": "runc"}
    floors_of = {
        f"floor_ratio_{name}{where}": (bare + least[key]) / bare if key in least else None
        for where, bare in (("", job_bare), ("_local", local_bare))
        for name, key in parts.items()
    }
    for name, value in floors_of.items():
        shown = "none" if value is None else f"{value:.2f}"
        part = "runc run" if "runtime" in name else "docker run"
        say(f"{name}: {shown} (the bare start plus nothing but {part})")
    return {
        "container_job_start_ratio": round(job_ratio, 2),
        "container_job_start_ratio_local": round(local_ratio, 2),
        "container_kernel_start_ratio": round(k_ratio, 2),
        "job_start_bare_s": round(job_bare, 3),
        "job_start_container_s": round(job_boxed, 3),
        "job_start_bare_local_s": round(local_bare, 3),
        "job_start_container_local_s": round(local_boxed, 3),
        "kernel_start_bare_s": round(k_bare, 3),
        "kernel_start_container_s": round(k_boxed, 3),
        **{
            name: round(least[key], places) if key in least else None
            for name, (key, places) in FLOOR_FIGURES.items()
        },
        **{name: None if value is None else round(value, 2) for name, value in floors_of.items()},
        # Only where runc failed: a null would read as a missing figure (make bench-smoke).
        **({"runtime_error": floor.runc_error} if floor.runc_error else {}),
        "runs": {"jobs": job_runs, "kernels": kernel_runs, "floor": 2 * job_runs},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--smoke", action="store_true", help="2 job starts, 1 kernel start and 4 floor rounds"
    )
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (it starts its own dockerd and runs jobs as a test user)")
    work = Path(tempfile.mkdtemp(prefix="gpuhive-bench-containers-"))
    work.chmod(0o755)
    try:
        figures = asyncio.run(run(args.smoke, work))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    figures.update(attribution(args.smoke))
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
