"""Browser sessions with TokenUsersIdentityProvider: the login form, the login cookie, groups.

A cookie session is the identity of the token it came from, groups included; and a cookie
that carries no groups (as jupyter_server's own cookies) never erases the groups gpuhive
knows: "unknown" is not "none".
"""

from __future__ import annotations

import getpass
import json
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import urlencode

import pytest
from tornado.httpclient import HTTPResponse
from tornado.web import create_signed_value

from tests.api.helpers import booking
from tests.conftest import USERS, soon

pytestmark = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)


class Browser:
    """A cookie jar in front of jp_fetch, without the server token jp_fetch adds."""

    def __init__(self, jp_fetch: Any) -> None:
        self.fetch = jp_fetch
        self.cookies: dict[str, str] = {}

    async def request(
        self, method: str, *parts: str, body: bytes | None = None, xsrf: bool = False, **kw: Any
    ) -> HTTPResponse:
        headers = {"Authorization": ""}
        if self.cookies:
            headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        if xsrf:
            headers["X-XSRFToken"] = self.cookies["_xsrf"]
        response = await self.fetch(
            *parts, method=method, body=body, headers=headers, raise_error=False,
            follow_redirects=False, **kw,
        )  # fmt: skip
        for line in response.headers.get_list("Set-Cookie"):
            for name, morsel in SimpleCookie(line).items():
                if morsel.value:
                    self.cookies[name] = morsel.value
                else:
                    self.cookies.pop(name, None)
        return response

    async def login(self, password: str) -> HTTPResponse:
        await self.request("GET", "login")  # sets the _xsrf cookie
        form = urlencode({"password": password, "_xsrf": self.cookies["_xsrf"]})
        return await self.request("POST", "login", body=form.encode())

    async def api(self, method: str, path: str, data: Any = None) -> tuple[int, Any]:
        body = json.dumps(data).encode() if data is not None else None
        if body is None and method in ("POST", "PUT", "PATCH"):
            body = b""
        response = await self.request(
            method, "gpuhive", "api", *path.split("/"), body=body, xsrf=method != "GET"
        )
        return response.code, json.loads(response.body) if response.body else None

    def login_cookie(self) -> str:
        (name,) = [k for k in self.cookies if k.startswith("username-")]
        return name


async def test_login_form_with_a_user_token_gives_a_session_with_name_and_groups(
    jp_fetch: Any,
) -> None:
    browser = Browser(jp_fetch)
    assert (await browser.api("GET", "me"))[0] in (401, 403)  # no session yet
    response = await browser.login("tok-alice")
    assert response.code == 302, response.body
    status, me = await browser.api("GET", "me")
    assert (status, me) == (200, {"name": "alice", "groups": ["phd"], "admin": False})
    # A write with the session (and its XSRF token) is alice's, with her groups.
    slot = booking(["gpu2:0"], soon(1, days=3), soon(2, days=3))
    status, made = await browser.api("POST", "reservations", slot)
    assert status == 201, made
    assert made["owner"] == "alice"
    # The admin's token typed into the form: an admin session.
    admin = Browser(jp_fetch)
    assert (await admin.login("tok-root")).code == 302
    assert (await admin.api("GET", "me"))[1] == {
        "name": "boss",
        "groups": ["admins"],
        "admin": True,
    }


async def test_login_form_with_the_server_token_or_a_wrong_one(
    jp_fetch: Any, jp_serverapp: Any
) -> None:
    server = Browser(jp_fetch)
    # This crashed (AttributeError: ... user_for_token) before.
    assert (await server.login(jp_serverapp.identity_provider.token)).code == 302
    status, me = await server.api("GET", "me")
    assert (status, me) == (200, {"name": getpass.getuser(), "groups": [], "admin": False})
    wrong = Browser(jp_fetch)
    assert (await wrong.login("not-a-token")).code == 401
    assert (await wrong.api("GET", "me"))[0] in (401, 403)


async def test_a_session_follows_its_token_in_the_configuration(
    jp_fetch: Any, jp_serverapp: Any
) -> None:
    browser = Browser(jp_fetch)
    assert (await browser.login("tok-bob")).code == 302
    provider = jp_serverapp.identity_provider
    provider.users = {**USERS, "tok-bob": {"name": "bob", "groups": ["phd", "staff"]}}
    assert (await browser.api("GET", "me"))[1]["groups"] == ["phd", "staff"]
    # The token removed: its sessions end.
    provider.users = {k: v for k, v in USERS.items() if k != "tok-bob"}
    assert (await browser.api("GET", "me"))[0] in (401, 403)


async def test_a_cookie_without_groups_never_erases_known_groups(
    api: Any, jp_fetch: Any, jp_serverapp: Any
) -> None:
    alice, boss = api("alice"), api("boss")
    rule = {"name": "phd only", "groups": ["phd"]}
    assert (await boss("POST", "rules", rule)).status == 201
    start = soon(days=5)
    made = await alice("POST", "reservations", booking(["gpu1:0"], start, soon(2, days=5)))
    assert made.status == 201, made  # alice is in phd: her token says so, gpuhive stored it

    # A session cookie as jupyter_server itself writes it: the user's fields, no groups.
    browser = Browser(jp_fetch)
    await browser.login("tok-alice")
    name = browser.login_cookie()
    plain = {"username": "alice", "name": "alice", "display_name": "alice",
             "initials": None, "color": None, "avatar_url": None}  # fmt: skip
    secret = jp_serverapp.web_app.settings["cookie_secret"]
    browser.cookies[name] = create_signed_value(secret, name, json.dumps(plain)).decode()
    status, me = await browser.api("GET", "me")
    assert (status, me) == (200, {"name": "alice", "groups": ["phd"], "admin": False})
    status, again = await browser.api(
        "POST", "reservations", booking(["gpu1:1"], start, soon(2, days=5))
    )
    assert status == 201, again  # the rule still lets her book

    # An unrelated rule change re-checks every future reservation: hers stays allowed.
    other = await boss("POST", "rules", {"name": "carol on gpu3", "users": ["carol"]})
    assert other.status == 201, other
    assert other.body["flag_changes"] == {}
    assert (await alice("GET", f"reservations/{made.body['id']}")).body["flagged"] is False
    hive = jp_serverapp.web_app.settings["gpuhive"]
    assert hive.store.users.all()["alice"] == ["phd"]  # stored groups untouched
