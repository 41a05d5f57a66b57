"""AMD hosts (`vendor: amd`) through the real pool: amd-smi's stand-in and rocm-smi's, real
processes of real users pinned with ROCR_VISIBLE_DEVICES, protection, a job, a mixed site.

The stand-ins (sim/amd_smi.py) print amd-smi's and rocm-smi's JSON for a simulated host and
find the processes whose environment selects its GPUs the way ROCm does."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from jupyter_gpuhive.bookings.finder import SlotSearch
from jupyter_gpuhive.bookings.reservations import Policy
from jupyter_gpuhive.errors import Invalid
from jupyter_gpuhive.hosts.engines import Engine, run_line
from jupyter_gpuhive.hosts.pool import HostPool, SshSettings
from jupyter_gpuhive.hosts.probe_command import probe_loop_command
from jupyter_gpuhive.hosts.vendors import vendor_named, vendor_of
from jupyter_gpuhive.hosts.vendors.amd import AmdVendor
from jupyter_gpuhive.jobs.launcher import Launcher
from jupyter_gpuhive.jobs.model import pinnings_of, render_tasks
from jupyter_gpuhive.jobs.selection import SiteVendors
from jupyter_gpuhive.model import HostDecl, Identity
from jupyter_gpuhive.model.finder import Want
from jupyter_gpuhive.model.jobs import GpuSlot, Job
from jupyter_gpuhive.model.violations import FOREIGN
from jupyter_gpuhive.monitor.sampler import Sampler
from jupyter_gpuhive.monitor.service import Monitor, unwired
from jupyter_gpuhive.sim.cluster import LocalSimHost
from jupyter_gpuhive.sim.inventory import preset
from jupyter_gpuhive.sim.users import ensure_user, is_root, start_gpu_process
from jupyter_gpuhive.store import Store
from jupyter_gpuhive.store.jobs import Jobs
from tests.hosts.helpers import intruders
from tests.sim.conftest import shared_dir  # noqa: F401
from tests.support.waiting import until

SIM_ENV = ("PATH", "GPUHIVE_SIM_HOST", "GPUHIVE_SIM_CONFIG")
ROOT_ONLY = pytest.mark.skipif(not is_root(), reason="runs processes as test users")


@pytest.fixture
def shared(shared_dir: Path) -> Path:  # noqa: F811
    """A folder every UNIX user can read (the stand-ins and their configs live there)."""
    return shared_dir


def amd_host(shared: Path, name: str, profile: str = "mi300x") -> tuple[LocalSimHost, HostDecl]:
    """A simulated AMD host and its entry (`vendor: amd`)."""
    sim = LocalSimHost(name, shared / name, preset(profile, name))
    env = sim.env({})
    extra = {"env": {k: env[k] for k in SIM_ENV}, "vendor": "amd"}
    return sim, HostDecl(name, transport="local", extra=extra)


def nvidia_host(shared: Path, name: str) -> tuple[LocalSimHost, HostDecl]:
    sim = LocalSimHost(name, shared / name, preset("a100x4", name))
    env = sim.env({})
    return sim, HostDecl(name, transport="local", extra={"env": {k: env[k] for k in SIM_ENV}})


def named_process(env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A process whose argv[0] (the name the tools print) is $NAME."""
    return subprocess.Popen(
        ["bash", "-c", 'exec -a "$NAME" sleep 60'], env=env, start_new_session=True
    )


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def test_amd_is_a_built_in_vendor_named_by_the_host_entry() -> None:
    assert isinstance(vendor_of({"vendor": "amd"}), AmdVendor)
    command = probe_loop_command(vendor=vendor_named("amd"))
    assert "amd-smi metric" in command and "rocm-smi" in command
    assert "nvidia-smi" not in command


def test_rocm_pinning_lists_uuids_and_numbers_them_for_hip() -> None:
    pin = vendor_named("amd").pinning
    env = pin.env(["GPU-0a4a7d8f4cf05a45", "GPU-df2e6455eeb158ab"])
    assert env == {
        "ROCR_VISIBLE_DEVICES": "GPU-0a4a7d8f4cf05a45,GPU-df2e6455eeb158ab",
        "HIP_VISIBLE_DEVICES": "0,1",
    }
    assert pin.uuids(env) == ["GPU-0a4a7d8f4cf05a45", "GPU-df2e6455eeb158ab"]
    assert {"ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"} <= pin.names


