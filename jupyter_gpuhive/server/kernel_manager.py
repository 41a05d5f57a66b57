"""The server's kernel manager and authorizer classes, as gpuhive configures them.

`GpuHiveApp` calls `configure` when it is linked, before the server builds them: the
configured `ServerApp.kernel_manager_class` and `ServerApp.authorizer_class` (or the server's
defaults) become subclasses that mix in `GpuHiveKernelManager` and `KernelOwnerAuthorizer`.
Nothing of jupyter_server is replaced on its objects; once the Hive (or, in client mode, the
service link) exists, the app hands these classes their collaborators as attributes:

- `gpuhive_guard` (server/kernel_guard.py) checks the requester of each kernel action;
- `gpuhive_tokens` (server/kernel_tokens.py) gives each new kernel an environment without
  the server's secrets and a kernel token of its requester;
- `gpuhive_kernels` (the Hive's registry) and, in client mode, `gpuhive_service` and
  `gpuhive_provisioner`, which it hands each kernel's own manager as it makes it (the
  gpuhive provisioner's parent: where it finds them, and nowhere else).

Each kernel's own manager gets, by configuration, a `restarter_class` mixed with
`kernels.restarts.FinalEnds`: a kernel its provisioner marked ended for good is not
restarted (the configured restarter class, or jupyter_client's default, underneath).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from tornado.web import HTTPError
from traitlets.config import Config
from traitlets.utils.importstring import import_item

from ..errors import HiveError
from ..kernels.restarts import FinalEnds
from .kernel_guard import KernelOwnerAuthorizer


class GpuHiveKernelManager:
    """Mixed into the server's kernel manager class: the guard, kernel tokens, JSON errors."""

    gpuhive_guard: Any = None  # a KernelGuard (a server with its own hosts)
    gpuhive_tokens: Any = None  # a kernel_tokens.LaunchTokens (idem)
    gpuhive_kernels: Any = None  # the Hive's KernelRegistry (idem)
    gpuhive_service: Any = None  # a ServiceLink (client mode)
    gpuhive_provisioner: Any = None  # what the gpuhive provisioner becomes (client mode)

    def pre_start_kernel(self, kernel_name: str | None, kwargs: Any) -> tuple[Any, str, str]:
        """Each kernel's own manager is handed the registry, and in client mode the service
        link and the provisioner, as it is made: its gpuhive provisioner finds them there
        (kernels.provisioner, kernels.team.find_link), nowhere else."""
        made: tuple[Any, str, str] = super().pre_start_kernel(kernel_name, kwargs)  # type: ignore[misc]
        own = made[0]
        own.gpuhive_kernels = self.gpuhive_kernels
        own.gpuhive_service = self.gpuhive_service
        own.gpuhive_provisioner = self.gpuhive_provisioner
        return made

    def _check(self, kernel_id: str | None, action: str) -> None:
        if self.gpuhive_guard is not None:
            self.gpuhive_guard.check(kernel_id, action)

    async def start_kernel(self, *args: Any, **kwargs: Any) -> str:
        """Start (or attach to) a kernel; a new one gets a kernel token, not the secrets."""
        kernel_id = kwargs.get("kernel_id")
        self._check(kernel_id, "attach to")
        tokens = self.gpuhive_tokens
        token = None
        if tokens is not None and not (kernel_id is not None and kernel_id in self):  # type: ignore[operator]
            kwargs["env"], token = tokens.launch_env(kwargs.get("env"))
        try:
            started: str = await super().start_kernel(*args, **kwargs)  # type: ignore[misc]
        except HiveError as error:
            if token:
                tokens.tokens.revoke(token)
            raise _answer(error) from None
        except BaseException:
            if token:
                tokens.tokens.revoke(token)
            raise
        if token:
            tokens.tokens.bind(token, started)
        return started

    async def restart_kernel(self, kernel_id: str, *args: Any, **kwargs: Any) -> Any:
        """Restart a kernel its requester may restart."""
        self._check(kernel_id, "restart")
        try:
            return await _result(super().restart_kernel(kernel_id, *args, **kwargs))  # type: ignore[misc]
        except HiveError as error:
            raise _answer(error) from None

    async def interrupt_kernel(self, kernel_id: str, *args: Any, **kwargs: Any) -> Any:
        """Interrupt a kernel its requester may interrupt."""
        self._check(kernel_id, "interrupt")
        try:
            return await _result(super().interrupt_kernel(kernel_id, *args, **kwargs))  # type: ignore[misc]
        except HiveError as error:
            raise _answer(error) from None

    async def shutdown_kernel(self, kernel_id: str, *args: Any, **kwargs: Any) -> Any:
        """Shut down a kernel its requester may shut down; its kernel token goes with it."""
        self._check(kernel_id, "shut down")
        # (kernel_id, now=False, restart=False): a restart keeps the kernel and its token.
        restart = kwargs.get("restart", args[1] if len(args) > 1 else False)
        try:
            await self._started(kernel_id)
            return await _result(super().shutdown_kernel(kernel_id, *args, **kwargs))  # type: ignore[misc]
        except HiveError as error:
            raise _answer(error) from None
        finally:
            if self.gpuhive_tokens is not None and not restart:
                self.gpuhive_tokens.tokens.revoke_kernel(kernel_id)

    async def _started(self, kernel_id: str) -> None:
        """Wait for a start of the kernel that runs outside any request: the auto-restart of
        a kernel whose process died. jupyter_client's restarter re-arms the kernel manager's
        `ready` for the restart without the multi-kernel manager knowing (it waits only for
        the starts it made), and its shutdown then reads that pending future's exception:
        InvalidStateError, a 500. A reservation kernel's restart takes seconds (the launch,
        then the wait for its kernel_info), so a shutdown meets one often. How the start
        ended (`ready`'s exception) is the shutdown's to handle, as for any start."""
        if kernel_id not in self:  # type: ignore[operator]
            return  # the shutdown's own 404
        km = self.get_kernel(kernel_id)  # type: ignore[attr-defined]
        ready = getattr(km, "ready", None)  # (as jupyter_server: a manager may have none)
        # A restart's shutdown, then its start: one future each.
        while ready is not None and not ready.done():
            await asyncio.wait(
                [ready if isinstance(ready, asyncio.Future) else asyncio.wrap_future(ready)]
            )
            ready = km.ready

    def update_env(self, *, kernel_id: str, env: dict[str, str]) -> None:
        """A renamed session's environment for the next restart, without the secrets."""
        if self.gpuhive_tokens is not None:
            env = self.gpuhive_tokens.restart_env(env)
        super().update_env(kernel_id=kernel_id, env=env)  # type: ignore[misc]


