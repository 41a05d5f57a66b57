"""Identity, authentication of every route, and the OpenAPI document against the routes."""

from __future__ import annotations

import getpass
import json
from datetime import timedelta
from typing import Any

import pytest
from tornado import web
from tornado.httpclient import HTTPClientError

from jupyter_gpuhive.server.api import ENDPOINTS, PREFIX, PUBLIC_PATHS, ROUTES
from tests.api.helpers import booking, snapshot
from tests.conftest import soon

HTTP_METHODS = ("get", "head", "options", "post", "put", "patch", "delete")
AUTHENTICATED = web.authenticated(lambda self: None).__code__


def implemented(handler: type) -> set[str]:
    """The HTTP methods a handler class defines itself."""
    return {m for m in HTTP_METHODS if m in vars(handler)}


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    # Make the server's own blanket check explicit (its default): routes must protect themselves.
    jp_server_config["ServerApp"]["allow_unauthenticated_access"] = True
    return jp_server_config


async def test_me_for_each_user_and_the_server_token(api: Any, jp_fetch: Any) -> None:
    expected = {
        "alice": (["phd"], False),
        "bob": (["phd"], False),
        "carol": (["staff"], False),
        "boss": (["admins"], True),
    }
    for user, (groups, admin) in expected.items():
        me = await api(user)("GET", "me")
        assert me.status == 200, me
        assert me.body == {"name": user, "groups": groups, "admin": admin}

    nobody = await api(None)("GET", "me")
    assert nobody.status in (401, 403)
    assert "name" not in (nobody.body or {})

    # jp_fetch's default header carries the server's own token: that is the OS user
    response = await jp_fetch("gpuhive", "api", "me")
    assert json.loads(response.body) == {"name": getpass.getuser(), "groups": [], "admin": False}
    t = soon()
    response = await jp_fetch(
        "gpuhive",
        "api",
        "reservations",
        method="POST",
        body=json.dumps(booking(["gpu1:0"], t, t + timedelta(hours=1))),
    )
    assert response.code == 201
    assert json.loads(response.body)["owner"] == getpass.getuser()


def test_every_handler_method_is_wrapped_by_web_authenticated() -> None:
    assert ENDPOINTS
    for path, handler in ENDPOINTS:
        methods = implemented(handler)
        assert methods, f"{path}: {handler.__name__} implements no HTTP method"
        if path in PUBLIC_PATHS:  # a feed: its URL's token is the credential
            continue
        for method in methods:
            function = vars(handler)[method]
            assert function.__code__ is AUTHENTICATED, (
                f"{handler.__name__}.{method} ({path}) lacks @web.authenticated"
            )
    assert len(ROUTES) == len(ENDPOINTS)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_every_route_refuses_requests_without_a_token(api: Any, jp_fetch: Any) -> None:
    called = 0
    for path, handler in ENDPOINTS:
        for method in sorted(implemented(handler)):
            parts = path.replace("{id}", "1").replace("{token}", "gpf_x").strip("/").split("/")
            try:
                response = await jp_fetch(
                    "gpuhive",
                    "api",
                    *parts,
                    method=method.upper(),
                    body=b"{}" if method in ("post", "put", "patch") else None,
                    # no token; a matching XSRF cookie and header so that only authentication
                    # can refuse the request (token-less writes otherwise fail the XSRF check)
                    headers={"Authorization": "", "Cookie": "_xsrf=probe", "X-XSRFToken": "probe"},
                    allow_nonstandard_methods=True,
                )
            except HTTPClientError as error:
                response = error.response
            assert response is not None
            # A feed's URL token is its credential (none given: no such feed); the other public
            # path, the Prometheus scrape, has a bearer token of its own (none given: refused).
            refused = (404,) if path in PUBLIC_PATHS and "{token}" in path else (401, 403)
            assert response.code in refused, (method, path, response.code, response.body)
            assert b"xsrf" not in response.body.lower(), (method, path, response.body)
            called += 1
    assert called == sum(len(implemented(h)) for _, h in ENDPOINTS)
    # and nothing happened
    assert await snapshot(api("boss")) == []
    assert (await api("boss")("GET", "rules")).body == {"rules": []}


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_openapi_document_matches_the_routes(api: Any, jp_base_url: str) -> None:
    reply = await api("carol")("GET", "openapi.json")
    assert reply.status == 200, reply
    document = reply.body
    assert document["openapi"].startswith("3.")
    assert document["servers"] == [{"url": jp_base_url.rstrip("/") + PREFIX}]
    routes = dict(ENDPOINTS)
    assert set(document["paths"]) == set(routes)
    for path, operations in document["paths"].items():
        assert set(operations) == implemented(routes[path]), path
        for method, operation in operations.items():
            assert operation["summary"], (method, path)
            assert path in PUBLIC_PATHS or "403" in operation["responses"], (method, path)
            if "{id}" in path:
                assert [p["name"] for p in operation["parameters"] if p["in"] == "path"] == ["id"]
    schemas = document["components"]["schemas"]
    for operations in document["paths"].values():
        for operation in operations.values():
            body = operation.get("requestBody")
            if body:
                ref = body["content"]["application/json"]["schema"]["$ref"]
                assert ref.rsplit("/", 1)[1] in schemas
