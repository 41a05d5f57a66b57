"""The host backend seam: how gpuhive does things on one kind of host, and how a host picks one.

A host's `transport` names its backend. A backend runs a command as a user (the probe's one
round trip per sweep, the task runner's start, sync and stop scripts, the container engine's
commands all go through `run`), keeps long-lived request/answer loops, brings the task runner
of its hosts (`runner`: GNU screen unless it says otherwise), opens a reservation kernel's
channels, and says what the rest of gpuhive may ask of it (`runs_here`,
`clean_start`, `uses_ssh_keys`...), so that no code outside `hosts/backends/` compares
transport names.

A backend whose hosts are known through an engine rather than a probe (`slurm`) answers
`sample` itself, and brings the engine that mirrors gpuhive's bookings (`reservations`).

Backends are found by name: the built-in ones (`ssh`, `local`, `slurm`), those a site installs under
the entry-point group `jupyter_gpuhive.host_backends` (name = "module:Class"), and those
registered at run time with `register` (tests). The first found wins in that order.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, ClassVar, Protocol

from ...errors import Invalid
from ...model import HostDecl
from ..engines import Engine, engine_of
from ..runners import TaskRunner
from ..runners.screen import ScreenRunner
from ..status import CommandResult, HostUnavailable

if TYPE_CHECKING:  # not at run time: reading a hosts file imports no SSH (cli --help)
    from ...model.engines import ReservationEngine
    from ..loops import Loop
    from ..probe import HostSample
    from ..ssh import SshSettings

log = logging.getLogger(__name__)

GROUP = "jupyter_gpuhive.host_backends"
DEFAULT = "ssh"  # a host's transport when its entry names none
DEFAULT_RUNNER: TaskRunner = ScreenRunner()  # a backend's task runner unless it brings one
BUILT_IN = {
    "ssh": "jupyter_gpuhive.hosts.backends.ssh:SshBackend",
    "local": "jupyter_gpuhive.hosts.backends.local:LocalBackend",
    "slurm": "jupyter_gpuhive.hosts.backends.slurm:SlurmBackend",
}


class Session(Protocol):
    """A process started through a kernel's channels: its stdin, its output lines, its end."""

    def write(self, data: str) -> None: ...

    def lines(self) -> AsyncIterator[str]: ...

    @property
    def returncode(self) -> int | None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class KernelBooking:
    """The booking a reservation kernel runs on, for a backend whose engine holds it (Slurm)."""

    reservation_id: int
    gpus: int  # the booking's GPUs on the kernel's host
    end: datetime
    indexes: tuple[int, ...] = ()  # their indexes there (the engine's own, e.g. Slurm's IDX)


class KernelChannels:
    """The channels of one reservation kernel on its host: a process whose stdin and output
    are ours, Unix-socket forwards from this machine to the host, and commands as the user."""

    lost: str | None = None  # why the channels are gone, once they are
    on_lost: Callable[[str], Awaitable[None]] | None = None  # told at once

    async def start(self, line: str) -> Session:
        """Start `line` (a shell command line) as the user, its stderr merged into stdout."""
        raise NotImplementedError

    async def forward(self, local: str, remote: str) -> None:
        """Make the Unix socket path `local` here reach `remote` on the host."""
        raise NotImplementedError

    async def unforward(self) -> None:
        """End every forward."""

    async def run(self, command: str, timeout: float) -> str | None:
        """Run `command` as the user (a signal, a clean-up); why it could not, or None."""
        raise NotImplementedError

    def closed(self) -> bool:
        """Whether nothing more can be done through these channels."""
        raise NotImplementedError

    async def close(self) -> None:
        """Let go of the channels (the connection may stay, for others)."""