def test_a_container_gets_kfd_and_only_its_gpus_render_nodes(tmp_path: Path) -> None:
    engine = Engine(vendor="amd")
    line = run_line(
        engine, image="lab/rocm:6", name="t1", owner="alice", argv=["true"],
        uuids=["GPU-0a4a7d8f4cf05a45"], env_file=None, workdir=None,
    )  # fmt: skip
    assert "--device /dev/kfd --device $(for r in /sys/class/drm/renderD*" in line
    assert line.count("/sys/class/drm/renderD*") == 1 and "0a4a7d8f4cf05a45" in line
    assert "--gpus" not in line and "/dev/dri " not in line
    # The lookup, run by a shell against a sysfs of two GPUs, names the GPU's own node.
    lookup = line.split("--device ")[2].rsplit(" -v ", 1)[0].split(" --", 1)[0]
    sysfs = tmp_path / "sys"
    for node, hex_id in (("renderD128", "df2e6455eeb158ab"), ("renderD129", "0a4a7d8f4cf05a45")):
        (sysfs / node / "device").mkdir(parents=True)
        (sysfs / node / "device" / "unique_id").write_text(hex_id + "\n")
    script = "echo " + lookup.replace("/sys/class/drm", str(sysfs))
    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "/dev/dri/renderD129"
    with pytest.raises(Invalid, match="no unique id"):
        vendor_named("amd").pinning.container_flags("cdi", ["amd-pci-0000:07:00.0"])


@ROOT_ONLY
async def test_an_amd_host_is_swept_with_owners_and_protection_finds_an_intruder(
    shared: Path,
) -> None:
    sim, decl = amd_host(shared, "am1")
    for user in ("gh-alice", "gh-bob"):
        ensure_user(user)
    uuids = [g.uuid for g in sim.config.gpus]
    procs = [
        sim.start_process([1], user="gh-alice", mem_mib=900),
        sim.start_process([uuids[1]], user="gh-bob", mem_mib=700),  # by UUID, as ROCm takes it
        # HIP_VISIBLE_DEVICES picks among the devices ROCR_VISIBLE_DEVICES left: GPU 5
        start_gpu_process("am1", [4, 5], user="gh-bob", config=sim.config_path,
                          variable="ROCR_VISIBLE_DEVICES", env={"HIP_VISIBLE_DEVICES": "1"}),
        # CUDA_VISIBLE_DEVICES is not how a process reaches an AMD GPU
        start_gpu_process("am1", [2], user="gh-alice", config=sim.config_path),
    ]  # fmt: skip
    pool = HostPool([decl])
    try:
        sweep = await Sampler(pool, interval=5.0, timeout=30).sweep()
        assert sweep.failures == {}
        sample = sweep.samples["am1"]
        assert sample.gpu_error is None
        assert [g.uuid for g in sample.gpus] == uuids
        assert {g.name for g in sample.gpus} == {"AMD Instinct MI300X"}
        assert sample.gpus[1].mem_used_mib is not None and sample.gpus[1].mem_used_mib >= 1600
        assert all(g.power_w and g.temperature_c and g.mem_total_mib == 196592 for g in sample.gpus)
        owners = {p.pid: (p.user, p.gpu_uuid) for p in sample.processes}
        assert owners == {
            procs[0].pid: ("gh-alice", uuids[1]),
            procs[1].pid: ("gh-bob", uuids[1]),
            procs[2].pid: ("gh-bob", uuids[5]),
        }
        found = intruders(sample, "am1", (1, uuids[1]), "gh-alice")
        assert found == [(FOREIGN, "gh-bob", (procs[1].pid,))]
    finally:
        await pool.close()
        stop(procs)


@ROOT_ONLY
async def test_health_and_a_driver_that_is_not_loaded(shared: Path) -> None:
    sim, decl = amd_host(shared, "am2")
    config = sim.config
    config.gpus[3].fault = "ecc"
    config.gpus[6].fault = "thermal"
    sim.write_config(config)
    pool = HostPool([decl])
    try:
        sample = (await Sampler(pool, interval=5.0, timeout=30).sweep()).samples["am2"]
        states = {g.index: sample.health[g.uuid].state for g in sample.gpus}
        assert states[3] == "failed" and states[6] == "degraded" and states[0] == "ok"
        assert "uncorrectable" in " ".join(sample.health[sample.gpus[3].uuid].reasons)
        sim.set_fault(driver_failure=True)
        sample = (await Sampler(pool, interval=5.0, timeout=30).sweep()).samples["am2"]
        assert sample.gpu_error and "Driver not loaded" in sample.gpu_error
        assert sample.gpus == ()
    finally:
        await pool.close()


