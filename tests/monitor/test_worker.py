"""The sampler's process ends as soon as its server lets go of it, even in its first moments.

Every server stopped within a second of starting (every test server) paid 5 s here: the
worker's first probes were starting their local loops, and CPython 3.11's
create_subprocess_exec, cancelled before its pipes are connected, waits for them until an
outer timeout ends it (python/cpython#133536; here the probes' connect_timeout). See
jupyter_gpuhive.hosts.loops.spawn.
"""

from __future__ import annotations

import multiprocessing

from jupyter_gpuhive.hosts.pool import SshSettings
from jupyter_gpuhive.model import HostDecl
from jupyter_gpuhive.monitor import worker


def test_the_sampler_process_stopped_before_its_first_sweep_ends_at_once() -> None:
    hosts = [HostDecl(name=f"gpu{n}", address="127.0.0.1", transport="local") for n in (1, 2, 3)]
    # Timeouts of 10 minutes: only the cancellation can end the probes in time.
    ssh = SshSettings(connect_timeout=600.0, command_timeout=600.0)
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe(duplex=False)
    process = context.Process(
        target=worker.main, args=(theirs, hosts, ssh, 5.0, 600.0), daemon=True
    )
    process.start()
    theirs.close()
    ours.close()  # as Monitor.halt does at once: the child sees its pipe close and ends
    process.join(60)  # a failure's bound only: it ends once it has started (about a second)
    alive = process.is_alive()
    if alive:
        process.kill()
        process.join()
    assert not alive, "the sampler process outlived its closed pipe"
    assert process.exitcode == 0