class HostBackend:
    """Everything gpuhive does on hosts of one kind. Subclasses set the capabilities below."""

    name: ClassVar[str] = ""
    # The kernels and tasks run on this machine, as children of this server (kernels then
    # reach their sockets directly, no forwards).
    runs_here: ClassVar[bool] = False
    # A task starts from an empty environment plus its own (else from the host's login one).
    clean_start: ClassVar[bool] = False
    # Connections need the hive's SSH key and trusted host keys.
    uses_ssh_keys: ClassVar[bool] = False
    # A host of this kind needs an address (else it is this machine).
    needs_address: ClassVar[bool] = True
    # The host's sample comes from `sample` (an engine's view), not from the probe command.
    samples_itself: ClassVar[bool] = False
    # gpuhive's own queue may start jobs here (else the host's engine runs its own queue).
    queues_here: ClassVar[bool] = True
    # The engine gives a kernel its GPUs itself (Slurm sets the vendor's variable in the step):
    # gpuhive adds no pinning variable of its own.
    pins_devices: ClassVar[bool] = False
    # The host's task runner's scripts run through `task_run` (a batch system's clients on
    # the submit host), not `run` on the host itself.
    submits_tasks: ClassVar[bool] = False
    # Errors of this backend that mean "the host could not be reached or the command was cut".
    failures: ClassVar[tuple[type[BaseException], ...]] = (OSError, TimeoutError, EOFError)

    def __init__(self, settings: SshSettings, me: str) -> None:
        self.settings = settings
        self.me = me  # this server's own account

    async def run(
        self, decl: HostDecl, command: str, user: str, timeout: float, stdin: str | None
    ) -> CommandResult:
        """Run the shell command line `command` as `user`; HostUnavailable when it cannot."""
        raise NotImplementedError

    async def task_run(
        self, decl: HostDecl, command: str, user: str, timeout: float, stdin: str | None
    ) -> CommandResult:
        """Run a task runner's script as `user` where the backend's tasks are submitted from
        (only for a backend that `submits_tasks`)."""
        raise NotImplementedError

    async def start_loop(
        self, decl: HostDecl, command: str, user: str, slot: asyncio.Semaphore
    ) -> Loop:
        """Start a long-lived request/answer `command` as `user` (see `loops`); `slot` is the
        host's share of sessions, for a backend whose loops hold one."""
        raise NotImplementedError

    def loop_failed(
        self, decl: HostDecl, user: str, error: BaseException, limit: float, started: bool
    ) -> str:
        """Drop what `error` broke and say, for people, why a loop failed."""
        return f"the command on {decl.name} failed: {error}"

    async def open_channels(
        self, decl: HostDecl, user: str, booking: KernelBooking | None = None
    ) -> KernelChannels:
        """The channels of a new reservation kernel of `user` on `decl` (on `booking`)."""
        raise HostUnavailable(decl.name, f"the {self.name} backend has no kernel channels")

    async def sample(self, decl: HostDecl, timeout: float) -> HostSample:
        """The host's sample without the probe (`samples_itself`); HostUnavailable if none."""
        raise HostUnavailable(decl.name, f"the {self.name} backend samples through the probe")

    async def confined(self, decl: HostDecl, pids: list[int]) -> dict[int, str]:
        """Those of `pids` that an engine's job confines to its own devices, each with its job
        in words ('Slurm job 12'): protection reports them rather than signals them."""
        return {}

    def reservations(self, decl: HostDecl) -> tuple[str, ReservationEngine] | None:
        """(the host's name there, the engine) when an engine mirrors bookings on the host."""
        return None

    def runner(self, decl: HostDecl) -> TaskRunner:
        """How tasks start, are followed and stop on the host (`hosts/runners/`)."""
        return DEFAULT_RUNNER

    def engine(self, decl: HostDecl) -> Engine | None:
        """The container engine configured for the host (None: containers are refused)."""
        return engine_of(decl)

    @classmethod
    def where(cls, decl: HostDecl, user: str) -> str:
        """How gpuhive reaches the host, in words."""
        return f"{decl.name} ({cls.name}), as {user}"

    @classmethod
    def attach_hint(cls, decl: HostDecl, account: str, argv: list[str]) -> list[str]:
        """The command line that runs `argv` (a terminal's command) as `account` there."""
        return argv

    async def forget(self, host: str) -> None:
        """Drop what is kept for `host` (its entry changed or went)."""

    async def close(self) -> None:
        """Drop everything kept."""


def last_words(partial: str | bytes | None) -> str:
    """The last words a command said before it ended, for a reason shown to people."""
    raw = partial or ""
    text = (raw if isinstance(raw, str) else bytes(raw).decode(errors="replace")).strip()
    return text[-300:] if text else "it ended without a word"


_registered: dict[str, type[HostBackend]] = {}


def register(name: str, backend: type[HostBackend]) -> None:
    """Make `backend` the backend of transport `name` in this process (tests, sites' code)."""
    _registered[name] = backend


def unregister(name: str) -> None:
    """Forget a backend registered with `register`."""
    _registered.pop(name, None)


def _load(target: str) -> type[HostBackend]:
    module, _, attr = target.partition(":")
    found = getattr(importlib.import_module(module), attr)
    if not (isinstance(found, type) and issubclass(found, HostBackend)):
        raise TypeError(f"{target} is not a HostBackend")
    return found


def _installed() -> dict[str, str]:
    return {ep.name: ep.value for ep in entry_points(group=GROUP)}


def backend_names() -> tuple[str, ...]:
    """Every transport name a host may use here."""
    return tuple(dict.fromkeys([*BUILT_IN, *_installed(), *_registered]))


def backend_class(name: str) -> type[HostBackend]:
    """The backend of transport `name`; Invalid when none is known."""
    if name in _registered:
        return _registered[name]
    target = BUILT_IN.get(name) or _installed().get(name)
    if target is None:
        raise Invalid(f"transport must be one of {backend_names()}, not {name!r}.")
    return _load(target)


def backend_of(decl: HostDecl) -> type[HostBackend]:
    """The backend class of a configured host (for what it can do, without a pool)."""
    return backend_class(decl.transport)
