"""The REST API under {base_url}gpuhive/api/: one route table."""

from __future__ import annotations

from typing import Any

from ...store.schema import ID_MAX
from . import handlers as h
from . import integrations as i
from .base import HiveHandler, HiveLogic

PREFIX = "/gpuhive/api"

# (path below PREFIX, handler); parameters in braces are PATH_PARAMETERS. The OpenAPI
# document (openapi.py) is generated from this table and each method's @operation.
ENDPOINTS: list[tuple[str, type[h.HiveLogic]]] = [
    ("/me", h.MeHandler),
    ("/me/ssh", h.SshHandler),
    ("/hosts", h.HostsHandler),
    ("/metrics", h.MetricsHandler),
    ("/usage", h.UsageHandler),
    ("/violations", h.ViolationsHandler),
    ("/reservations", h.ReservationsHandler),
    ("/reservations/{id}", h.ReservationHandler),
    ("/reservations/{id}/usage", h.ReservationUsageHandler),
    ("/overview", h.OverviewHandler),
    ("/rules", h.RulesHandler),
    ("/rules/coverage", h.CoverageHandler),
    ("/rules/{id}", h.RuleHandler),
    ("/templates", h.TemplatesHandler),
    ("/jobs", h.JobsHandler),
    ("/jobs/preview", h.JobPreviewHandler),
    ("/queue", h.QueueHandler),
    ("/jobs/{id}", h.JobHandler),
    ("/jobs/{id}/start", h.JobStartHandler),
    ("/jobs/{id}/stop", h.JobStopHandler),
    ("/jobs/{id}/enqueue", h.JobEnqueueHandler),
    ("/jobs/{id}/dequeue", h.JobDequeueHandler),
    ("/jobs/{id}/log", h.JobLogHandler),
    ("/feeds", i.FeedsHandler),
    ("/feeds/personal", i.PersonalFeedHandler),
    ("/feeds/site", i.SiteFeedsHandler),
    ("/feeds/site/{id}", i.SiteFeedHandler),
    ("/calendar/{token}.ics", i.CalendarHandler),
    ("/webhooks", i.WebhooksHandler),
    ("/webhooks/{id}", i.WebhookHandler),
    ("/webhooks/{id}/deliveries", i.DeliveriesHandler),
    ("/subscriptions", i.SubscriptionsHandler),
    ("/subscriptions/{id}", i.SubscriptionHandler),
    ("/subscriptions/{id}/book", i.SubscriptionBookHandler),
    ("/digest", i.DigestHandler),
    ("/openapi.json", h.OpenAPIHandler),
]

# Paths that take no Jupyter credentials: a feed's token in its URL is its only credential.
PUBLIC_PATHS = frozenset({"/calendar/{token}.ics"})


# Each parameter named in braces in a path: what the route matches, and what the OpenAPI
# document promises (ids that are not ASCII digits up to ID_MAX answer 404, see id_arg).
PATH_PARAMETERS: dict[str, tuple[str, dict[str, Any]]] = {
    "id": ("([^/]+)", {"type": "integer", "minimum": 0, "maximum": ID_MAX}),
    "token": ("([^/]*)", {"type": "string", "pattern": "^[^/.]+$"}),
}


def _pattern(prefix: str, path: str) -> str:
    path = path.replace(".", r"\.")
    for name, (pattern, _) in PATH_PARAMETERS.items():
        path = path.replace("{" + name + "}", pattern)
    return prefix + path + "/?"


def routes(base: type[HiveLogic], prefix: str = PREFIX) -> list[tuple[str, Any]]:
    """The route table with every endpoint mixed onto a deployment's base handler."""
    return [
        (_pattern(prefix, path), type(logic.__name__, (logic, base), {}))
        for path, logic in ENDPOINTS
    ]


ROUTES = routes(HiveHandler)
