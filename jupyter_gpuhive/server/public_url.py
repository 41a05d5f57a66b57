"""The team service's public URL: what feed URLs (and reservation kernels) are given.

The service listens on an internal address (`JUPYTERHUB_SERVICE_URL`, e.g.
`http://127.0.0.1:10101`) that nothing outside the Hub's machine can reach; people and
calendar programs reach it through the Hub's proxy, under the service's prefix. In order:

1. `JUPYTERHUB_PUBLIC_URL`: the Hub gives its managed service this when
   `c.JupyterHub.public_url` (or the service's `host`) is set. It is the Hub's own word, and
   nothing in a request changes it: set it.
2. Else the origin the request reached the Hub's proxy at: the first `X-Forwarded-Proto` and
   `X-Forwarded-Host` (configurable-http-proxy sets them and keeps a front proxy's; a user's
   server in client mode passes on those its own request came with), else the request's
   `Host` as it is. These come from the caller: they only shape the URL the caller is sent.

Reservation kernels get only (1): a URL a request suggested is never handed to a kernel.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

_HOST = re.compile(r"[A-Za-z0-9.\-\[\]:]{1,255}\Z")  # a host name or address, and a port
FORWARDED = ("X-Forwarded-Host", "X-Forwarded-Proto")


def configured(environ: Mapping[str, str] = os.environ) -> str | None:
    """The service's public URL as the Hub configured it (ends in '/'); None when unset."""
    url = environ.get("JUPYTERHUB_PUBLIC_URL", "").strip()
    if not url.startswith(("http://", "https://")):
        return None
    return url if url.endswith("/") else url + "/"


def _first(value: str | None) -> str:
    return (value or "").split(",")[0].strip()


def service_url(
    headers: Mapping[str, str], protocol: str, host: str, environ: Mapping[str, str] = os.environ
) -> str:
    """The service's public URL (ends in '/') for a request with these headers."""
    fixed = configured(environ)
    if fixed is not None:
        return fixed
    forwarded = _first(headers.get("X-Forwarded-Host"))
    origin_host = forwarded if _HOST.match(forwarded) else host
    scheme = _first(headers.get("X-Forwarded-Proto")).lower()
    if scheme not in ("http", "https"):
        scheme = protocol
    prefix = environ.get("JUPYTERHUB_SERVICE_PREFIX", "/services/gpuhive/")
    return f"{scheme}://{origin_host}/{prefix.strip('/')}/"
