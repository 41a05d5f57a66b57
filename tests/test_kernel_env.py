"""Kernels started through the real server's REST API: no server secret in their environment,
and their own GPUHIVE_TOKEN opens gpuhive as the user who started them, and nothing else."""

from __future__ import annotations

import getpass
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from tests.conftest import TOKENS

RUN = uuid.uuid4().hex[:10]
SERVER_TOKEN = f"server-token-{RUN}"
HUB_TOKEN = f"hub-token-{RUN}"
# What a kernel runs to reach its server, as the magics and widgets do.
ME = "import json\nfrom jupyter_gpuhive.client import HiveClient\nprint(json.dumps(HiveClient().me()))"


@pytest.fixture
def db_url(sqlite_url: str) -> str:
    return sqlite_url


@pytest.fixture
def hive_config(hive_config: dict[str, Any]) -> dict[str, Any]:
    return {**hive_config, "monitor": False}


@pytest.fixture
def identity() -> str:
    """'tokens': several users on one server (TokenUsersIdentityProvider); 'personal': Jupyter's
    default provider, whose anonymous user is the OS user."""
    return "tokens"


@pytest.fixture
def jp_server_config(
    jp_server_config: dict[str, Any], identity: str, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    monkeypatch.setenv("JUPYTER_TOKEN", SERVER_TOKEN)
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", HUB_TOKEN)
    monkeypatch.setenv("A_COPY_OF_THE_TOKEN", f"http://127.0.0.1:8888/?token={SERVER_TOKEN}")
    config = json.loads(json.dumps(jp_server_config))
    config["IdentityProvider"] = {"token": SERVER_TOKEN}
    if identity == "personal":
        del config["ServerApp"]["identity_provider_class"]
        del config["TokenUsersIdentityProvider"]
    return config


@pytest.fixture
def server(jp_serverapp: Any, jp_asyncio_loop: Any) -> Any:
    """The server after its extensions' start hooks ran, as `jupyter server` starts it."""
    jp_asyncio_loop.run_until_complete(jp_serverapp._post_start())
    assert jp_serverapp.identity_provider.token == SERVER_TOKEN
    return jp_serverapp


async def fetch(jp_fetch: Any, token: str, *parts: str, method: str = "GET",
                body: Any = None) -> tuple[int, Any]:  # fmt: skip
    """(status, JSON body) of a request with `token`; never raises on 4xx."""
    payload = json.dumps(body) if body is not None else (b"" if method == "POST" else None)
    try:
        reply = await jp_fetch(*parts, method=method, body=payload,
                               headers={"Authorization": f"token {token}"})  # fmt: skip
    except HTTPClientError as error:
        assert error.response is not None, error
        reply = error.response
    text = reply.body.decode() if reply.body else ""
    try:
        return reply.code, json.loads(text) if text else None
    except ValueError:
        return reply.code, text


async def start_kernel(
    jp_fetch: Any, server: Any, token: str, *, session: bool = False
) -> tuple[str, dict[str, str]]:
    """Start a python3 kernel through POST api/kernels (or api/sessions, as a notebook does);
    its id and its real environment."""
    if session:
        body = {"path": f"{RUN}.ipynb", "type": "notebook", "kernel": {"name": "python3"}}
        status, model = await fetch(jp_fetch, token, "api", "sessions", method="POST", body=body)
        model = model["kernel"] if status == 201 else model
    else:
        status, model = await fetch(jp_fetch, token, "api", "kernels", method="POST",
                                    body={"name": "python3"})  # fmt: skip
    assert status == 201, model
    return model["id"], kernel_env(server, model["id"])


def kernel_env(server: Any, kernel_id: str) -> dict[str, str]:
    """The environment of the kernel's process, as the system sees it."""
    pid = server.kernel_manager.get_kernel(kernel_id).provisioner.process.pid
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)


async def run_in(server: Any, kernel_id: str, code: str) -> str:
    """What `code` prints in the kernel (through its own channels, as a notebook would)."""
    client = server.kernel_manager.get_kernel(kernel_id).client()
    client.start_channels()
    out: list[str] = []

    def hook(msg: dict[str, Any]) -> None:
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])
        elif msg["msg_type"] == "error":
            out.append("\n".join(msg["content"]["traceback"]))

    try:
        await client.wait_for_ready(timeout=60)
        await client.execute_interactive(code, output_hook=hook, timeout=60)
    finally:
        client.stop_channels()
    return "".join(out)


def assert_no_server_secret(env: dict[str, str]) -> None:
    for name, value in env.items():
        assert SERVER_TOKEN not in value, f"{name} carries the server's token"
        assert HUB_TOKEN not in value, f"{name} carries the server's Hub token"
    assert "JUPYTER_TOKEN" not in env


