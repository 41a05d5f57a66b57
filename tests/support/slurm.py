"""A real Slurm cluster for tests: slurmctld and two slurmd on this machine, fake GPUs by gres.

Everything lives in a fresh temporary folder (configuration, state, logs, pid files, munge's
key and socket, the fake GPU device files): nothing an earlier run left behind is read, and
/etc/slurm and /etc/munge are never touched. The clients find the cluster through SLURM_CONF
(`SlurmCluster.env`). Needs root (the daemons run as root; reservations are root's) and
Debian's `slurmctld slurmd slurm-client munge` (`make sysdeps`).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from jupyter_gpuhive.sim.ports import free_port

NODES = {"n1": "a100", "n2": "h100"}  # node -> its GPU type; 4 GPUs each
GPUS_PER_NODE = 4
DAEMONS = ("slurmctld", "slurmd", "scontrol", "munged")


def unavailable_reason() -> str | None:
    """Why no Slurm cluster can run here, or None."""
    if os.geteuid() != 0:
        return "a real Slurm cluster needs root (its daemons and reservations are root's)"
    missing = [d for d in DAEMONS if not _which(d)]
    if missing:
        return f"Slurm is not installed ({', '.join(missing)} missing): run 'make sysdeps'"
    return None


def _which(name: str) -> str | None:
    return shutil.which(name, path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")


class SlurmCluster:
    """One running cluster in `root`: `env` reaches it, `scontrol(...)` runs a client."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.conf = root / "etc" / "slurm.conf"
        self.munge_socket = root / "munge" / "munge.sock"
        self.ctld_port = free_port()
        self.node_ports = {node: free_port() for node in NODES}
        self.bin = str(Path(_which("scontrol") or "/usr/bin/scontrol").parent)

    @property
    def env(self) -> dict[str, str]:
        """The environment a Slurm client needs to reach this cluster (instants in UTC)."""
        path = f"{self.bin}:/usr/sbin:/usr/bin:/bin"
        return {"SLURM_CONF": str(self.conf), "PATH": path, "TZ": "UTC"}

    def scontrol(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """`scontrol ARGS` against this cluster, as root."""
        return subprocess.run(
            [f"{self.bin}/scontrol", *args], env=self.env, capture_output=True, text=True,
            timeout=30, check=check,
        )  # fmt: skip

    # --- starting --------------------------------------------------------------------

    def start(self) -> None:
        for sub in ("etc", "munge", "ctld", "log", "run"):
            (self.root / sub).mkdir(parents=True)
        self._devices()
        self._munge()
        self._config()
        conf = str(self.conf)
        _daemon(_which("slurmctld"), "-f", conf)
        for node in NODES:
            _daemon(_which("slurmd"), "-f", conf, "-N", node)
        self._wait_idle()

    def _devices(self) -> None:
        """Fake GPUs: character devices 195:N (what NVIDIA's are), opened by nobody."""
        for node in NODES:
            folder = self.root / "dev" / node
            folder.mkdir(parents=True)
            for i in range(GPUS_PER_NODE):
                os.mknod(folder / f"nvidia{i}", 0o666 | 0o020000, os.makedev(195, i))

    def _munge(self) -> None:
        """A munged of this cluster's own: its key, socket and files in `root/munge`."""
        folder = self.root / "munge"
        # 0711: the cluster's users reach the socket (their salloc, srun and sbatch sign
        # with it); the key stays root's (0400) and the folder cannot be listed
        os.chmod(folder, 0o711)
        key = folder / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        _daemon(
            _which("munged"), "--force", f"--socket={self.munge_socket}", f"--key-file={key}",
            f"--pid-file={folder / 'munged.pid'}", f"--log-file={folder / 'munged.log'}",
            f"--seed-file={folder / 'munged.seed'}",
        )  # fmt: skip
        _wait(lambda: self.munge_socket.exists(), "munged did not open its socket", folder)

    def _config(self) -> None:
        r = self.root
        lines = [
            "ClusterName=gpuhivetest",
            "SlurmctldHost=localhost",
            f"SlurmctldPort={self.ctld_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            f"StateSaveLocation={r / 'ctld'}",
            f"SlurmdSpoolDir={r / 'run'}/d-%n",
            f"SlurmctldPidFile={r / 'run'}/slurmctld.pid",
            f"SlurmdPidFile={r / 'run'}/slurmd-%n.pid",
            f"SlurmctldLogFile={r / 'log'}/slurmctld.log",
            f"SlurmdLogFile={r / 'log'}/slurmd-%n.log",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "MpiDefault=none",
            "SwitchType=switch/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "GresTypes=gpu",
            "MailProg=/bin/true",
            "SlurmdParameters=config_overrides",  # the nodes claim more than this machine has
            "ReturnToService=2",
            "SchedulerType=sched/backfill",
            "SchedulerParameters=bf_interval=1",  # Slurm's start estimates within a second
            "InactiveLimit=0",
            "SlurmctldTimeout=30",
            "SlurmdTimeout=60",
        ]
        gres = ["AutoDetect=off"]
        for node, kind in NODES.items():
            lines.append(
                f"NodeName={node} NodeHostname=localhost NodeAddr=127.0.0.1 "
                f"Port={self.node_ports[node]} CPUs=8 Boards=1 SocketsPerBoard=1 "
                f"CoresPerSocket=8 ThreadsPerCore=1 RealMemory=8000 "
                f"Gres=gpu:{kind}:{GPUS_PER_NODE} State=UNKNOWN"
            )
            last = GPUS_PER_NODE - 1
            gres.append(
                f"NodeName={node} Name=gpu Type={kind} File={r / 'dev' / node}/nvidia[0-{last}]"
            )
        lines.append(f"PartitionName=gpu Nodes={','.join(NODES)} Default=YES MaxTime=INFINITE")
        self.conf.write_text("\n".join(lines) + "\n")
        (self.conf.parent / "gres.conf").write_text("\n".join(gres) + "\n")
        for path in (r, r / "etc", self.conf, self.conf.parent / "gres.conf"):
            os.chmod(path, 0o755 if path.is_dir() else 0o644)

    def _wait_idle(self) -> None:
        def idle() -> bool:
            done = subprocess.run(
                [f"{self.bin}/sinfo", "-h", "-N", "-o", "%N=%T"], env=self.env,
                capture_output=True, text=True, timeout=10, check=False,
            )  # fmt: skip
            return sorted(done.stdout.split()) == [f"{n}=idle" for n in NODES]

        _wait(idle, "the Slurm nodes did not become idle", self.root / "log", limit=60)

    # --- stopping ------------------------------------------------------------------------

    def stop(self) -> None:
        """End the daemons by their pid files (SIGTERM, then SIGKILL)."""
        run = self.root / "run"
        files = [*sorted(run.glob("slurmd-*.pid")), run / "slurmctld.pid"]
        for pidfile in [*files, self.root / "munge" / "munged.pid"]:
            _end(pidfile)


def _daemon(binary: str | None, *args: str) -> None:
    """Start a daemon that forks into the background; raise with its output when it fails."""
    if binary is None:
        raise RuntimeError(f"not installed: {args}")
    done = subprocess.run(
        [binary, *args], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"{binary} failed ({done.returncode}): {done.stderr or done.stdout}")


def _wait(ready: object, what: str, logs: Path, limit: float = 20) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if ready():  # type: ignore[operator]
            return
        time.sleep(0.1)
    said = "".join(
        f"\n--- {p.name}\n{p.read_text(errors='replace')[-2000:]}" for p in sorted(logs.glob("*"))
        if p.is_file()
    )  # fmt: skip
    raise RuntimeError(f"{what}{said}")


def _end(pidfile: Path) -> None:
    with suppress(OSError, ValueError):
        pid = int(pidfile.read_text().strip())
    if "pid" not in locals():
        return
    with suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    with suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


@contextmanager
def running_slurm() -> Iterator[SlurmCluster]:
    """Start a cluster in a fresh temporary folder for the duration of the block."""
    root = Path(tempfile.mkdtemp(prefix="gpuhive-slurm-"))
    os.chmod(root, 0o755)
    cluster = SlurmCluster(root)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
