"""Team mode: gpuhive as one JupyterHub-managed service for a whole Hub.

Run by the Hub (`c.JupyterHub.services = [{"name": "gpuhive", "url": "http://127.0.0.1:10101",
"command": ["python3", "-m", "jupyter_gpuhive.hub", "--config", "/etc/gpuhive/config.py"]}]`).
Every request is authenticated by the Hub: the token names the user, their groups and
scopes; admin rights come from the `custom:gpuhive:admin` scope or `admin_groups`. Only
this process holds the SSH key and the database credentials. Users' own servers reach it
through the extension in client mode (`c.GpuHiveApp.service_url`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import json
import logging
import os
import signal
from typing import Any
from urllib.parse import urlsplit

from jupyterhub.services.auth import HubAuth, HubAuthenticated
from tornado import web
from tornado.httpserver import HTTPServer
from traitlets import Float, Int, Unicode
from traitlets.config import Application

from ..errors import Forbidden, HiveError, Unauthorized, Unconfirmed
from ..hive import Hive
from ..hosts.file import HostsFileWatcher
from ..kernels.broker import KernelBroker
from ..model import Identity
from . import public_url
from .api import routes
from .api.admission import SETTING as ADMISSION
from .api.base import HiveLogic
from .api.idempotency import answers_stored
from .app import GpuHiveApp, GpuHiveSettings
from .heap import freeze_startup_heap
from .heartbeat import Heartbeat
from .hub_answers import SETTING as HUB_ANSWERS
from .hub_answers import Answer, HubAnswers
from .hub_kernel_tokens import SETTING as KERNEL_TOKENS
from .hub_kernel_tokens import Held, ServiceKernelTokens
from .hub_scopes import ADMIN_SCOPE, HubScopes, groups_administered
from .kernel_tokens import PREFIX as KERNEL_TOKEN_PREFIX

log = logging.getLogger(__name__)
# Reads may use the Hub's answer about a token for a few seconds (token_cache_seconds);
# every other request changes something and asks the Hub afresh (writes that change only
# the database, `confirms_identity_late`, meanwhile run on that answer: `_confirm`).
_READS = {"GET", "HEAD", "OPTIONS"}
USE_SCOPE_SETTING = "gpuhive_use_scope"


class HubHandler(HubAuthenticated, HiveLogic):
    """Base of the service's handlers: the Hub says who is asking, without blocking."""

    _hub_user: dict[str, Any] | None = None
    # A write running on the Hub's last answer while the Hub is asked afresh (`_confirm`),
    # and its finish waiting for that
    _confirming: asyncio.Future[str] | None = None
    _finishing: asyncio.Future[None] | None = None
    hub_token = ""  # the Hub token the request is asked as (a kernel token's: its server's)
    kernel_token: Held | None = None  # the request came with a reservation kernel's token

    async def prepare(self) -> None:
        self.admit()  # the bound on requests in flight: before the Hub is asked anything
        auth: HubAuth = self.hub_auth
        token = auth.get_token(self, in_cookie=False)
        if not token:
            raise Unauthorized("Send your JupyterHub token: Authorization: token <token>.")
        if token.startswith(KERNEL_TOKEN_PREFIX):
            tokens: ServiceKernelTokens = self.settings[KERNEL_TOKENS]
            self.kernel_token = tokens.resolve(token)
            if self.kernel_token is None:
                raise Unauthorized("This kernel token is void: its kernel has ended.")
            token = self.kernel_token.hub_token  # asked of the Hub as its owner's server
        answers: HubAnswers = self.settings[HUB_ANSWERS]
        known, answer = answers.get(token)
        remembered = self._remembered(answer)
        if self.request.method in _READS:
            model = answer if known else await _ask(auth, answers, token)
        elif remembered is not None:
            # Asked afresh while the request runs on the Hub's last answer: no change
            # commits, and no answer goes out, before the Hub confirmed it (the gate).
            model = remembered
            self._confirming = asyncio.ensure_future(
                self._confirm(auth, answers, token, remembered)
            )
            gate: concurrent.futures.Future[bool] = concurrent.futures.Future()
            self.errand.gate = gate  # type: ignore[union-attr]  # (_remembered: an errand)
            self._confirming.add_done_callback(
                lambda done: gate.set_result(not done.cancelled() and done.result() == _SAME)
            )
        else:
            # Every write asks the Hub now, so a revoked token or a removed admin stops
            # working at once; the answer also replaces the cached one that reads use.
            model = await _ask(auth, answers, token)
        if model is None:
            raise Unauthorized("The Hub does not know this token (expired or revoked?).")
        if model.get("kind") != "user":
            raise Forbidden(f"{model.get('kind')} {model.get('name')} is not a user.")
        if self.kernel_token is not None and model.get("name") != self.kernel_token.owner:
            raise Unauthorized("This kernel token is void: its owner's server token changed.")
        if not auth.check_scopes(auth.access_scopes, model):
            needed = ", ".join(sorted(auth.access_scopes))
            raise Forbidden(f"This token does not grant {needed}.")
        self._hub_user, self.hub_token = model, token
        await self.claim_key()

    def get_current_user(self) -> Any:
        return self._hub_user

    def _remembered(self, answer: Answer) -> dict[str, Any] | None:
        """The Hub's last answer about the token (younger than `token_cache_seconds`) where
        this write may run on it while the Hub is asked afresh; None: ask first."""
        if (
            self.request.method in _READS
            or not self.confirms_identity_late
            or self.kernel_token is not None
            or self.errand is None
        ):
            return None
        if isinstance(answer, dict) and answer.get("kind") == "user":
            return answer
        return None

    async def _confirm(
        self, auth: HubAuth, answers: HubAnswers, token: str, remembered: dict[str, Any]
    ) -> str:
        """Ask the Hub afresh: _SAME, or why the request may not stand (its answer replaces
        the remembered one, as every write's does)."""
        try:
            fresh = await _ask(auth, answers, token)
        except Exception as error:  # the Hub is unreachable or answered with an error
            log.warning("gpuhive: the Hub could not confirm a token: %s", error)
            return _UNREACHABLE
        if fresh is None:
            return _UNKNOWN
        return _SAME if _same_rights(fresh, remembered) else _CHANGED

    def finish(self, chunk: Any = None, **kwargs: Any) -> Any:
        """Finish; a request that ran on a remembered identity only once the Hub confirmed
        it, otherwise with the refusal a fresh request would get (its work rolled back)."""
        if self._finishing is not None:  # tornado's own finish() while it waits
            return self._finishing
        confirming = self._confirming
        if confirming is None:
            return super().finish(chunk, **kwargs)
        self._finishing = asyncio.ensure_future(self._finish_confirmed(confirming, chunk, kwargs))
        return self._finishing

    async def _finish_confirmed(
        self, confirming: asyncio.Future[str], chunk: Any, kwargs: dict[str, Any]
    ) -> None:
        verdict = await asyncio.shield(confirming)
        self._confirming = None
        if verdict == _SAME:
            done = super().finish(chunk, **kwargs)
        else:
            refusal = _refusal(verdict)
            self._key = None  # nothing committed (the gate): the key was not taken
            self.clear()
            self.set_status(refusal.status)
            self.set_header("Content-Type", "application/json; charset=UTF-8")
            retry_after = getattr(refusal, "retry_after", None)
            if retry_after is not None:
                self.set_header("Retry-After", str(retry_after))
            done = super().finish(json.dumps({"message": refusal.message}), **kwargs)
        if inspect.isawaitable(done):
            await done

    def public_api_url(self) -> str:
        """The API as the Hub's proxy publishes it (server/public_url.py says how)."""
        request = self.request
        return public_url.service_url(request.headers, request.protocol, request.host) + "api/"

    def get_login_url(self) -> str:
        raise Unauthorized(
            "Send your JupyterHub token: Authorization: token <JUPYTERHUB_API_TOKEN>."
        )

    def check_xsrf_cookie(self) -> None:
        """Only token-authenticated requests are accepted: no cookies, no XSRF."""

    def requester(self) -> Identity:
        model = self._hub_user or {}
        # The Hub always sends a user's groups; a model without them would mean "unknown".
        groups = model.get("groups")
        known = None if groups is None else list(groups)
        base = self.hive.identities.identify(model["name"], known)
        scopes = model.get("scopes") or []
        admin = base.is_admin or ADMIN_SCOPE in scopes
        who = Identity(base.name, base.groups, admin, base.admin_hosts)
        return self.hive.bookings.authority.with_groups_administered(
            who, groups_administered(scopes)
        )

    def site_authorizer(self) -> HubScopes:
        """The Hub's scopes (`c.GpuHiveService.use_scope`): server/hub_scopes.py."""
        return HubScopes(self.settings.get(USE_SCOPE_SETTING, ""))

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        error = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(error, HiveError) or status_code == 405:  # 405: with its Allow header
            super().write_error(status_code, **kwargs)
            return
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        reason = getattr(error, "log_message", None) or self._reason
        self.finish({"message": reason if status_code < 500 else "Internal error (see logs)."})


