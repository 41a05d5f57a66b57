"""GpuHiveApp: the Jupyter server extension, its configuration and lifecycle."""

from __future__ import annotations

from typing import Any
from zoneinfo import ZoneInfo

from jupyter_server.extension.application import ExtensionApp
from traitlets import TraitError

from ..errors import Invalid
from ..hive import Hive
from ..hosts.file import HostsFileWatcher
from ..integrations.subscriptions import AVAILABILITY_SCHEMA, AVAILABILITY_SCHEMA_ID
from ..kernels.events import KERNEL_SCHEMA, KERNEL_SCHEMA_ID
from ..protection.handlers import EVENT_SCHEMA, EVENT_SCHEMA_ID, HandlerConfigError
from .api.idempotency import answers_stored
from .settings import GpuHiveSettings

__all__ = ["GpuHiveApp", "GpuHiveSettings"]


class GpuHiveApp(ExtensionApp, GpuHiveSettings):
    """Exclusive GPU reservations, monitoring and jobs for shared GPU servers."""

    name = "gpuhive"
    description = __doc__
    extension_url = "/gpuhive/api/me"
    load_other_extensions = True
    hive: Hive | None = None
    _watcher: HostsFileWatcher | None = None

    def _link_jupyter_server_extension(self, serverapp: Any) -> None:
        super()._link_jupyter_server_extension(serverapp)
        from .kernel_manager import configure

        configure(serverapp)  # gpuhive's kernel manager and authorizer classes
        if self.kernel_specs:  # before the server builds its managers
            from .kernelspecs import mix

            mix(serverapp)

    def initialize_settings(self) -> None:
        self.settings["gpuhive_note"] = self.sidebar_note
        if self.service_url:
            self.settings["gpuhive_service_url"] = self.service_url
            self.log.info("gpuhive: client mode, service %s", self.service_url)
            return
        logger = self.serverapp.event_logger if self.serverapp is not None else None
        publish = None
        if logger is not None:
            logger.register_event_schema(EVENT_SCHEMA)

            def publish(data: dict[str, Any]) -> None:
                logger.emit(schema_id=EVENT_SCHEMA_ID, data=data)

        try:
            settings = self.settings_for_hive()
        except (HandlerConfigError, Invalid) as error:
            raise TraitError(f"gpuhive configuration: {error}") from None
        self.hive = Hive(settings, publish=publish).open()
        if logger is not None:
            logger.register_event_schema(AVAILABILITY_SCHEMA)

            def publish_availability(data: dict[str, Any]) -> None:
                logger.emit(schema_id=AVAILABILITY_SCHEMA_ID, data=data)

            self.hive.integrations.publish_lab = publish_availability
            logger.register_event_schema(KERNEL_SCHEMA)

            def publish_kernel(data: dict[str, Any]) -> None:
                logger.emit(schema_id=KERNEL_SCHEMA_ID, data=data)

            self.hive.kernel_life.publish = publish_kernel
        self.settings["gpuhive"] = self.hive
        from .api.admission import SETTING as ADMISSION

        self.settings[ADMISSION] = self.intake()  # requests in flight, their deadline
        from .kernelspecs import attach

        attach(self.serverapp, self.hive)
        self.log.info(
            "gpuhive: store %s, %d hosts",
            self.hive.settings.db_url.split(":")[0].split("+")[0],
            len(settings.hosts),
        )
        self._watcher = self.watch_hosts_file(self.hive)

    def initialize_handlers(self) -> None:
        from .api import PREFIX, ROUTES
        from .api.proxy import proxy_routes
        from .kernel_guard import SessionsHandler

        self.handlers.extend(proxy_routes(PREFIX) if self.service_url else ROUTES)
        # a kernel start's refusal answered with its status in api/sessions (kernel_guard)
        self.handlers.append((SessionsHandler.ROUTE, SessionsHandler))

    async def _start_jupyter_server_extension(self, serverapp: Any) -> None:
        # Kernels find this server through GPUHIVE_URL and a gpuhive-only token bound to the
        # user who started them; the server's own token never goes into os.environ or a
        # kernel (see kernel_tokens). In client mode kernels use their Hub token instead.
        if self.hive is not None:
            from .api.base import HiveHandler
            from .kernel_guard import install as guard_kernels
            from .kernel_tokens import SETTING, LaunchTokens

            launch = LaunchTokens(serverapp, HiveHandler.gpuhive_user)
            serverapp.web_app.settings[SETTING] = launch.tokens
            if hasattr(serverapp.kernel_manager, "gpuhive_tokens"):
                serverapp.kernel_manager.gpuhive_tokens = launch
            guard_kernels(serverapp, self.hive, HiveHandler.gpuhive_user)
            await self.hive.start()
            if self._watcher is not None:
                self._watcher.start()
            from .heap import freeze_startup_heap

            freeze_startup_heap()
        elif self.service_url:  # team mode: reservation kernels through the service
            from .client_specs import attach as list_specs
            from .service_link import install as link_service

            link = link_service(serverapp, self.service_url)
            list_specs(serverapp, link, ZoneInfo(self.site_timezone))

    async def stop_extension(self) -> None:
        if self._watcher is not None:
            await self._watcher.stop()
        if self.hive is not None:
            await answers_stored()  # Idempotency-Key answers that went out, not yet stored
            await self.hive.stop()
            self.hive.close()
            self.hive = None


main = launch_new_instance = GpuHiveApp.launch_instance