async def _result(value: Any) -> Any:
    return await value if hasattr(value, "__await__") else value


def _answer(error: HiveError) -> HTTPError:
    """The HTTP answer to a domain error (api/sessions: kernel_guard.SessionsHandler)."""
    return HTTPError(error.status, error.message)


def configured(serverapp: Any, name: str) -> type | None:
    """The class configured for the server's trait `name` (None: its default)."""
    if not serverapp.trait_has_value(name):
        return None
    value = getattr(serverapp, name)
    return import_item(value) if isinstance(value, str) else value  # type: ignore[no-any-return]


def _mixed(mixin: type, base: type) -> type:
    if issubclass(base, mixin):
        return base
    meta: Any = type(base)  # traitlets' metaclass: the mixed class's traits are set up
    return meta(f"GpuHive{base.__name__}", (mixin, base), {"__module__": __name__})


def configure(serverapp: Any) -> None:
    """Make the server build gpuhive's kernel manager and authorizer (before it builds them).

    Runs before the server reads its gateway settings, so a class's default is not asked
    for: a configured class is mixed, else jupyter_server's default (the gateway's manager
    behind a kernel gateway, where no kernel is a reservation kernel).
    """
    from jupyter_server.auth.authorizer import AllowAllAuthorizer
    from jupyter_server.services.kernels.kernelmanager import AsyncMappingKernelManager

    authorizer = configured(serverapp, "authorizer_class") or AllowAllAuthorizer
    settings = {"authorizer_class": _mixed(KernelOwnerAuthorizer, authorizer)}
    manager = configured(serverapp, "kernel_manager_class")
    if manager is None:
        manager = AsyncMappingKernelManager
        if behind_gateway(serverapp):
            manager = import_item("jupyter_server.gateway.managers.GatewayMappingKernelManager")
    settings["kernel_manager_class"] = _mixed(GpuHiveKernelManager, manager)
    set_classes(serverapp, settings)
    serverapp.update_config(restarter_config(serverapp.config))


# Where a site may configure each kernel's restarter class, most specific first.
RESTARTER_SECTIONS = ("ServerKernelManager", "AsyncIOLoopKernelManager")


def restarter_config(config: Config) -> Config:
    """Configuration that gives each kernel's manager a restarter class mixed with
    `FinalEnds`: the one the site configured (in its section), else jupyter_client's."""
    from jupyter_client.ioloop.restarter import AsyncIOLoopKernelRestarter

    for section in RESTARTER_SECTIONS:
        value = dict.get(config, section, {}).get("restarter_class")
        if value is not None:
            base = import_item(value) if isinstance(value, str) else value
            return Config({section: {"restarter_class": _mixed(FinalEnds, base)}})
    default = _mixed(FinalEnds, AsyncIOLoopKernelRestarter)
    return Config({"AsyncIOLoopKernelManager": {"restarter_class": default}})


def set_classes(serverapp: Any, classes: dict[str, type]) -> None:
    """Set ServerApp traits as configuration (a later extension's link re-applies the
    server's configuration: a plain assignment would be undone)."""
    serverapp.update_config(Config({"ServerApp": classes}))


def behind_gateway(serverapp: Any) -> bool:
    """Whether the server is configured to run its kernels on a kernel gateway."""
    return bool(os.environ.get("JUPYTER_GATEWAY_URL") or serverapp.config.GatewayClient.get("url"))