async def test_a_users_kernel_carries_a_token_worth_that_user_only(
    jp_fetch: Any, server: Any
) -> None:
    alice_kernel, alice_env = await start_kernel(jp_fetch, server, TOKENS["alice"])
    bob_kernel, bob_env = await start_kernel(jp_fetch, server, TOKENS["bob"], session=True)
    for env in (alice_env, bob_env):
        assert_no_server_secret(env)
        assert env["GPUHIVE_URL"] == server.connection_url
    token = alice_env["GPUHIVE_TOKEN"]
    assert token != bob_env["GPUHIVE_TOKEN"]

    # gpuhive takes it as alice, writes included (no XSRF cookie needed, as for any token) ...
    assert await fetch(jp_fetch, token, "gpuhive", "api", "me") == (200, {
        "name": "alice", "groups": ["phd"], "admin": False})  # fmt: skip
    status, body = await fetch(jp_fetch, bob_env["GPUHIVE_TOKEN"], "gpuhive", "api", "me")
    assert (status, body["name"]) == (200, "bob")
    status, body = await fetch(jp_fetch, token, "gpuhive", "api", "reservations",
                               method="POST", body={})  # fmt: skip
    assert status in (400, 422), body  # judged as alice's request, not refused as a forgery
    # ... and Jupyter's own APIs refuse it.
    for parts in (("api", "contents"), ("api", "kernels"), ("api", "sessions"), ("api", "me")):
        status, _ = await fetch(jp_fetch, token, *parts)
        assert status == 403, parts
    status, _ = await fetch(jp_fetch, token, "api", "contents", "x.txt", method="PUT",
                            body={"type": "file", "format": "text", "content": "x"})  # fmt: skip
    assert status == 403

    # The kernel finds its server by itself and is alice there.
    printed = await run_in(server, alice_kernel, ME)
    assert json.loads(printed.strip().splitlines()[-1])["name"] == "alice", printed

    # A restart keeps the kernel's token; shut down, the token is worth nothing.
    status, _ = await fetch(jp_fetch, TOKENS["alice"], "api", "kernels", alice_kernel,
                            "restart", method="POST")  # fmt: skip
    assert status == 200
    assert kernel_env(server, alice_kernel)["GPUHIVE_TOKEN"] == token
    assert (await fetch(jp_fetch, token, "gpuhive", "api", "me"))[0] == 200
    status, _ = await fetch(jp_fetch, TOKENS["alice"], "api", "kernels", alice_kernel,
                            method="DELETE")  # fmt: skip
    assert status == 204
    status, _ = await fetch(jp_fetch, token, "gpuhive", "api", "me")
    assert status in (401, 403)
    assert (await fetch(jp_fetch, bob_env["GPUHIVE_TOKEN"], "gpuhive", "api", "me"))[0] == 200

    # A renamed notebook hands its kernel the server's environment again for the next
    # restart: the kernel still comes back without secrets, with its own token.
    status, sessions = await fetch(jp_fetch, TOKENS["bob"], "api", "sessions")
    [session] = [s for s in sessions if s["kernel"]["id"] == bob_kernel]
    renamed = f"{RUN}-renamed.ipynb"
    status, _ = await fetch(jp_fetch, TOKENS["bob"], "api", "sessions", session["id"],
                            method="PATCH", body={"path": renamed})  # fmt: skip
    assert status == 200
    status, _ = await fetch(jp_fetch, TOKENS["bob"], "api", "kernels", bob_kernel, "restart",
                            method="POST")  # fmt: skip
    assert status == 200
    restarted = kernel_env(server, bob_kernel)
    assert restarted["JPY_SESSION_NAME"].endswith(renamed)  # the new environment was taken
    assert_no_server_secret(restarted)
    assert restarted["GPUHIVE_TOKEN"] == bob_env["GPUHIVE_TOKEN"]
    await fetch(jp_fetch, TOKENS["bob"], "api", "kernels", bob_kernel, method="DELETE")


@pytest.mark.parametrize("identity", ["personal"])
async def test_a_personal_servers_kernel_acts_as_the_os_user(jp_fetch: Any, server: Any) -> None:
    kernel, env = await start_kernel(jp_fetch, server, SERVER_TOKEN)
    assert_no_server_secret(env)
    assert env["GPUHIVE_URL"] == server.connection_url
    status, body = await fetch(jp_fetch, env["GPUHIVE_TOKEN"], "gpuhive", "api", "me")
    assert (status, body["name"]) == (200, getpass.getuser())
    printed = await run_in(server, kernel, ME)
    assert json.loads(printed.strip().splitlines()[-1])["name"] == getpass.getuser(), printed
    await fetch(jp_fetch, SERVER_TOKEN, "api", "kernels", kernel, method="DELETE")
