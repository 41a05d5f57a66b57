"""The REST API under {base_url}gpuhive/api/: one route table."""

from __future__ import annotations

from typing import Any

from . import handlers as h

PREFIX = "/gpuhive/api"

# (path below PREFIX, handler); path parameters are named in braces in the OpenAPI document.
ENDPOINTS: list[tuple[str, type[h.HiveHandler]]] = [
    ("/me", h.MeHandler),
    ("/hosts", h.HostsHandler),
    ("/metrics", h.MetricsHandler),
    ("/usage", h.UsageHandler),
    ("/reservations", h.ReservationsHandler),
    ("/reservations/{id}", h.ReservationHandler),
    ("/reservations/{id}/usage", h.ReservationUsageHandler),
    ("/overview", h.OverviewHandler),
    ("/rules", h.RulesHandler),
    ("/rules/coverage", h.CoverageHandler),
    ("/rules/{id}", h.RuleHandler),
    ("/openapi.json", h.OpenAPIHandler),
]


def _pattern(path: str) -> str:
    return PREFIX + path.replace("{id}", "([^/]+)").replace(".", r"\.") + "/?"


ROUTES: list[tuple[str, Any]] = [(_pattern(path), handler) for path, handler in ENDPOINTS]