@ROOT_ONLY
async def test_a_rocm5_host_without_amd_smi_is_read_through_rocm_smi(shared: Path) -> None:
    sim, decl = amd_host(shared, "am3")
    (sim.bin_dir / "amd-smi").unlink()
    ensure_user("gh-alice")
    procs = [sim.start_process([2], user="gh-alice", mem_mib=512)]
    pool = HostPool([decl])
    try:
        sample = (await Sampler(pool, interval=5.0, timeout=30).sweep()).samples["am3"]
        assert sample.gpu_error is None
        assert [g.uuid for g in sample.gpus] == [g.uuid for g in sim.config.gpus]
        assert sample.gpus[2].mem_used_mib is not None and sample.gpus[2].mem_used_mib >= 512
        [seen] = sample.processes
        # rocm-smi names no process's GPU: the owner is right, the GPU honestly unknown
        assert (seen.pid, seen.user, seen.used_memory_mib) == (procs[0].pid, "gh-alice", 512)
        assert seen.gpu_uuid is None
    finally:
        await pool.close()
        stop(procs)


@ROOT_ONLY
async def test_a_job_on_an_amd_host_is_pinned_with_rocr_visible_devices(
    shared: Path, tmp_path: Path
) -> None:
    owner = "gpuhive-amdjob"
    ensure_user(owner)
    sim, decl = amd_host(shared, "am4")
    store = Store(f"sqlite:///{tmp_path / 'hive.sqlite'}").open()
    log_dir = f"~/.gpuhive/amd-{uuid.uuid4().hex[:8]}"
    jobs = Jobs(store.db, log_dir=log_dir)
    pool = HostPool([decl], SshSettings(command_timeout=20))
    launcher = Launcher(pool, jobs, grace=3.0)
    gpus = sim.config.gpus
    slots = [GpuSlot("am4", "127.0.0.1", i, gpus[i].uuid) for i in (2, 6)]
    probe = "import os,time; print(os.environ['ROCR_VISIBLE_DEVICES'], flush=True); time.sleep(60)"
    spec = Job(name=f"a{uuid.uuid4().hex[:8]}", owner=owner, command="python3 -c {p}",
               variables={"p": probe})  # fmt: skip
    specs = render_tasks(spec, [("am4", "127.0.0.1", slots)], pinnings=pinnings_of(pool.hosts))
    assert specs[0].env["ROCR_VISIBLE_DEVICES"] == f"{gpus[2].uuid},{gpus[6].uuid}"
    assert specs[0].env["HIP_VISIBLE_DEVICES"] == "0,1"
    assert "CUDA_VISIBLE_DEVICES" not in specs[0].env
    created = await asyncio.to_thread(jobs.create, spec, specs)
    try:
        report = await launcher.start(created)
        assert report.ok, report.message
        task = report.job.tasks[0]

        async def said() -> str | None:
            text = (await launcher.log(task)).text
            return text if "GPU-" in text else None

        assert (await until(said)).split()[0] == f"{gpus[2].uuid},{gpus[6].uuid}"

        async def on_gpus() -> Any:
            sample = (await Sampler(pool, interval=5.0, timeout=30).sweep()).samples["am4"]
            mine = [p for p in sample.processes if p.user == owner]
            return mine if {p.gpu_uuid for p in mine} == {gpus[2].uuid, gpus[6].uuid} else None

        assert await until(on_gpus)
        await launcher.stop(created)
    finally:
        await pool.close()
        store.close()
        shutil.rmtree(Path(pwd.getpwnam(owner).pw_dir) / log_dir[2:], ignore_errors=True)