_SAME, _CHANGED, _UNKNOWN, _UNREACHABLE = "same", "changed", "unknown", "unreachable"


def _same_rights(fresh: dict[str, Any], remembered: dict[str, Any]) -> bool:
    """Whether the Hub's fresh answer gives the rights the request ran with: the same user,
    groups and scopes (admin comes from a scope or a group)."""

    def rights(model: dict[str, Any]) -> tuple[Any, ...]:
        groups = model.get("groups")
        return (
            model.get("kind"),
            model.get("name"),
            None if groups is None else sorted(groups),
            sorted(model.get("scopes") or []),
        )

    return rights(fresh) == rights(remembered)


def _refusal(verdict: str) -> HiveError:
    """The answer to a request whose remembered identity the Hub did not confirm."""
    if verdict == _UNKNOWN:
        return Unauthorized("The Hub does not know this token (expired or revoked?).")
    if verdict == _CHANGED:
        return Unconfirmed(
            "Your rights changed at the Hub while this request ran; nothing was changed. "
            "Send it again."
        )
    return Unconfirmed("The Hub could not confirm your token; nothing was changed. Retry.")


async def _ask(auth: HubAuth, answers: HubAnswers, token: str) -> Answer:
    """Ask the Hub afresh about `token` (HubAuth's public call, past its cache); the answer
    replaces the remembered one."""
    model: Answer = await auth.user_for_token(token, use_cache=False, sync=False)
    answers.put(token, model)
    return model


