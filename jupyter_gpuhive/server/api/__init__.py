"""The REST API under {base_url}gpuhive/api/: one route table, and its OpenAPI document."""

from __future__ import annotations

from typing import Any

from . import brokered as b
from . import fairshare as f
from . import finder as fi
from . import handlers as h
from . import health as he
from . import integrations as i
from . import kernels as k
from . import prometheus as pr
from .base import HiveHandler, HiveLogic
from .openapi import generate
from .operations import PATH_PARAMETERS, implemented, operation_of

PREFIX = "/gpuhive/api"

# (path below PREFIX, handler); parameters in braces are PATH_PARAMETERS. The OpenAPI
# document is generated from this table and each method's @operation (openapi.py).
ENDPOINTS: list[tuple[str, type[h.HiveLogic]]] = [
    ("/me", h.MeHandler),
    ("/me/ssh", h.SshHandler),
    ("/hosts", h.HostsHandler),
    ("/metrics", h.MetricsHandler),
    ("/prometheus", pr.PrometheusHandler),
    ("/health", he.HealthHandler),
    ("/health/drain", he.DrainHandler),
    ("/usage", h.UsageHandler),
    ("/usage/scores", f.ScoresHandler),
    ("/limits", f.LimitsHandler),
    ("/limits/tiers", f.TiersHandler),
    ("/reports/accounting", f.ReportHandler),
    ("/reports/accounting.csv", f.ReportCsvHandler),
    ("/violations", h.ViolationsHandler),
    ("/reservations", h.ReservationsHandler),
    ("/reservations/search", fi.SlotSearchHandler),
    ("/reservations/{id}", h.ReservationHandler),
    ("/reservations/{id}/usage", h.ReservationUsageHandler),
    ("/reservations/{id}/reclaim", h.ReclaimHandler),
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
    ("/kernels", k.KernelsHandler),
    ("/kernels/{kernel}", k.KernelHandler),
    ("/kernels/{kernel}/policy", k.KernelPolicyHandler),
    ("/kernels/{kernel}/launch", b.LaunchHandler),
    ("/kernels/{kernel}/process", b.ProcessHandler),
    ("/kernels/{kernel}/signal", b.SignalHandler),
    ("/kernels/{kernel}/cleanup", b.CleanupHandler),
    ("/openapi.json", h.OpenAPIHandler),
]

# Paths that take no Jupyter credentials (@operation(public=True)): a feed's token in its URL
# is its only credential.
PUBLIC_PATHS = frozenset(
    path
    for path, handler in ENDPOINTS
    if any(getattr(operation_of(handler, m), "public", False) for m in implemented(handler))
)


def openapi_document(base_url: str = "/") -> dict[str, Any]:
    """The OpenAPI document of this route table, with the server's base URL."""
    return generate(tuple(ENDPOINTS), base_url)


def _pattern(prefix: str, path: str) -> str:
    path = path.replace(".", r"\.")
    for name, (pattern, _) in PATH_PARAMETERS.items():
        path = path.replace("{" + name + "}", pattern)
    return prefix + path + "/?"


def routes(base: type[HiveLogic], prefix: str = PREFIX) -> list[tuple[str, Any]]:
    """The route table with every endpoint mixed onto a deployment's base handler."""
    table = {"endpoints": tuple(ENDPOINTS)}  # what GET openapi.json documents
    return [
        (_pattern(prefix, path), type(logic.__name__, (logic, base), {**table, "route": path}))
        for path, logic in ENDPOINTS
    ]


ROUTES = routes(HiveHandler)
