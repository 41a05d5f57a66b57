"""Real OpenSSH sshd instances on loopback as simulated GPU hosts (`SshdCluster`).

Each host is one ``sshd -D`` on 127.0.0.1 with its own port, host key, pid file and log, and a
``SetEnv`` that gives its sessions the simulated host name, its config file and a ``PATH`` with the
``nvidia-smi`` stand-in. One client key (in an ``AuthorizedKeysFile`` the cluster manages) logs in
as any user; users are real UNIX accounts. Faults: stop/start a host, rotate its host key, or set
the stand-in's fault knobs. Running as root it serves any user; otherwise only the current one.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from .inventory import (
    CONFIG_ENV,
    HOST_ENV,
    SimHostConfig,
    clear_faults,
    load_config,
    preset,
    set_faults,
    write_config,
)
from .nvidia_smi import install_nvidia_smi
from .ports import free_port, free_ports
from .sshhost import SimHost, check_host_name
from .users import current_user, ensure_user, is_root, start_gpu_process

SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _children_map() -> dict[int, list[int]]:
    """Parent pid -> child pids, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    return children


def _descendants(pid: int) -> list[int]:
    """All living descendants of `pid`."""
    children, found, todo = _children_map(), [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _keygen(path: Path, comment: str) -> subprocess.Popen[bytes]:
    """Start ``ssh-keygen`` for a new ed25519 key at `path` (old files removed)."""
    path.unlink(missing_ok=True)
    path.with_name(path.name + ".pub").unlink(missing_ok=True)
    return subprocess.Popen(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _wait_all(procs: Iterable[subprocess.Popen[bytes]], what: str) -> None:
    for proc in procs:
        _, err = proc.communicate(timeout=60)
        if proc.returncode:
            raise RuntimeError(f"{what} failed: {err.decode(errors='replace').strip()}")


class SshdCluster:
    """Real sshd hosts on 127.0.0.1, each a simulated GPU host; a context manager."""

    def __init__(
        self,
        hosts: int | Sequence[str] = 3,
        *,
        profile: str = "a100x4",
        configs: Mapping[str, SimHostConfig] | None = None,
        workdir: str | os.PathLike[str] | None = None,
        start_timeout: float = 30.0,
    ) -> None:
        names = [f"gpu{i}" for i in range(1, hosts + 1)] if isinstance(hosts, int) else hosts
        self.names = [check_host_name(n) for n in names]
        if len(set(self.names)) != len(self.names):
            raise ValueError("simulated host names must be unique")
        self.profile = profile
        self._configs = dict(configs or {})
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="gpuhive-sshd-")).absolute()
        if re.search(r'[\s"]', str(self.workdir)):
            raise ValueError(f"sshd configs cannot name this work dir: {self.workdir}")
        self.bin_dir = self.workdir / "bin"
        self.client_key = self.workdir / "client_ed25519"
        self.known_hosts = self.workdir / "known_hosts"
        self.authorized_keys = self.workdir / "authorized_keys"
        self.start_timeout = start_timeout
        self.hosts: dict[str, SimHost] = {}
        self.users: list[str] = [current_user()]
        self._sshd = shutil.which("sshd", path=f"{SYSTEM_PATH}:{os.environ.get('PATH', '')}")

    def __enter__(self) -> SshdCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __getitem__(self, name: str) -> SimHost:
        return self.hosts[name]

    def __iter__(self) -> Iterator[SimHost]:
        return iter(self.hosts.values())

    def __len__(self) -> int:
        return len(self.hosts)

    def start(self) -> SshdCluster:
        """Create keys, configs and users' access, start every sshd and wait until all listen."""
        if self._sshd is None:
            raise RuntimeError("OpenSSH sshd is not installed (apt-get install openssh-server)")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.workdir.chmod(0o755)  # sshd reads authorized_keys as the logging-in user
        if is_root():
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation dir
        install_nvidia_smi(self.bin_dir)
        keygens = [_keygen(self.client_key, "gpuhive-sim-client")]
        for name, port in zip(self.names, free_ports(len(self.names)), strict=True):
            hostdir = self.workdir / "hosts" / name
            hostdir.mkdir(parents=True, exist_ok=True)
            hostdir.chmod(0o755)
            host = SimHost(
                name,
                "127.0.0.1",
                port,
                hostdir,
                hostdir / "sim.json",
                self.client_key,
                self.known_hosts,
            )
            write_config(host.config_path, self._configs.get(name) or preset(self.profile, name))
            keygens.append(_keygen(host.host_key, f"gpuhive-sim-{name}"))
            self.hosts[name] = host
        _wait_all(keygens, "ssh-keygen")
        shutil.copyfile(f"{self.client_key}.pub", self.authorized_keys)
        self.authorized_keys.chmod(0o644)
        self.trust_host_keys()
        for host in self.hosts.values():
            self._launch(host)
        atexit.register(self.stop)  # no sshd outlives the process that started it
        self._wait_ready(list(self.hosts.values()))
        return self

    def stop(self) -> None:
        """Stop every host; remove the work dir when the cluster made it."""
        atexit.unregister(self.stop)
        for name in self.hosts:
            self.stop_host(name)
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _write_sshd_config(self, host: SimHost) -> None:
        setenv = (
            f"{HOST_ENV}={host.name} {CONFIG_ENV}={host.config_path} "
            f"PATH={self.bin_dir}:{SYSTEM_PATH}"
        )
        lines = [
            f"Port {host.port}",
            f"ListenAddress {host.address}",
            f"HostKey {host.host_key}",
            f"PidFile {host.pid_file}",
            f"AuthorizedKeysFile {self.authorized_keys}",
            "UsePAM no",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PermitRootLogin prohibit-password",
            "StrictModes no",
            "UseDNS no",
            "PrintMotd no",
            "PrintLastLog no",
            "X11Forwarding no",
            "Subsystem sftp internal-sftp",
            f"SetEnv {setenv}",
        ]
        host.sshd_config.write_text("\n".join(lines) + "\n", encoding="utf-8")

    def _launch(self, host: SimHost) -> None:
        """Start the host's sshd in the foreground, detached from our stdio (see NOTES.md)."""
        self._write_sshd_config(host)
        host.pid_file.unlink(missing_ok=True)
        host.process = subprocess.Popen(
            [str(self._sshd), "-D", "-f", str(host.sshd_config), "-E", str(host.log_path)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def _wait_ready(self, hosts: list[SimHost]) -> None:
        """Wait until each sshd has bound its port (it writes its pid file after listening)."""
        deadline = time.monotonic() + self.start_timeout
        retries = dict.fromkeys((h.name for h in hosts), 0)
        pending = list(hosts)
        while pending:
            for host in list(pending):
                assert host.process is not None
                if host.pid_file.exists() and host.pid_file.read_text().strip() == str(
                    host.process.pid
                ):
                    pending.remove(host)
                elif host.process.poll() is not None:
                    log = (
                        host.log_path.read_text(errors="replace") if host.log_path.exists() else ""
                    )
                    if "in use" in log and retries[host.name] < 3:  # a port race: take another
                        retries[host.name] += 1
                        host.port = free_port()
                        self.trust_host_keys()
                        self._launch(host)
                        continue
                    tail = " | ".join(log.strip().splitlines()[-3:])
                    raise RuntimeError(
                        f"sshd of {host.name} exited ({host.process.returncode}): {tail}"
                    )
            if pending and time.monotonic() > deadline:
                raise TimeoutError(f"sshd did not start in time for {[h.name for h in pending]}")
            if pending:
                time.sleep(0.02)

    def stop_host(self, name: str) -> None:
        """Kill a host's listener and its per-connection sshd processes: open connections break."""
        host = self.hosts[name]
        proc = host.process
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGSTOP)  # no new connections while we look
        sessions = [p for p in _descendants(proc.pid) if _comm(p).startswith("sshd")]
        proc.kill()
        for pid in sessions:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=10)

    def start_host(self, name: str) -> None:
        """Start a stopped host again: same port, same host key."""
        host = self.hosts[name]
        if not host.running:
            self._launch(host)
            self._wait_ready([host])

    def rotate_host_key(self, name: str) -> None:
        """Give a host a new host key (restarting it); known_hosts keeps the old one."""
        host = self.hosts[name]
        was_running = host.running
        self.stop_host(name)
        _wait_all([_keygen(host.host_key, f"gpuhive-sim-{name}")], "ssh-keygen")
        if was_running:
            self.start_host(name)

    def known_hosts_lines(self, name: str) -> list[str]:
        """known_hosts lines for a host's current key."""
        host = self.hosts[name]
        key = " ".join(Path(f"{host.host_key}.pub").read_text().split()[:2])
        return [f"[{host.address}]:{host.port} {key}", f"[localhost]:{host.port} {key}"]

    def trust_host_keys(self) -> None:
        """Rewrite the known_hosts file with every host's current key."""
        lines = [line for name in self.hosts for line in self.known_hosts_lines(name)]
        self.known_hosts.write_text("\n".join(lines) + "\n", encoding="utf-8")
        self.known_hosts.chmod(0o644)

    def add_user(self, name: str) -> str:
        """Make a real UNIX user that can log in to every host (needs root for others)."""
        if name != current_user():
            ensure_user(name)
        if name not in self.users:
            self.users.append(name)
        return name

    def host_config(self, name: str) -> SimHostConfig:
        """A host's current simulated inventory."""
        return load_config(self.hosts[name].config_path)

    def write_host_config(self, name: str, config: SimHostConfig) -> None:
        """Replace a host's inventory (the stand-in reads it on its next call)."""
        write_config(self.hosts[name].config_path, config)

    def set_fault(self, name: str, **knobs: Any) -> SimHostConfig:
        """Set a host's fault knobs: delay_s, hang, junk, driver_failure (None keeps)."""
        return set_faults(self.hosts[name].config_path, **knobs)

    def clear_faults(self, name: str) -> SimHostConfig:
        """Reset a host's fault knobs."""
        return clear_faults(self.hosts[name].config_path)

    def ssh(
        self,
        name: str,
        user: str,
        command: str | Sequence[str],
        *,
        timeout: float = 30.0,
        strict: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        """Run a command on a host with the OpenSSH client; never raises on failure status."""
        return subprocess.run(
            self.hosts[name].ssh_command(user, command, strict=strict),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def start_gpu_process(
        self, name: str, gpus: Sequence[int | str], *, user: str | None = None, **kwargs: Any
    ) -> subprocess.Popen[bytes]:
        """Start a real process as `user` on `gpus` of host `name` (see users.start_gpu_process)."""
        kwargs.setdefault("config", self[name].config_path)
        return start_gpu_process(name, gpus, user=user, **kwargs)
