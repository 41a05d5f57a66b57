"""1,000 simulated hosts on an in-process asyncssh server, in its own process.

The probe's answer is generated once by running the real probe against the ``nvidia-smi``
stand-in (4 GPUs, 2 GPU processes owned by the test users), then varied per host (GPU UUIDs,
PIDs, utilization). The server listens on a few loopback ports; the login name says which
simulated host a connection is (``h0000`` … ``h0999``). It answers the probe (one-shot, or each
request of the probe loop) at once and anything else with exit status 127.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import random
import re
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from queue import Empty
from typing import Any

import asyncssh
from sweep_sshd import TEST_USERS, measure_sweeps

from jupyter_gpuhive.hosts.pool import HostPool, SshSettings
from jupyter_gpuhive.hosts.probe import (
    END,
    MARK,
    PROBE_COMMAND,
    PROBE_LOOP_COMMAND,
    probe_loop_command,
)
from jupyter_gpuhive.model import HostDecl
from jupyter_gpuhive.sim.cluster import LocalSimHost
from jupyter_gpuhive.sim.inventory import make_uuid, preset
from jupyter_gpuhive.sim.ports import free_ports
from jupyter_gpuhive.sim.users import ensure_user, start_gpu_process

FIXTURE_HOST = "fixture"
PLAIN_LOOP_COMMAND = probe_loop_command(health=False)  # benchmarks/metrics.py's baseline


def without_health(text: str) -> str:
    """A probe answer without its `health` and `healthv` sections (the probe without health:
    on a host without MIG it runs only the metrics and processes queries)."""
    out, keep = [], True
    for line in text.split("\n"):
        if line.startswith(MARK):
            keep = line.split()[0] not in (f"{MARK}health", f"{MARK}healthv")
        if keep:
            out.append(line)
    return "\n".join(out)


def unchanged_health(text: str) -> tuple[str, str]:
    """The health lines' version in a probe answer, and the answer a probe loop gives a
    client that holds that version: `healthsame` and the version in place of the lines."""
    out, keep, version = [], True, ""
    lines = text.split("\n")
    for k, line in enumerate(lines):
        if line.startswith(MARK):
            name = line.split()[0]
            keep = name not in (f"{MARK}health", f"{MARK}healthv")
            if name == f"{MARK}healthv":
                version = lines[k + 1]
                out += [f"{MARK}healthsame 0", version]
        if keep:
            out.append(line)
    return version, "\n".join(out)


def probe_template() -> tuple[str, list[int]]:
    """The probe's real answer from the stand-in on a local host with 2 GPU processes."""
    for user in TEST_USERS:
        ensure_user(user)
    with tempfile.TemporaryDirectory(prefix="gpuhive-bench-fixture-") as tmp:
        host = LocalSimHost(FIXTURE_HOST, tmp, profile="a100x4")
        procs = [
            start_gpu_process(
                FIXTURE_HOST,
                [k],
                user=user,
                command=("sleep", "120"),
                mem_mib=2048 * (k + 1),
                util=40 + 10 * k,
            )
            for k, user in enumerate(TEST_USERS)
        ]
        try:
            done = subprocess.run(
                ["sh", "-c", PROBE_COMMAND],
                env=host.env(),
                capture_output=True,
                text=True,
                check=True,
                timeout=60,
            )
        finally:
            for proc in procs:
                proc.kill()
                proc.wait()
    return done.stdout, [p.pid for p in procs]


def vary(template: str, pids: list[int], name: str, rng: random.Random) -> str:
    """The template as host `name` would answer: its own UUIDs, PIDs and utilization."""
    text = template
    for k, gpu in enumerate(preset("a100x4", FIXTURE_HOST).gpus):
        text = text.replace(gpu.uuid, make_uuid(name, "GPU", k))
    for pid in pids:
        new = str(rng.randrange(1000, 4_000_000))
        text = re.sub(rf"(?m)^(\s*){pid}(?=[ ,])", rf"\g<1>{new}", text)
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("index, uuid"))
    columns = [c.split(" [")[0] for c in header.split(", ")]
    util_col = columns.index("utilization.gpu")
    for i, line in enumerate(lines):
        cells = line.split(", ")
        # a row of the GPU query (a process row "PID, GPU-…, MiB" starts alike)
        if re.match(r"^\d+, GPU-", line) and len(cells) == len(columns):
            cells[util_col] = str(rng.randrange(0, 101))
            lines[i] = ", ".join(cells)
    return "\n".join(lines) + "\n"


