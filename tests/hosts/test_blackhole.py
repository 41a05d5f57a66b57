"""A host that silently drops every packet (powered off, cable pulled, firewall): no RST, no
FIN, just silence. Produced for real with an nftables rule on the host's sshd port."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator

import pytest

from jupyter_gpuhive.monitor.sampler import Sampler
from tests.support.waiting import until

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="nftables rules need root")


def nft(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["nft", *args], capture_output=True, text=True, check=False)


@pytest.fixture
def blackhole() -> Iterator[tuple[Callable[[int], None], Callable[[], None]]]:
    """(drop(port), restore()): make a loopback TCP port swallow packets both ways."""
    if shutil.which("nft") is None:
        pytest.fail("nft is missing: `make sysdeps` installs nftables")
    table = f"gpuhive_test_{os.getpid()}"
    made = nft("add", "table", "inet", table)
    if made.returncode != 0:
        pytest.skip(f"this kernel refuses nftables tables: {made.stderr.strip()}")
    for chain, hook in (("in", "input"), ("out", "output")):
        rule = f"{{ type filter hook {hook} priority 0; policy accept; }}"
        assert nft("add", "chain", "inet", table, chain, rule).returncode == 0

    def drop(port: int) -> None:
        for chain, match in (("in", "dport"), ("out", "sport")):
            done = nft("add", "rule", "inet", table, chain, "tcp", match, str(port), "drop")
            assert done.returncode == 0, done.stderr

    def restore() -> None:
        assert nft("flush", "table", "inet", table).returncode == 0

    try:
        yield drop, restore
    finally:
        nft("delete", "table", "inet", table)


async def test_a_silent_host_times_out_and_comes_back_by_itself(
    make_cluster, make_pool, blackhole
) -> None:
    drop, restore = blackhole
    cluster = make_cluster(2)
    pool = make_pool(cluster, connect_timeout=2.0, backoff_initial=1.0, backoff_max=2.0)
    sampler = Sampler(pool, interval=4, timeout=2)
    first = await sampler.sweep()
    assert set(first.samples) == {"gpu1", "gpu2"}, first.failures
    port = cluster["gpu2"].port

    drop(port)
    # Its kept probe loop gets no answer: the request's timeout, not a hang.
    started = time.monotonic()
    sweep = await sampler.sweep()
    assert time.monotonic() - started < 3.5
    assert "gpu1" in sweep.samples
    assert sweep.failures == {"gpu2": f"no answer from 127.0.0.1:{port} within 2 s"}
    assert pool.status("gpu2").state == "down"

    # While it stays silent, a new connection is tried after each backoff and gives up after
    # the connect timeout; gpu1 is swept every time.
    async def tried_thrice() -> bool:
        started = time.monotonic()
        sweep = await sampler.sweep()
        assert time.monotonic() - started < 3.5
        assert "gpu1" in sweep.samples
        assert "gpu2" in sweep.failures
        return pool.status("gpu2").failures >= 3

    await until(tried_thrice, timeout=20, interval=0)
    assert pool.status("gpu2").error == f"no answer from 127.0.0.1:{port} within 2 s"

    restore()

    async def back() -> bool:
        return "gpu2" in (await sampler.sweep()).samples

    assert await until(back, timeout=15)
    assert pool.status("gpu2").state == "up"
    assert len(sampler.live["gpu2"].sample.gpus) == 4
