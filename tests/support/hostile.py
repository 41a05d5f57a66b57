"""A hostile GPU user in one line: a real process, as a real second UNIX user, with any argv.

Every parser of probe output (``ps`` lines, nvidia-smi's CSV and XML, cgroup files) reads text
that such a user picks. Try it against a hostile name with::

    with hostile_process(sim.name, [0], user="gh-eve", argv=["python3", "-c", CODE, NAME],
                         config=sim.config_path) as proc:
        ...  # probe the host: proc.pid is on GPU 0, owned by gh-eve, its argv as given

The process is started directly with the user's uid (no shell, no su in between), so its argv
reaches /proc/PID/cmdline, ``ps`` and the NVIDIA stand-in byte for byte; it is killed (its
whole session) when the block ends, however it ends.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator, Mapping, Sequence

import pytest

from jupyter_gpuhive.sim.users import ensure_user, is_root, start_gpu_process

HOSTILE_USER = "gh-eve"  # at most 8 characters: `ps -o user=` truncates longer names
SLEEPER = "import time; time.sleep(600)"  # `python3 -c SLEEPER ANY...` lives on with any argv


def sleeper_argv(*args: str | bytes) -> list[str | bytes]:
    """An argv that sleeps and carries `args` as its arguments (what ``ps``/names show)."""
    return ["python3", "-c", SLEEPER, *args]


def named_argv(name: str | bytes) -> list[str | bytes]:
    """An argv whose process is named `name` (its argv[0], what nvidia-smi prints as its
    process name) and sleeps: bash's ``exec -a``."""
    return ["bash", "-c", 'exec -a "$0" sleep 600', name]


@contextlib.contextmanager
def hostile_process(
    host: str,
    gpus: Sequence[int | str],
    *,
    user: str = HOSTILE_USER,
    argv: Sequence[str | bytes] = ("sleep", "600"),
    config: str | os.PathLike[str] | None = None,
    mem_mib: int | None = None,
    util: int | None = None,
    env: Mapping[str, str] | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """Run `argv` as `user` (created when missing) on simulated `gpus` of `host`; kill it after.

    `config` is the host's sim config file (only that simulated host reports the process).
    Skips the test when not root (other users' processes need root)."""
    if not is_root():
        pytest.skip("a process as another UNIX user needs root")
    ensure_user(user)
    proc = start_gpu_process(
        host, gpus, user=user, command=argv, mem_mib=mem_mib, util=util, env=env, config=config
    )
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # its own session: children too
        proc.wait(timeout=10)
