"""Tenancy benchmark (issue #46): authorization on every route, and host groups kept apart.

Run: `.venv/bin/python benchmarks/tenancy.py [--smoke]` (`--smoke`: 2 host groups of 2 hosts).

- `routes_without_authorization`: counted from the real route tables (the Jupyter server's
  `ROUTES` and the team-mode service's, `routes(HubHandler)`): the (route, method) pairs whose
  handler method neither goes through jupyter_server's `@authorized` (and so the server's
  Authorizer, after gpuhive's policy) nor is one of the public routes, whose only credential
  is a token of their own (a calendar feed's URL, the Prometheus scrape token; counted apart
  as `public_routes`). Must be 0.
- `cross_group_admin_refusals`: `{"tried": N, "refused": N}`. A real Jupyter server (its own
  process, SQLite) with G host groups of H hosts, one administrator per group, a booking
  (with a description) on every host and a site admin's access rule on every host. Each
  group's administrator tries, on every host of every other group: drain a GPU, end a drain,
  add a rule for that host, replace and delete the site admin's rule there, approve one
  tentative booking there and decline another (every booking waits for approval: each
  group's threshold is 0 GPUs), stop the booking there lending its GPUs, cancel it, read
  its usage and read its description; on every other group, set and forget its own limits
  and its no-show times (`host-groups/{group}/limits`, `.../noshow`); and once, set a
  group's site limits (those are the site's). Refused: a 403 whose JSON message says who
  may instead (for the description: not shown). All must be refused.
- `in_group_admin_actions`: `{"tried": N, "allowed": N}`, the same actions on the
  administrator's own group's first host and on the group's own settings (but the site's
  limits): all must be allowed, so that the refusals above are the groups' boundary and not
  a blanket no.
- `budget_overruns`: GPU-hours booked beyond a group's budget when 50 clients (threads, five
  members of the group) race for its last 10 GPU-hours with 50 one-hour bookings that do not
  clash, on a server over SQLite and one over PostgreSQL (`budget_overruns_by_db`; also how
  many won: exactly 10 each). Must be 0.
- `create_p99_ratio_with_budgets`: the p99 of POST reservations on a server whose hosts
  belong to a host group and whose bookers have a group and a user budget, over the p99 on a
  server with neither, booked in turns in the same run (SQLite, one client each,
  `budget_bookings` bookings per server). Target: at most 1.2.

The last line printed is one JSON object with these figures and the sizes.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.tenancy_budgets import budget_figures
from jupyter_gpuhive.server.api import ENDPOINTS, PUBLIC_PATHS, ROUTES, routes
from jupyter_gpuhive.server.api.authorization import authorized_action
from jupyter_gpuhive.server.api.operations import implemented
from tests.support.server import Client, JupyterServer

OFFICE = {"days": ["mon-fri"], "start": "08:00", "end": "18:00"}


def route_counts() -> dict[str, int]:
    """(route, method) pairs of both route tables; those without authorization."""
    from jupyter_gpuhive.server.hub import HubHandler

    public = set(PUBLIC_PATHS)
    tables = [ROUTES, routes(HubHandler)]
    total = without = public_count = 0
    for table in tables:
        for (_, handler), (path, _) in zip(table, ENDPOINTS, strict=True):
            for method in implemented(handler):
                total += 1
                if authorized_action(getattr(handler, method)) is not None:
                    continue
                if path in public:
                    public_count += 1
                else:
                    without += 1
    return {"routes": total, "routes_without_authorization": without, "public_routes": public_count}


def refused(status: int, body: Any) -> bool:
    """A 403 with a JSON message that says who may instead."""
    message = body.get("message", "") if isinstance(body, dict) else ""
    return status == 403 and ("Who may:" in message or "Only gpuhive admins" in message)


def site(groups: int, per_group: int) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The server's gpuhive configuration and its users (a head per group, a user, boss)."""
    hosts = [
        {"name": f"g{g}h{h}", "address": "127.0.0.1", "transport": "local", "gpu_count": 2,
         "group": f"lab{g}"}
        for g in range(groups) for h in range(per_group)
    ]  # fmt: skip
    users = {
        f"tok-head{g}": {"name": f"head{g}", "groups": [f"lab{g}-heads"]} for g in range(groups)
    }
    users["tok-user"] = {"name": "user", "groups": ["lab"]}
    users["tok-boss"] = {"name": "boss", "groups": ["admins"]}
    config = {
        "db_url": "",  # set by the caller (a fresh SQLite file)
        "hosts": hosts,
        "monitor": False,
        "admin_groups": ["admins"],
        "site_timezone": "UTC",
        "host_groups": {f"lab{g}": {"admin_groups": [f"lab{g}-heads"]} for g in range(groups)},
        "approvals": {f"lab{g}": {"gpus": 0} for g in range(groups)},  # every booking waits
    }
    return config, users


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke", action="store_true", help="2 groups of 2 hosts")
    args = parser.parse_args()
    groups, per_group = (2, 2) if args.smoke else (6, 4)
    figures: dict[str, Any] = route_counts()
    config, users = site(groups, per_group)
    folder = Path(tempfile.mkdtemp(prefix="gpuhive-tenancy-"))
    config["db_url"] = f"sqlite:///{folder / 'hive.sqlite'}"
    server = JupyterServer(config, users)
    try:
        figures.update(run(server.port, groups, per_group))
    finally:
        server.stop()
    figures.update(budget_figures(20 if args.smoke else 400))
    figures.update({"groups": groups, "hosts": groups * per_group})
    print(json.dumps(figures))


