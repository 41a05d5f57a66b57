"""The `gpuhive` kernel provisioner: a notebook's kernel on its reservation's host and GPUs.

A kernelspec selects it with
``"metadata": {"kernel_provisioner": {"provisioner_name": "gpuhive",
"config": {"reservation_id": 7}}}`` (optionally ``"host"`` for a reservation on several
hosts; by default the host with most of its GPUs). The spec's argv is not used: the kernel is
ipykernel under the host's `kernel_python` (a path or a conda environment's name; default:
this server's interpreter path), started by `launch_script.py`.

The first launch fixes the kernel's owner: the user of the request that starts it (jupyter_
server passes no user to kernel managers; `KernelRegistry.requester` reads the request's
CallContext), who must own the reservation. The kernel runs as the reservation owner's UNIX
user, pinned by the host's GPU vendor (its variable set to the reserved GPUs' UUIDs, MIG
UUIDs for slices, and the variables that go with it), and an explicit environment: the host's
login environment (over SSH; a fixed base on `local`), the host's `env`, the spec's `env`, and
of the server's launch environment only GPUHIVE_URL/GPUHIVE_TOKEN (the owner's own kernel
token) and JPY_SESSION_NAME. Later launches (restarts) re-check the requester (owner or
admin) and the reservation's times. Interrupts and kills are signals to the kernel's process
group on the host. A lost connection makes `poll` report an exit and the kernel is declared
dead (no auto-restart onto a host that cannot be reached) with the reason in the registry and
the server's kernel model.
"""

from __future__ import annotations

import asyncio
import logging
import signal as signals
import sys
from queue import Empty
from typing import Any

from jupyter_client.connect import KernelConnectionInfo
from jupyter_client.provisioning.provisioner_base import KernelProvisionerBase
from traitlets import Float, Integer, TraitError, Unicode

from ..errors import HiveError, Invalid, Unavailable
from ..hosts.backends import KernelBooking
from ..hosts.engines import engine_of
from ..hosts.vendors import vendor_of
from ..jobs.caps import reservation_env
from ..model import ID_MAX, Reservation, utcnow
from ..model.kernel import KernelState
from . import registry as registries
from .images import kernel_name
from .launch import PORTS, Launch
from .local import LocalKernel
from .registry import KernelRecord, KernelRegistry
from .remote import HostKernel, KernelProcess
from .restarts import end_for_good

log = logging.getLogger(__name__)

PASSED_ON = ("GPUHIVE_URL", "GPUHIVE_TOKEN", "JPY_SESSION_NAME")  # of the launch environment
SETTLE_TRIES = 20  # kernel_info requests (0.25 s each) a restarted kernel gets to answer
RECONNECTED = 0.3  # seconds for the notebooks' iopub sockets to be back after a restart


async def settle_after_restart(km: Any) -> None:
    """Send kernel_info until the restarted kernel answers on iopub, then give the notebooks'
    iopub subscriptions time to reconnect (NOTES: else a restart's first output can be lost)."""
    client = km.client()
    channels = {"shell": True, "iopub": True, "stdin": False, "hb": False, "control": False}
    client.start_channels(**channels)
    try:
        for _ in range(SETTLE_TRIES):
            client.kernel_info()
            try:
                await client.get_iopub_msg(timeout=0.25)
                break
            except Empty:
                continue
    finally:
        client.stop_channels()
    await asyncio.sleep(RECONNECTED)  # the other subscribers retry every 0.1 s (ZMQ)


def find_registry(provisioner: Any) -> KernelRegistry:
    """The registry this provisioner's kernel manager (its parent) was handed when it was
    made: by the server's kernel manager (server/kernel_manager.py) or the broker."""
    found = getattr(provisioner.parent, "gpuhive_kernels", None)
    if isinstance(found, KernelRegistry):
        return found
    raise Unavailable(
        "Kernels on reservations need the gpuhive server extension with its own hosts "
        "(not a client-mode server)."
    )


