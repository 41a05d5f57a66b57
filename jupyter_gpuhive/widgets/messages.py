"""Server errors turned into sentences for the dialogs and status lines."""

from __future__ import annotations

from ..client import HiveClientError

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