def _serve(outputs: dict[str, str], ports: list[int], client_pub: str, queue: Any) -> None:
    """The server process: listen on `ports`, answer the probe as the host named by the login."""

    async def handle(process: asyncssh.SSHServerProcess) -> None:
        text = outputs.get(process.get_extra_info("username"))
        if text is not None and process.command == PROBE_COMMAND:
            process.stdout.write(text)
        elif text is not None and process.command in (PROBE_LOOP_COMMAND, PLAIN_LOOP_COMMAND):
            if process.command == PLAIN_LOOP_COMMAND:  # without health: no health query
                text = without_health(text)
            # The probe loop: one answer per request line ("token [version]"), until the
            # client closes the session; a client that holds the health lines' version gets
            # the answer without them, as from a real loop on a host whose health is unchanged.
            version, same = unchanged_health(text)
            with contextlib.suppress(asyncssh.Error, OSError):
                async for line in process.stdin:
                    token, _, have = line.strip().partition(" ")
                    answer = same if version and have == version else text
                    process.stdout.write(f"{answer}{END}{token}\n")
        else:
            process.stderr.write("sh: command not found\n")
            process.exit(127)
            return
        process.exit(0)

    async def main() -> None:
        key = asyncssh.generate_private_key("ssh-ed25519")
        authorized = asyncssh.import_authorized_keys(client_pub)
        for port in ports:
            await asyncssh.create_server(
                asyncssh.SSHServer,
                "127.0.0.1",
                port,
                server_host_keys=[key],
                authorized_client_keys=authorized,
                process_factory=handle,
                backlog=2048,
                keepalive_interval=0,
            )
        queue.put(key.export_public_key("openssh").decode().strip())
        await asyncio.Event().wait()

    asyncio.run(main())


def _ready(queue: Any, proc: Any, timeout: float = 60.0) -> str:
    """The server's host key once it listens; fails at once if the server process died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Empty):
            return queue.get(timeout=0.5)
        if not proc.is_alive():
            raise RuntimeError(f"the fixture server exited ({proc.exitcode})")
    raise TimeoutError("the fixture server did not start")


@dataclass
class Fixture:
    decls: list[HostDecl]
    settings: SshSettings


@contextlib.contextmanager
def fixture_server(count: int, ports: int = 8) -> Iterator[Fixture]:
    """Start the server process for `count` hosts; yield how to reach them; stop it."""
    template, pids = probe_template()
    rng = random.Random(1000)
    names = [f"h{i:04d}" for i in range(count)]
    outputs = {name: vary(template, pids, name, rng) for name in names}
    with tempfile.TemporaryDirectory(prefix="gpuhive-bench-1000-") as tmp:
        client_key = asyncssh.generate_private_key("ssh-ed25519")
        key_path = Path(tmp) / "client_ed25519"
        client_key.write_private_key(str(key_path))
        key_path.chmod(0o600)
        pub = client_key.export_public_key("openssh").decode()
        ctx = mp.get_context("spawn")
        queue = ctx.Queue()
        port_list = free_ports(ports)
        proc = ctx.Process(target=_serve, args=(outputs, port_list, pub, queue), daemon=True)
        proc.start()
        try:
            host_key = _ready(queue, proc)
            known = Path(tmp) / "known_hosts"
            known.write_text("".join(f"[127.0.0.1]:{p} {host_key}\n" for p in port_list))
            decls = [
                HostDecl(f"sim{i:04d}", "127.0.0.1", port_list[i % ports], name, "ssh")
                for i, name in enumerate(names)
            ]
            settings = SshSettings(
                client_keys=[str(key_path)],
                known_hosts=[str(known)],
                connect_timeout=30.0,
                command_timeout=30.0,
            )
            yield Fixture(decls, settings)
        finally:
            proc.terminate()
            proc.join(10)
            if proc.is_alive():
                proc.kill()
                proc.join()


async def measure_fixture(fx: Fixture, repeats: int, log: Callable[[str], None]) -> dict:
    """Connect our pool to every simulated host, then time sweeps (median) and loop lag."""
    pool = HostPool(fx.decls, fx.settings)
    try:
        return await measure_sweeps(pool, repeats, log)
    finally:
        await pool.close()
