"""REST handlers of the hosts' live state (shared encoded answer) and their metrics."""

from __future__ import annotations

import hashlib
from typing import Any

from jupyter_server.auth.decorator import authorized
from tornado import web

from ...model.authority import READ
from ...protection.marks import mark_violations
from .base import HiveLogic, dumps
from .operations import operation
from .schemas import queries


class HostsHandler(HiveLogic):
    auth_resource = "gpuhive:hosts"

    @web.authenticated
    @authorized(READ)
    @operation(
        "Live state of every host and GPU: metrics, processes with owners, who holds each GPU "
        "now and next, and its 'state' (down, failed, drained, reserved, busy, unknown or free: "
        "a failed or drained GPU is never free) with its 'health'; on a host that is down, "
        "'advice' (the reason and the fix); with no hosts, 'setup' (the first steps)"
    )
    async def get(self) -> None:
        reply = await self.hive.monitor.report()
        public = self.hive.settings.privacy.public_violations
        ongoing = await self.hive.protection.open_now(self.who, public)  # as on every replica
        shared: HostsBody = self.settings.setdefault(HOSTS_BODY, HostsBody())
        body, self._etag = shared.get(reply, ongoing, self.settings.get("gpuhive_note") or None)
        self.reply_encoded(body)

    _etag: str | None = None

    def compute_etag(self) -> str | None:
        return self._etag  # the shared answer's, computed once with it


HOSTS_BODY = "gpuhive_hosts_body"


class HostsBody:
    """The last `GET hosts` answer, encoded, with its ETag: every poll between two changes of
    the report (a sweep, a holder change) that sees the same violations (most see none)
    shares it. Copying every host and process to mark violations, encoding about 100 KB and
    hashing it for the ETag took each poll ~1 ms of the event loop, and polls are a third
    of a site's requests."""

    def __init__(self) -> None:
        self._last: tuple[Any, ...] = ()  # (report, ongoing, note, body, etag)

    def get(
        self, report: dict[str, Any], ongoing: list[dict[str, Any]], note: str | None
    ) -> tuple[bytes, str]:
        last = self._last
        if last and last[0] is report and last[1] == ongoing and last[2] == note:
            return last[3], last[4]
        hosts = mark_violations(report["hosts"], ongoing)
        body = dumps({**report, "hosts": hosts, "note": note})
        etag = f'"{hashlib.sha1(body, usedforsecurity=False).hexdigest()}"'  # as tornado's
        self._last = (report, ongoing, note, body, etag)
        return body, etag


class MetricsHandler(HiveLogic):
    auth_resource = "gpuhive:hosts"

    @web.authenticated
    @authorized(READ)
    @operation(
        "Time series per host and GPU (points newer than 'since')", query=queries.MetricsQuery
    )
    async def get(self) -> None:
        q = self.query(queries.MetricsQuery)
        self.reply(self.hive.monitor.metrics(q.host, q.gpu, q.since))
