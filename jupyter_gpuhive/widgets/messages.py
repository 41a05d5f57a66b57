"""Server errors turned into sentences for the dialogs and status lines."""

from __future__ import annotations

from typing import Any

from ..notebook.client import HiveClientError

_STATUS = {
    0: "The gpuhive server cannot be reached",
    400: "The request was malformed",
    403: "Not allowed",
    404: "Not found",
    409: "Conflict",
    422: "Not accepted",
}


def error_text(error: HiveClientError, action: str) -> str:
    """'Could not reserve — Conflict: Those GPUs are not free …' from a client error."""
    kind = _STATUS.get(error.status, f"HTTP {error.status}")
    if error.status == 0:
        return f"Could not {action}: {error.message}"
    return f"Could not {action}. {kind}: {error.message}"


def hosts_notice(reply: dict[str, Any]) -> str:
    """HTML for a `GET hosts` reply: the first steps with no hosts, else what to do about the
    hosts that are down (and '' when all is well)."""
    from ..hosts.guidance import setup
    from ..notebook.magicviews import steps_html

    hosts = reply.get("hosts") or []
    if not hosts:
        return _box(steps_html(reply.get("setup") or setup()))
    advice = [h["advice"] for h in hosts if h.get("advice")]
    return _box("".join(steps_html(a) for a in advice)) if advice else ""


def setup_notice() -> str:
    """HTML of the first steps, for views that learn there are no GPUs some other way."""
    from ..hosts.guidance import setup
    from ..notebook.magicviews import steps_html

    return _box(steps_html(setup()))


def _box(inner: str) -> str:
    return (
        "<div class='gpuhive-notice' style='border-left:4px solid "
        "var(--jp-warn-color1, #f57c00);padding:2px 8px;margin:4px 0'>" + inner + "</div>"
    )
