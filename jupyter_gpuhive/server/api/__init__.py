"""The REST API under {base_url}gpuhive/api/: one route table, and its OpenAPI document."""

from __future__ import annotations

import re
from typing import Any

from jupyter_server.auth.utils import HTTP_METHOD_TO_AUTH_ACTION

from . import approvals as ap
from . import brokered as b
from . import budgets as bu
from . import fairshare as f
from . import finder as fi
from . import health as he
from . import hostgroups as hg
from . import hosts as ho
from . import integrations as i
from . import jobs as j
from . import kernels as k
from . import me
from . import openapi as o
from . import prometheus as pr
from . import reservations as rs
from . import rules as ru
from . import violations as v
from .authorization import authorized_action
from .base import HiveHandler, HiveLogic
from .openapi import generate
from .operations import PATH_PARAMETERS, implemented, operation_of

PREFIX = "/gpuhive/api"

# (path below PREFIX, handler); parameters in braces are PATH_PARAMETERS. The OpenAPI
# document is generated from this table and each method's @operation (openapi.py).
ENDPOINTS: list[tuple[str, type[HiveLogic]]] = [
    ("/me", me.MeHandler),
    ("/me/ssh", me.SshHandler),
    ("/hosts", ho.HostsHandler),
    ("/metrics", ho.MetricsHandler),
    ("/prometheus", pr.PrometheusHandler),
    ("/health", he.HealthHandler),
    ("/health/drain", he.DrainHandler),
    ("/usage", f.UsageHandler),
    ("/usage/scores", f.ScoresHandler),
    ("/limits", f.LimitsHandler),
    ("/limits/tiers", f.TiersHandler),
    ("/reports/accounting", f.ReportHandler),
    ("/reports/accounting.csv", f.ReportCsvHandler),
    ("/budgets", bu.BudgetsHandler),
    ("/budgets/{id}", bu.BudgetHandler),
    ("/budgets/{id}/statement", bu.StatementHandler),
    ("/budgets/{id}/statement.csv", bu.StatementCsvHandler),
    ("/host-groups", hg.HostGroupsHandler),
    ("/host-groups/{group}", hg.HostGroupHandler),
    ("/host-groups/{group}/limits", hg.HostGroupLimitsHandler),
    ("/host-groups/{group}/noshow", hg.HostGroupNoShowHandler),
    ("/violations", v.ViolationsHandler),
    ("/reservations", rs.ReservationsHandler),
    ("/reservations/search", fi.SlotSearchHandler),
    ("/reservations/{id}", rs.ReservationHandler),
    ("/reservations/{id}/usage", rs.ReservationUsageHandler),
    ("/reservations/{id}/reclaim", rs.ReclaimHandler),
    ("/reservations/{id}/approve", ap.ApproveHandler),
    ("/reservations/{id}/decline", ap.DeclineHandler),
    ("/overview", rs.OverviewHandler),
    ("/rules", ru.RulesHandler),
    ("/rules/coverage", ru.CoverageHandler),
    ("/rules/{id}", ru.RuleHandler),
    ("/templates", j.TemplatesHandler),
    ("/jobs", j.JobsHandler),
    ("/jobs/preview", j.JobPreviewHandler),
    ("/queue", j.QueueHandler),
    ("/jobs/{id}", j.JobHandler),
    ("/jobs/{id}/start", j.JobStartHandler),
    ("/jobs/{id}/stop", j.JobStopHandler),
    ("/jobs/{id}/enqueue", j.JobEnqueueHandler),
    ("/jobs/{id}/dequeue", j.JobDequeueHandler),
    ("/jobs/{id}/log", j.JobLogHandler),
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
    ("/openapi.json", o.OpenAPIHandler),
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


def declared(path: str, method: str) -> tuple[str, str]:
    """The resource and action the route table declares for `path` (below api/) and an HTTP
    method (lower case); a path no route has: ('gpuhive:api', the method's own action)."""
    for route, handler in ENDPOINTS:
        if re.fullmatch(_pattern("", route), "/" + path) and hasattr(handler, "auth_resource"):
            action = authorized_action(getattr(handler, method, None))
            if action is not None:
                return handler.auth_resource, action
    return "gpuhive:api", HTTP_METHOD_TO_AUTH_ACTION.get(method.upper(), "read")


def routes(base: type[HiveLogic], prefix: str = PREFIX) -> list[tuple[str, Any]]:
    """The route table with every endpoint mixed onto a deployment's base handler."""
    table = {"endpoints": tuple(ENDPOINTS)}  # what GET openapi.json documents
    return [
        (_pattern(prefix, path), type(logic.__name__, (logic, base), {**table, "route": path}))
        for path, logic in ENDPOINTS
    ]


ROUTES = routes(HiveHandler)
