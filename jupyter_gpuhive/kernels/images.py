"""Reservation kernels in container images (issue #29): the engine line that runs the launch
script in the image, and the container's removal.

The kernel keeps every guarantee of a bare one: the engine's client runs as the owner (and
the container as their uid:gid), the launch JSON (HMAC key, environment) still arrives on
stdin (`-i`), never in argv, the private socket folder gpuhive lent is mounted at its own
path so its Unix sockets are reached from the host as before, and signals to the client's
group reach the kernel (the client passes them on; `--init` spreads them to the group). The
reserved GPUs are given by UUID as for container jobs.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
from collections.abc import Awaitable, Callable
from typing import Any

from ..hosts.engines import Engine, Mount, engine_of, labels, remove_line, run_line
from ..hosts.environment import command_env, host_env
from ..hosts.loops import end_group, spawn
from ..hosts.vendors import vendor_named
from .launch import SCRIPT, Launch, LaunchError


def engine_for(launch: Launch) -> Engine:
    """The host's engine, which must allow the launch's image (LaunchError saying why)."""
    where = launch.host.name
    engine = engine_of(launch.host)
    if engine is None:
        raise LaunchError(f"Cannot start a kernel in an image on {where}: it runs no engine.")
    if launch.image != engine.kernel_image and not engine.allows_image(str(launch.image)):
        raise LaunchError(
            f"Cannot start a kernel in image {launch.image!r} on {where}: the host does not "
            f"allow it (allowed: {', '.join(engine.images) or 'none'})."
        )
    return engine


def kernel_name(kernel_id: str) -> str:
    """The container's name: the kernel's id (a restart removes the last one first)."""
    return f"gpuhive-kernel-{kernel_id}"


def own_kernel_containers(registry: Any) -> Callable[[], Awaitable[dict[tuple[str, str], str]]]:
    """gpuhive's own kernel containers, (host, container name) -> the kernel's owner, from the
    registry's live kernels (root's own record, not the container's labels, which any user
    of the engine can set): for the attribution of container processes."""

    async def read() -> dict[tuple[str, str], str]:
        return {(r.host, kernel_name(r.kernel_id)): r.owner for r in registry.live()}

    return read


# Over SSH the host makes the kernel's private folder before the engine runs, so that it can
# be mounted; its prefix is not the launch script's own (whose `sweep` judges folders by a pid,
# which in a container is not the host's).
MAKE_FOLDER = 'd=$(mktemp -d "${TMPDIR:-/tmp}/gpuhive-kimage-XXXXXXXX") || exit 1; '


def command(launch: Launch, folder: str | None) -> str:
    """The sh command that becomes the kernel's container (exec: the client keeps our pid);
    `folder` None: the host makes one (`$d`, mounted and given to the launch script)."""
    engine = engine_for(launch)
    uuids = vendor_named(engine.vendor).pinning.uuids(launch.env)
    # The host's env reaches the kernel by name from the client's own environment (not argv).
    passed = sorted(name for name in host_env(launch.host) if name != "PATH")
    reservation = launch.env.get("GPUHIVE_KERNEL_RESERVATION")
    line = run_line(
        engine,
        image=str(launch.image),
        name=launch.container,
        owner=launch.user,
        argv=[engine.kernel_python, "-I", "-S", "-c", SCRIPT, "boot"],
        uuids=uuids,
        env_file=None,
        workdir=None,
        mounts=[*engine.mounts, *([Mount(folder)] if folder else [])],
        label_values=labels(launch.user, kernel=launch.container, reservation=reservation),
        extra_env=passed,
        interactive=True,
        raw=((), ()) if folder else (['-v "$d:$d"'], ['"$d"']),
    )
    return f"exec {line}" if folder else f"{MAKE_FOLDER}exec {line}"


def signal_line(launch: Launch, name: str) -> str:
    """`ENGINE kill --signal NAME CONTAINER`: the kernel's pid is the container's, not the
    host's, so signals go through the engine (its init passes them to the group)."""
    engine = engine_for(launch)
    words = [*engine.words(), "kill", "--signal", name, launch.container]
    return " ".join(shlex.quote(w) for w in words) + " >/dev/null 2>&1"


def remove_command(launch: Launch) -> str | None:
    """`ENGINE rm -f CONTAINER` as shell text (None: the host has no engine)."""
    engine = engine_of(launch.host)
    return remove_line(engine, [launch.container]) if engine is not None else None


async def remove(launch: Launch, ids: dict[str, Any]) -> None:
    """Remove the kernel's container (as its owner, `ids`: subprocess user and groups): a
    killed client leaves it running until the kernel notices its silent stdin."""
    engine = engine_of(launch.host)
    if engine is None:
        return
    line = remove_line(engine, [launch.container])
    env = command_env(launch.host, launch.user)
    with contextlib.suppress(OSError, ValueError):
        process = await spawn(["sh", "-c", line], env=env, **ids)
        try:
            async with asyncio.timeout(30):
                await process.wait()
        except TimeoutError:
            await end_group(process)  # an engine that hangs is not left running
