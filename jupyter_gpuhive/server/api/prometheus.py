"""GET prometheus: the Prometheus text exposition, for a scrape token or an admin.

Never open: with `metrics_token` set, a request carrying `Authorization: Bearer TOKEN` is
served without Jupyter or Hub credentials; otherwise the requester must be a gpuhive admin
(Jupyter token, or the Hub's in team mode). No token configured and no admin: 403 saying how.
"""

from __future__ import annotations

import hmac
import inspect
import re

from jupyter_server.auth.decorator import allow_unauthenticated
from prometheus_client import CONTENT_TYPE_LATEST

from ...errors import Forbidden, Unauthorized
from ...model.authority import READ
from .base import HiveLogic
from .operations import operation

METRICS = "gpuhive:metrics"  # without the scrape token: through the authorizer (admins)
_BEARER = re.compile(r"bearer\s+(\S+)", re.IGNORECASE)
NOT_CONFIGURED = (
    "Scraping needs a token: set c.GpuHiveApp.metrics_token = '<a long random string>' and send "
    "it as 'Authorization: Bearer <token>' (Prometheus: authorization: credentials: <token>); "
    "gpuhive admins may also scrape with their own token."
)
BEARER_HOWTO = (
    "Send the scrape token as 'Authorization: Bearer <c.GpuHiveApp.metrics_token>' "
    "(or an admin's token)."
)


class PrometheusHandler(HiveLogic):
    """The metrics of docs/reference/prometheus.md, built from the monitor's live state."""

    auth_resource = METRICS

    _scrape_token_ok = False
    admitted = False  # a scrape is answered beyond max_requests_in_flight: overload shows

    def _configured(self) -> str:
        return str(getattr(self.hive.settings, "metrics_token", "") or "")

    async def prepare(self) -> None:
        token = self._configured()
        found = _BEARER.fullmatch(self.request.headers.get("Authorization", "").strip())
        if token and found and hmac.compare_digest(found[1].encode(), token.encode()):
            self._scrape_token_ok = True
            return  # the scrape token alone: no Jupyter or Hub round trip
        try:
            result = super().prepare()
            if inspect.isawaitable(result):
                await result
        except Unauthorized:
            raise Unauthorized(NOT_CONFIGURED if not token else BEARER_HOWTO) from None

    def check_xsrf_cookie(self) -> None:
        """A GET by token; no cookies."""

    @allow_unauthenticated
    @operation(
        "Prometheus text exposition (version 0.0.4) of GPUs, slices, hosts, reservations, the "
        "queue, violations, sweep and API latency; for the scrape token (metrics_token, as "
        "'Authorization: Bearer') or an admin",
        errors=(401, 403),
        media="text/plain",
        public=True,
    )
    async def get(self) -> None:
        if not self._scrape_token_ok:
            if self.current_user is None or self._anonymous():
                if not self._configured():
                    raise Forbidden(NOT_CONFIGURED)
                raise Unauthorized(BEARER_HOWTO)
            try:  # the route's credential is the scrape token, or the authorizer's yes
                await self.authorizer.is_authorized(self, self.current_user, READ, METRICS)
            except Forbidden as refused:
                raise Forbidden(
                    f"{self.who.name} is not a gpuhive admin ({refused.message}) "
                    + (BEARER_HOWTO if self._configured() else NOT_CONFIGURED)
                ) from None
        body = await self.hive.run(self.hive.monitor.exposition.render)
        self.set_header("Content-Type", CONTENT_TYPE_LATEST)
        self.set_header("Cache-Control", "no-store")
        self.finish(body)
