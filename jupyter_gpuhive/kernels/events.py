"""The kernel lifecycle's events on the Jupyter server's event bus (the labextension shows them)."""

from __future__ import annotations

from typing import Any

KERNEL_SCHEMA_ID = "https://events.jupyter.org/jupyter_gpuhive/kernel"
KINDS = ("warning", "extended", "extend-failed", "ended")
KERNEL_SCHEMA: dict[str, Any] = {
    "$id": KERNEL_SCHEMA_ID,
    "version": "1",
    "title": "gpuhive kernel",
    "description": "A kernel on a reservation: the warning before its end, and what its end "
    "policy did.",
    "type": "object",
    "required": ["kind", "kernel_id", "reservation_id", "owner", "message"],
    "properties": {
        "kind": {"type": "string", "enum": list(KINDS)},
        "kernel_id": {"type": "string"},
        "reservation_id": {"type": "integer"},
        "owner": {"type": "string"},
        "message": {"type": "string"},
        "end": {"type": "string"},
        "policy": {"type": "string"},
        "action": {"type": "string"},
        "ok": {"type": "boolean"},
    },
}