def _log_event(data: dict[str, Any]) -> None:
    log.info("gpuhive event: %s", data.get("message") or data)


class HealthHandler(web.RequestHandler):
    def get(self) -> None:
        hive: Hive = self.settings["gpuhive"]
        self.finish({"ok": True, "leader": hive.leadership.leader})


class GpuHiveService(Application):
    """The gpuhive JupyterHub service."""

    name = "gpuhive-service"
    config_file = Unicode("", help="Config file with c.GpuHiveApp.… settings").tag(config=True)
    token_cache_seconds = Float(
        60.0,
        help="How many seconds a read (GET) may use the Hub's last answer about its token "
        "(JupyterHub's own services use 300). Every other request (POST, PUT, PATCH, DELETE) "
        "asks the Hub afresh, and its answer replaces the one reads use. Each replica keeps "
        "its own answers: with a few seconds, most reads of a site with many users ask the "
        "Hub (docs/how-to/replicas.md).",
    ).tag(config=True)
    health_port = Int(
        0,
        help="Port of a health check served from a thread of its own, on the service URL's "
        "address (GET, any path: ok, leader, in_flight, refused, clients_gone, loop_lag_s). It "
        "answers while the event loop is busy, and 503 when the loop is more than "
        "health_max_lag seconds behind. For a load balancer (haproxy: `check port N`). 0: "
        "none; PREFIX/health on the service's own port answers in any case, from the loop.",
    ).tag(config=True)
    use_scope = Unicode(
        "",
        help="A Hub scope every user of gpuhive must hold, e.g. 'custom:gpuhive:use' (define it "
        "in c.JupyterHub.custom_scopes and grant it through a role): without it a request is "
        "refused (403). An admin scope (custom:gpuhive:admin, filtered or not) includes it. "
        "Empty: every Hub user the service admits may use gpuhive.",
    ).tag(config=True)
    health_max_lag = Float(
        10.0,
        help="Seconds the event loop may fall behind before the health port answers 503.",
    ).tag(config=True)
    aliases = {"config": "GpuHiveService.config_file"}
    classes = [GpuHiveApp]

    def initialize(self, argv: Any = None) -> None:
        super().initialize(argv)
        if self.config_file:
            self.load_config_file(self.config_file)

    def make_app(self) -> tuple[web.Application, Hive, str]:
        configured = GpuHiveSettings(config=self.config)
        settings = configured.settings_for_hive()
        # The service has no Jupyter event bus: 'event' violation handlers log instead.
        hive = Hive(settings, publish=_log_event).open()
        # Users' servers (client mode) get their reservation kernels through the service.
        broker = KernelBroker(hive.kernels, configured.kernel_socket_dir, configured.kernel_lease)
        prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/services/gpuhive/")
        auth = HubAuth()  # asked past its cache: the answers are kept in HubAnswers
        root = prefix.rstrip("/") + "/api"
        api = routes(HubHandler, prefix=root)
        # The same API under PREFIX/gpuhive/api: HiveClient (the magics) appends gpuhive/api/
        # to GPUHIVE_URL, which a reservation kernel gets as the service's public URL.
        api += [(prefix.rstrip("/") + "/gpuhive/api" + p[len(root) :], h) for p, h in api]
        app = web.Application(
            [*api, (prefix.rstrip("/") + "/health", HealthHandler)],
            gpuhive=hive,
            gpuhive_broker=broker,
            gpuhive_hosts_watcher=configured.watch_hosts_file(hive),
            hub_auth=auth,
        )
        app.settings[ADMISSION] = configured.intake()  # requests in flight, their deadline
        app.settings[KERNEL_TOKENS] = ServiceKernelTokens(hive.kernels)
        app.settings[HUB_ANSWERS] = HubAnswers(self.token_cache_seconds)
        app.settings[USE_SCOPE_SETTING] = self.use_scope
        for _, handler in api:
            handler.hub_auth = auth
        url = os.environ.get("JUPYTERHUB_SERVICE_URL", "http://127.0.0.1:10101")
        return app, hive, url

    def start(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        app, hive, url = self.make_app()
        where = urlsplit(url)
        server = HTTPServer(app, xheaders=True)
        server.listen(where.port or 80, where.hostname or "127.0.0.1")
        await hive.start()
        heartbeat = self.heartbeat(app, hive, where.hostname or "127.0.0.1")
        watcher: HostsFileWatcher | None = app.settings["gpuhive_hosts_watcher"]
        if watcher is not None:  # as in a Jupyter server: `jupyter gpuhive hosts add` works
            watcher.start()
        freeze_startup_heap()
        log.info("gpuhive service listening on %s", url)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        server.stop()
        await heartbeat.stop()
        if watcher is not None:
            await watcher.stop()
        await app.settings["gpuhive_broker"].close()
        await answers_stored()  # Idempotency-Key answers that went out, not yet stored
        await hive.stop()
        hive.close()

    def heartbeat(self, app: web.Application, hive: Hive, host: str) -> Heartbeat:
        """The loop's heartbeat, and the health port if one is configured."""
        admission = app.settings[ADMISSION]

        def facts() -> dict[str, Any]:
            return {
                "leader": hive.leadership.leader,
                "in_flight": admission.in_flight,
                "refused": admission.refused,  # for max_requests_in_flight, since the start
                "clients_gone": admission.gone,  # closed before their answer, since the start
            }

        heartbeat = Heartbeat(self.health_max_lag, facts)
        heartbeat.start()
        if self.health_port:
            port = heartbeat.serve(host, self.health_port)
            log.info("gpuhive health checks on http://%s:%d/", host, port)
        return heartbeat


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="[gpuhive %(levelname)s] %(message)s")
    service = GpuHiveService()
    service.initialize(argv)
    service.start()


if __name__ == "__main__":
    main()
