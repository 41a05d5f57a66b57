"""HiveClient: the synchronous REST client used by the magics and widgets inside a kernel."""

from __future__ import annotations

import http.client
import json
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

from ..model.kernel import ENV_TOKEN, ENV_URL


class HiveClientError(Exception):
    """The server refused a request (status and its message) or could not be reached."""

    def __init__(self, message: str, status: int = 0, body: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.body = body


def _running_servers() -> list[dict[str, Any]]:
    try:
        from jupyter_server.serverapp import list_running_servers
    except ImportError:
        return []
    return list(list_running_servers())


def discover() -> tuple[str, str]:
    """Find the gpuhive server for this kernel: (base URL, token).

    Order: the variables the extension gives each kernel it starts (GPUHIVE_URL and a kernel
    token that opens gpuhive's API as the user who started the kernel, nothing more; see
    `kernel_tokens`); JupyterHub's environment (the user's own server, with the user's Hub
    token); the runtime files of Jupyter servers running on this machine (the one serving the
    current directory), for processes no gpuhive server started, such as a terminal or a
    script. Those files hold a server's own token and only its UNIX user can read them.
    """
    if os.environ.get(ENV_URL):
        return os.environ[ENV_URL], os.environ.get(ENV_TOKEN, "")
    hub_token = os.environ.get("JUPYTERHUB_API_TOKEN")
    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX")
    if hub_token and prefix:
        own = urlsplit(os.environ.get("JUPYTERHUB_SERVICE_URL", "http://127.0.0.1:8888"))
        return f"{own.scheme}://{own.netloc}{prefix}", hub_token
    cwd = Path.cwd().resolve()
    best: dict[str, Any] | None = None
    for server in _running_servers():
        root = Path(server.get("root_dir") or server.get("notebook_dir") or "/").resolve()
        serves_cwd = cwd == root or root in cwd.parents
        if serves_cwd and (best is None or len(str(root)) > len(str(best.get("root_dir", "")))):
            best = server
    if best is not None:
        return best["url"], best.get("token", "")
    raise HiveClientError(
        "No gpuhive server found for this kernel. Start the kernel from JupyterLab with "
        f"gpuhive installed, or set {ENV_URL} (e.g. http://127.0.0.1:8888/) and {ENV_TOKEN}."
    )


class HiveClient:
    """Calls `{url}gpuhive/api/…` with a token over one keep-alive connection.

    Every POST carries a new `Idempotency-Key`: a booking retried after a lost answer is
    booked once. Every request says how long the client waits (`Gpuhive-Client-Timeout`,
    its `timeout`): past that, the service carries nothing out. A request the service
    refused as busy (503 or 409 with `Retry-After`) is retried after the seconds it names,
    up to `RETRIES` times; a POST that could not be sent or whose answer was lost is retried
    the same way with its key.
    """

    RETRIES = 4
    LONGEST_WAIT = 10.0  # seconds: a longer Retry-After is cut to this

    def __init__(self, url: str | None = None, token: str | None = None, timeout: float = 30):
        if url is None:
            url, found_token = discover()
            token = token if token is not None else found_token
        parts = urlsplit(url if url.endswith("/") else url + "/")
        self.scheme, self.netloc = parts.scheme or "http", parts.netloc
        self.base = parts.path.rstrip("/") + "/gpuhive/api/"
        self.url = f"{self.scheme}://{self.netloc}{parts.path}"
        self.token = token or ""
        self.timeout = timeout
        self._local = threading.local()

    def _connection(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            cls = (
                http.client.HTTPSConnection
                if self.scheme == "https"
                else http.client.HTTPConnection
            )
            conn = cls(self.netloc, timeout=self.timeout)
            self._local.conn = conn
        return conn

    def request(
        self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None
    ) -> Any:
        """One API call; raises HiveClientError with the server's message on failure."""
        target = self.base + path.lstrip("/")
        clean = {k: v for k, v in (params or {}).items() if v is not None}
        if clean:
            target += "?" + urlencode(clean)
        # how long this client waits: the service changes nothing after that (its answer
        # would reach no one), so a booking is never made whose 201 this client missed
        headers = {
            "Content-Type": "application/json",
            "Gpuhive-Client-Timeout": f"{self.timeout:g}",
        }
        if self.token:
            headers["Authorization"] = f"token {self.token}"
        payload = json.dumps(body) if body is not None else None
        keyed = method == "POST"
        if keyed:
            headers["Idempotency-Key"] = str(uuid.uuid4())
        for attempt in range(self.RETRIES + 1):
            last = attempt == self.RETRIES
            try:
                response, raw = self._exchange(method, target, payload, headers)
            except HiveClientError:
                if not keyed or last:
                    raise
                time.sleep(min(2.0**attempt, self.LONGEST_WAIT))  # the same key: no twin
                continue
            wait = _retry_after(response) if response.status in (409, 503) else None
            if wait is None or last:
                break
            time.sleep(min(wait, self.LONGEST_WAIT))
        try:
            data = json.loads(raw) if raw else None
        except ValueError:
            data = raw.decode(errors="replace")
        if response.status >= 400:
            message = data.get("message") if isinstance(data, dict) else None
            raise HiveClientError(
                message or f"{method} {path} failed with HTTP {response.status}",
                response.status,
                data,
            )
        return data

    def _exchange(
        self, method: str, target: str, payload: str | None, headers: dict[str, str]
    ) -> tuple[http.client.HTTPResponse, bytes]:
        """One request and its answer; a second try on a new connection if the kept-alive
        one was closed meanwhile."""
        for attempt in (1, 2):
            conn = self._connection()
            try:
                conn.request(method, target, body=payload, headers=headers)
                response = conn.getresponse()
                return response, response.read()
            except (http.client.HTTPException, OSError) as error:
                conn.close()
                self._local.conn = None
                if attempt == 2:
                    raise HiveClientError(
                        f"Cannot reach the gpuhive server at {self.url}: {error}"
                    ) from None
        raise AssertionError("unreachable")

    # --- conveniences ----------------------------------------------------------------

    def me(self) -> dict[str, Any]:
        return self.request("GET", "me")  # type: ignore[no-any-return]

    def hosts(self) -> list[dict[str, Any]]:
        return self.request("GET", "hosts")["hosts"]  # type: ignore[no-any-return]

    def reservations(self, **params: Any) -> list[dict[str, Any]]:
        return self.request("GET", "reservations", params=params)["reservations"]  # type: ignore[no-any-return]

    def reserve(self, **body: Any) -> dict[str, Any]:
        return self.request("POST", "reservations", body=body)  # type: ignore[no-any-return]

    def update_reservation(self, reservation_id: int, **body: Any) -> dict[str, Any]:
        return self.request("PATCH", f"reservations/{reservation_id}", body=body)  # type: ignore[no-any-return]

    def cancel(self, reservation_id: int) -> dict[str, Any]:
        return self.request("DELETE", f"reservations/{reservation_id}")  # type: ignore[no-any-return]


def _retry_after(response: http.client.HTTPResponse) -> float | None:
    """The seconds a busy answer asks to wait (Retry-After), or None: not to retry."""
    value = response.getheader("Retry-After")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None