def run(port: int, groups: int, per_group: int) -> dict[str, Any]:
    user, boss = Client(port, "tok-user"), Client(port, "tok-boss")
    start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(days=1)
    bookings: dict[str, tuple[int, int, int]] = {}  # one to end, one to approve, one to decline
    rules: dict[str, int] = {}
    hosts = [f"g{g}h{h}" for g in range(groups) for h in range(per_group)]
    for host in hosts:  # the bookings first: once a rule exists, rules decide who may book
        made = []
        for hours in (0, 3, 6):
            status, body, _ = user.call("POST", "reservations", {
                "title": "run", "description": "private", "gpus": [f"{host}:0"],
                "start": (start + timedelta(hours=hours)).isoformat(), "duration": "2h"})  # fmt: skip
            assert status == 201, (status, body)
            assert body["tentative"], body
            made.append(body["id"])
        bookings[host] = (made[0], made[1], made[2])
    for host in hosts:
        status, body, _ = boss.call("POST", "rules", {
            "name": f"{host} for all", "users": ["*"], "hosts": [host]})  # fmt: skip
        assert status == 201, (status, body)
        rules[host] = body["id"]
    tried = refusals = own_tried = own_allowed = 0
    heads = [Client(port, f"tok-head{g}") for g in range(groups)]
    for g, head in enumerate(heads):  # first across the groups, while everything is there
        for other in range(groups):
            for h in range(per_group if other != g else 0):
                host = f"g{other}h{h}"
                outcomes = attempts(head, host, bookings[host], rules[host])
                tried += len(outcomes)
                refusals += sum(denied(s, b, what) for what, s, b in outcomes)
            if other != g:
                outcomes = group_attempts(head, f"lab{other}")
                tried += len(outcomes)
                refusals += sum(denied(s, b, what) for what, s, b in outcomes)
        status, body, _ = head.call("PUT", "limits", {
            "scope": "group", "name": f"lab{g}", "limits": {"max_gpus": 1}})  # fmt: skip
        tried += 1
        refusals += refused(status, body)
    for g, head in enumerate(heads):  # then each on its own group's first host
        host = f"g{g}h0"
        outcomes = attempts(head, host, bookings[host], rules[host])
        outcomes += group_attempts(head, f"lab{g}")
        own_tried += len(outcomes)
        own_allowed += sum(allowed(s, b, what) for what, s, b in outcomes)
    return {
        "cross_group_admin_refusals": {"tried": tried, "refused": refusals},
        "in_group_admin_actions": {"tried": own_tried, "allowed": own_allowed},
    }


def attempts(
    head: Client, host: str, booking: tuple[int, int, int], rule: int
) -> list[tuple[str, int, Any]]:
    """Every administrator's action on one host, as (what, status, body)."""
    out: list[tuple[str, int, Any]] = []
    booked, to_approve, to_decline = booking

    def call(what: str, method: str, path: str, body: Any = None) -> None:
        status, reply, _ = head.call(method, path, body)
        out.append((what, status, reply))

    call("describe", "GET", f"reservations/{booked}")
    call("usage", "GET", f"reservations/{booked}/usage")
    call("drain", "POST", "health/drain", {"gpu": f"{host}:1", "reason": "maintenance"})
    call("undrain", "POST", "health/drain", {"gpu": f"{host}:1", "drain": False})
    call("add rule", "POST", "rules", {"name": "lab", "users": ["*"], "hosts": [host]})
    changed = {"name": "weekdays", "users": ["*"], "hosts": [host], "windows": [OFFICE]}
    call("replace rule", "PUT", f"rules/{rule}", changed)
    call("delete rule", "DELETE", f"rules/{rule}")
    call("approve", "POST", f"reservations/{to_approve}/approve")
    call("decline", "POST", f"reservations/{to_decline}/decline", {"reason": "not now"})
    call("lending", "PATCH", f"reservations/{booked}", {"lend": False})
    call("cancel", "DELETE", f"reservations/{booked}")
    return out


def group_attempts(head: Client, group: str) -> list[tuple[str, int, Any]]:
    """An administrator's changes to a host group's own settings, as (what, status, body)."""
    out: list[tuple[str, int, Any]] = []
    for what, method, path, body in (
        ("group limits", "PUT", "limits", {"gpus": 4, "longest": "1d"}),
        ("forget group limits", "DELETE", "limits", None),
        ("group no-show", "PUT", "noshow", {"after": "15m", "release_after": "30m"}),
        ("forget group no-show", "DELETE", "noshow", None),
    ):
        status, reply, _ = head.call(method, f"host-groups/{group}/{path}", body)
        out.append((what, status, reply))
    return out


def allowed(status: int, body: Any, what: str) -> bool:
    if what == "describe":
        return status == 200 and body.get("description") == "private"
    return status in (200, 201)


def denied(status: int, body: Any, what: str) -> bool:
    if what == "describe":
        return status == 200 and "description" not in body
    return refused(status, body)


if __name__ == "__main__":
    main()