class GpuHiveProvisioner(KernelProvisionerBase):  # type: ignore[misc]
    """Starts the kernel on the reservation's host, as its owner, on its GPUs."""

    reservation_id = Integer(
        None, allow_none=True, config=True, min=0, max=ID_MAX,  # a database id (#41: was 500)
        help="The reservation whose host and GPUs the kernel uses.",
    )  # fmt: skip
    host = Unicode(None, allow_none=True, config=True,
                   help="Which host of a reservation on several (default: most GPUs).")  # fmt: skip
    image = Unicode(None, allow_none=True, config=True,
                    help="A container image for the kernel, among those the host allows "
                    "(default: the host's containers.kernel_image, else none).")  # fmt: skip
    launch_timeout = Float(60.0, config=True, help="Seconds a kernel may take to start.")
    orphan_timeout = Float(
        20.0, config=True,
        help="Seconds a kernel lives on without a word from this server (a connection that "
        "died silently); 0: only until its SSH session ends.",
    )  # fmt: skip

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        # Team mode: a client-mode server's kernel manager hands each kernel's own manager
        # (the parent) the provisioner that has the team's service run the kernel
        # (kernels/team.py; server/kernel_manager.py, set by server/service_link.py).
        other = getattr(kwargs.get("parent"), "gpuhive_provisioner", None)
        if cls is GpuHiveProvisioner and other is not None:
            return other(*args, **kwargs)  # not one of ours: __init__ is not run again
        return super().__new__(cls, *args, **kwargs)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        try:  # the kernelspec's provisioner config arrives here as keyword arguments
            super().__init__(*args, **kwargs)
        except TraitError as error:  # a 422 (kernel_guard), not jupyter_server's bare 500
            raise Invalid(
                f"This kernelspec's gpuhive provisioner config is invalid: {error}"
            ) from None

    _kernel: KernelProcess | None = None
    _record: KernelRecord | None = None
    _share: Reservation | None = None  # the share booking it runs on (None: whole GPUs)
    _running = False
    _dead_reason: str | None = None
    _ending: asyncio.Future[None] | None = None

    @property
    def has_process(self) -> bool:
        return self._running

    # --- launching ----------------------------------------------------------------------

    async def pre_launch(self, **kwargs: Any) -> dict[str, Any]:
        registry = find_registry(self)
        who = registry.requester()
        env_in: dict[str, str] = dict(kwargs.pop("env", None) or {})
        kwargs.pop("extra_arguments", None)
        if self._record is None:
            rid = self.reservation_id  # the spec's only: a start's env is the server's own
            if rid is None:
                raise Invalid("This kernelspec names no reservation (config.reservation_id).")
            place = await registry.place(rid, who, self.host)
            now = utcnow()
            self._record = KernelRecord(
                kernel_id=str(self.kernel_id), owner=place.reservation.owner,
                unix_user=place.unix_user, reservation_id=rid, host=place.host.name,
                gpus=tuple(g.ref for g in place.gpus),
                gpu_uuids=tuple(g.uuid for g in place.gpus), started_at=now, launched_at=now,
            )  # fmt: skip
            self._share = place.reservation if place.reservation.is_share else None
            if registry.reclaim is not None:  # preemptible jobs on lent GPUs go first
                why = f"{place.reservation.owner} starts a kernel on reservation {rid}"
                await registry.reclaim(place.reservation.owner, self._record.gpu_uuids, why)
        else:
            record = self._record
            try:
                if who is not None and not registries.is_internal():
                    registry.check(record.kernel_id, who, "restart")
                registry.check_time(await registry.reservation(record.reservation_id))
            except HiveError as error:  # the old process is gone by now: so is the kernel
                end_for_good(self, f"not restarted: {error}")
                registry.ended(record.kernel_id, KernelState.DEAD, f"not restarted: {error}")
                # Its socket folder goes now: jupyter_server drops a kernel whose restart
                # failed without a cleanup (and its restarter is stopped: no 'dead' comes).
                await self._drop_kernel()
                raise
            registry.restarting(record.kernel_id)
        kwargs["env"] = self._kernel_env(env_in)
        kwargs["cmd"] = ["ipykernel", "on", self._record.host]  # shown in logs; not run
        return kwargs

    def _kernel_env(self, env_in: dict[str, str]) -> dict[str, str]:
        assert self._record is not None
        env = {k: str(v) for k, v in (getattr(self.kernel_spec, "env", None) or {}).items()}
        env.update({k: env_in[k] for k in PASSED_ON if env_in.get(k)})
        decl = find_registry(self).pool.hosts.get(self._record.host)
        pinning = vendor_of(decl.extra if decl else None).pinning
        backend = find_registry(self).pool.backend_of(decl) if decl else None
        if backend is None or not backend.pins_devices:  # else the engine pins (Slurm)
            env.update(pinning.env(self._record.gpu_uuids))
        if self._share is not None:  # a share of one GPU: the framework caps (jobs/caps.py)
            mps = bool(decl and decl.extra.get("mps") is True)
            env.update(reservation_env(self._share, pinning, mps=mps))
        env["GPUHIVE_KERNEL_RESERVATION"] = str(self._record.reservation_id)
        return env

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> KernelConnectionInfo:
        registry = find_registry(self)
        record = self._record
        assert record is not None
        decl = registry.pool.hosts.get(record.host)
        if decl is None:
            raise Unavailable(
                f"Host {record.host} is gone: it is no longer in the hosts file or the "
                f"configuration. Add it back (jupyter gpuhive hosts add {record.host} …)."
            )
        python = str(decl.extra.get("kernel_python") or sys.executable)
        km = self.parent
        key = km.session.key if km is not None else b""
        scheme = km.session.signature_scheme if km is not None else "hmac-sha256"
        engine = engine_of(decl)
        if self.image is not None and (engine is None or not engine.allows_image(self.image)):
            allowed = ", ".join(engine.images) if engine is not None else "no engine there"
            raise Invalid(f"Image {self.image!r} is not allowed for kernels on {decl.name} "
                          f"(allowed: {allowed or 'none'}).")  # fmt: skip
        image = self.image or (engine.kernel_image if engine is not None else None)
        booking = None
        if registry.pool.backend_of(decl).reservations(decl) is not None:  # an engine holds it
            held = await registry.reservation(record.reservation_id)
            indexes = tuple(sorted(int(i) for r in record.gpus
                                   if (i := r.rpartition(":")[2]).isdigit()))  # fmt: skip
            booking = KernelBooking(record.reservation_id, len(record.gpu_uuids), held.end,
                                    indexes)  # fmt: skip
        launch = Launch(decl, record.unix_user, python, dict(kwargs.get("env") or {}),
                        key.decode(), scheme, self.launch_timeout, self.orphan_timeout,
                        image, kernel_name(record.kernel_id), booking)  # fmt: skip
        if self._kernel is None or self._kernel.lost:
            here = registry.pool.backend_of(decl).runs_here  # else through its channels
            self._kernel = LocalKernel(launch) if here else HostKernel(launch, registry.pool)
        kernel = self._kernel
        kernel.on_lost = self._lost
        try:
            await kernel.start(launch)
        except BaseException as error:
            await kernel.close()
            self._kernel = None
            if registry.get(record.kernel_id) is None:
                self._record = None  # a first launch: the next try places it afresh
            else:
                end_for_good(self, f"the restart failed: {error}")
                registry.ended(record.kernel_id, KernelState.DEAD, f"the restart failed: {error}")
            raise
        self._running, self._dead_reason = True, None
        first = record.pid is None and record.restarts == 0
        record.pid, record.pgid = kernel.pid, kernel.pgid
        if not first:
            record.restarts += 1
            record.launched_at = utcnow()
        record.control = _Control(self)
        registry.launched(record)
        info: dict[str, Any] = {"transport": "ipc", "ip": kernel.address, **PORTS, "key": key,
                                "signature_scheme": scheme}  # fmt: skip
        self.connection_info = info  # type: ignore[assignment]  # a KernelConnectionInfo
        return self.connection_info

    async def post_launch(self, **kwargs: Any) -> None:
        """After a restart, wait until the new kernel answers on iopub through the forwards
        (the notebooks' iopub subscriptions reconnect meanwhile; NOTES: else the first
        messages after a restart can be lost)."""
        record, km = self._record, self.parent
        if km is None:
            return
        # The restarter's 'dead' (a death it will not restart: its restart limit, or a
        # refused restart) is told to us too: jupyter_server then drops the kernel from its
        # map without a shutdown, so no cleanup would ever end it here. (Once per restarter:
        # the same one watches each launch. The team's service, kernels/broker.py, has no
        # kernel manager and no restarter: its server's restarter asks it to clean up.)
        if hasattr(km, "add_restart_callback"):
            km.remove_restart_callback(self._died, "dead")
            km.add_restart_callback(self._died, "dead")
        if record is not None and record.restarts > 0:
            await settle_after_restart(km)

    # --- the process --------------------------------------------------------------------

    async def poll(self) -> int | None:
        kernel = self._kernel
        if kernel is None or not self._running:
            return 0
        code = kernel.exit_status()
        if code is not None and kernel.lost and self._dead_reason is None:
            await self._declare_dead(kernel.lost)
        return code

    def _died(self) -> None:
        """The restarter gave the kernel up: end it here (its process, sockets' directory,
        container and the registry's record), as a shutdown would."""
        task = asyncio.ensure_future(self._end_dead())
        self._ending = task  # held until done (the loop keeps only weak references)
        task.add_done_callback(_log_failure)

    async def _end_dead(self) -> None:
        kernel, record = self._kernel, self._record
        code = kernel.exit_status() if kernel is not None else None
        self._running = False
        if record is not None and self._dead_reason is None:
            why = "its process exited" + (f" (status {code})" if code is not None else "")
            self._dead_reason = f"{why} and it was not restarted"
            find_registry(self).ended(record.kernel_id, KernelState.DEAD, self._dead_reason)
        await self._drop_kernel()

    async def _drop_kernel(self) -> None:
        """Everything of the kernel's process goes (it is over): its process group, socket
        folder, container or SSH connection."""
        kernel, self._kernel = self._kernel, None
        if kernel is not None:
            await kernel.close()

    async def _lost(self, reason: str) -> None:
        """The connection broke: the registry knows at once (the restarter within 3 s)."""
        if self._running and self._dead_reason is None:
            await self._declare_dead(reason)

    async def _declare_dead(self, reason: str) -> None:
        """The connection is gone: no auto-restart; the registry and the model say why."""
        self._dead_reason = reason
        end_for_good(self, reason)
        if self._record is not None:
            find_registry(self).ended(self._record.kernel_id, KernelState.DEAD, reason)
        if self._kernel is not None:
            await self._kernel.close()

    async def wait(self) -> int | None:
        while (code := await self.poll()) is None:  # noqa: ASYNC110 - polled, as LocalProvisioner
            await asyncio.sleep(0.1)
        self._running = False
        return code

    async def send_signal(self, signum: int) -> None:
        if self._kernel is not None and self._running:
            await self._kernel.signal(signum)

    async def kill(self, restart: bool = False) -> None:
        await self.send_signal(signals.SIGKILL)

    async def terminate(self, restart: bool = False) -> None:
        await self.send_signal(signals.SIGTERM)

    async def cleanup(self, restart: bool = False) -> None:
        kernel = self._kernel
        self._running = False
        if kernel is None:
            return
        if restart and not kernel.lost:
            await kernel.end()
            return
        await kernel.close()
        self._kernel = None
        if self._record is not None and self._dead_reason is None:
            find_registry(self).ended(self._record.kernel_id, KernelState.ENDED, "shut down")

    def get_shutdown_wait_time(self, recommended: float = 5.0) -> float:
        return max(recommended, 2.0)

    async def get_provisioner_info(self) -> dict[str, Any]:
        info = await super().get_provisioner_info()
        record = self._record
        if record is not None:
            info.update(reservation_id=record.reservation_id, host=record.host,
                        owner=record.owner, pid=record.pid, pgid=record.pgid)  # fmt: skip
        return info


def _log_failure(task: asyncio.Future[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("gpuhive: could not end a dead kernel", exc_info=task.exception())


class _Control:
    """What the registry may do to this provisioner's kernel."""

    def __init__(self, provisioner: GpuHiveProvisioner) -> None:
        self.provisioner = provisioner

    async def signal(self, signum: int) -> None:
        await self.provisioner.send_signal(signum)

    async def stop(self) -> None:
        await self.provisioner.kill()
        try:
            async with asyncio.timeout(5):
                await self.provisioner.wait()
        except TimeoutError:
            pass
        await self.provisioner.cleanup()
