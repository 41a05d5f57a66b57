"""Client mode (#46): a team member's own server asks its site's Authorizer before it forwards
a gpuhive call to the service, about the resource and action the route declares."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.test_authorization import ASKED, SITE_USERS

# A server of the team whose service is down (nothing listens on its port).
from tests.kernels.test_client_mode_refusals import db_url, hive_config  # noqa: F401


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    jp_server_config["ServerApp"]["authorizer_class"] = "tests.api.test_authorization.RefusesMalice"
    jp_server_config["TokenUsersIdentityProvider"] = {"users": SITE_USERS}
    return jp_server_config


@pytest.mark.parametrize(
    ("method", "path", "resource", "action"),
    [
        ("GET", "reservations", "gpuhive:reservations", "read"),
        ("DELETE", "reservations/3", "gpuhive:reservations", "write"),
        ("POST", "health/drain", "gpuhive:health", "write"),
        ("POST", "jobs/4/start", "gpuhive:jobs", "execute"),
        ("GET", "no/such/route", "gpuhive:api", "read"),
    ],
)
async def test_the_users_own_server_asks_its_authorizer_before_forwarding(
    api: Any, method: str, path: str, resource: str, action: str
) -> None:
    ASKED.clear()
    body = {} if method == "POST" else None
    refused = await api("malice")(method, path, body)
    assert refused.status == 403, refused
    assert f"authorizer does not allow malice to {action} {resource}" in refused.message
    assert ("malice", action, resource) in ASKED
    # alice passes this server's authorizer: her call goes on to the service (down here)
    forwarded = await api("alice")(method, path, body)
    assert forwarded.status == 503, forwarded
    assert "The gpuhive service cannot be reached" in forwarded.message