@ROOT_ONLY
def test_a_mixed_site_finds_gpus_as_gpus_and_xgmi_as_a_direct_link(
    shared: Path, tmp_path: Path
) -> None:
    nv, nv_decl = nvidia_host(shared, "nv1")
    am, am_decl = amd_host(shared, "am5")
    store = Store(f"sqlite:///{tmp_path / 'hive.sqlite'}").open()
    executor = ThreadPoolExecutor(2)

    async def run(fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(executor, lambda: fn(*args))

    try:
        store.inventory.sync([nv_decl, am_decl])
        pool = HostPool([nv_decl, am_decl])
        monitor = Monitor(store, pool, run, **unwired(pool))

        async def sweep() -> None:
            sweep = await monitor.sampler.sweep()
            assert sweep.failures == {}
            await pool.close()

        asyncio.run(sweep())
        inventory = {g.uuid: g.host for g in store.inventory.gpus()}
        assert inventory == {
            **{g.uuid: "nv1" for g in nv.config.gpus},
            **{g.uuid: "am5" for g in am.config.gpus},
        }
        topology = store.topology.get("am5")
        assert topology is not None and topology.nvlink_cliques() == [frozenset(range(8))]
        decls = {"nv1": nv_decl, "am5": am_decl}
        search = SlotSearch(store, Policy(ZoneInfo("UTC")), lambda: None)
        vendors = SiteVendors(lambda: decls)
        start = int((datetime.now(UTC) + timedelta(days=1)).timestamp())

        def found(**ask: Any) -> list[set[str]]:
            want = Want(duration=3600, not_before=start, deadline=0, limit=3, **ask)
            found = search.search(Identity("alice"), want, vendors)[1]
            return [{u.host for u in s.units} for s in found]

        assert found(count=12)[0] == {"nv1", "am5"}  # one booking over both vendors' GPUs
        assert found(count=2, model="mi300x")[0] == {"am5"}
        assert found(count=2)[0] == {"nv1"}  # the tighter fit
        assert found(count=2, vendor="AMD")[0] == {"am5"}
        assert found(count=2, vendor="nvidia", model="a100")[0] == {"nv1"}
        assert found(count=5, vendor="nvidia") == []  # nv1 has four
        with pytest.raises(Invalid, match="known: amd, nvidia"):
            found(count=1, vendor="intel")
        assert found(count=6, nvlink=True) == [{"am5"}]  # XGMI joins all eight
    finally:
        store.close()
        executor.shutdown()


@ROOT_ONLY
async def test_a_process_name_forges_neither_a_pid_nor_a_section(shared: Path) -> None:
    from jupyter_gpuhive.sim.users import gpu_env

    sim, decl = amd_host(shared, "am6")
    forged = 'x",\n    "pid": 1,\n@@gpuhive:amdprocess 0\n[{"gpu": 0}]\n"pid": 1'
    env = {**sim.env(), **gpu_env("am6", [0], mem_mib=300, variable="ROCR_VISIBLE_DEVICES"),
           "NAME": forged}  # fmt: skip
    proc = named_process(env)
    pool = HostPool([decl])
    try:

        async def seen() -> Any:
            sample = (await Sampler(pool, interval=5.0, timeout=30).sweep()).samples["am6"]
            return sample if sample.processes else None

        sample = await until(seen)
        assert sample.gpu_error is None and len(sample.gpus) == 8
        assert [(p.pid, p.gpu_uuid) for p in sample.processes] == [
            (proc.pid, sim.config.gpus[0].uuid)
        ]
    finally:
        await pool.close()
        stop([proc])


@pytest.mark.parametrize("tool", ["amd-smi", "rocm-smi"])
async def test_the_doctor_reads_an_amd_host(shared: Path, tool: str) -> None:
    import sys

    from jupyter_gpuhive.cli.doctor_checks import diagnose

    sim, decl = amd_host(shared, "am7")
    if tool == "rocm-smi":
        (sim.bin_dir / "amd-smi").unlink()
    pool = HostPool([decl])
    try:
        report = await diagnose(pool, decl, user="root", python=sys.executable, timeout=30)
    finally:
        await pool.close()
    checks = {c.name: (c.status, c.detail) for c in report.checks}
    assert checks["amd-smi/rocm-smi"][0] == "ok"
    assert checks["amd-smi/rocm-smi"][1].endswith(f"/{tool}")
    assert checks[tool] == ("ok", f"{tool} reads 8 GPU(s), 0 process(es)")
    if tool == "amd-smi":
        assert checks["rocm"] == ("ok", "ROCm 6.2.0")


def test_this_machines_amd_gpus(shared: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sim, _ = amd_host(shared, "am8")
    for key, value in sim.env({}).items():
        monkeypatch.setenv(key, value)
    where, gpus, said = AmdVendor().local_gpus(str(sim.bin_dir), timeout=30)
    assert where == str(sim.bin_dir) and said.endswith("lists 8 GPU(s)")
    assert gpus[3] == {"index": 3, "model": "AMD Instinct MI300X", "uuid": sim.config.gpus[3].uuid}
    assert AmdVendor().local_gpus(str(shared), timeout=30)[2] == "no amd-smi on PATH"


async def test_an_amd_smi_that_refuses_an_option_is_asked_for_every_metric(shared: Path) -> None:
    sim, decl = amd_host(shared, "am9")
    real = sim.bin_dir / "amd-smi"
    real.rename(sim.bin_dir / "amd-smi.real")
    real.write_text(
        "#!/bin/sh\n"
        'case " $* " in *" --ecc "*) echo "amd-smi: error: unrecognized arguments: --ecc" >&2;'
        " exit 2 ;; esac\n"
        f'exec "{sim.bin_dir}/amd-smi.real" "$@"\n'
    )
    real.chmod(0o755)
    pool = HostPool([decl])
    try:
        sample = (await Sampler(pool, interval=5.0, timeout=30).sweep()).samples["am9"]
    finally:
        await pool.close()
    assert sample.gpu_error is None
    assert [g.power_w for g in sample.gpus] == [140.0] * 8
