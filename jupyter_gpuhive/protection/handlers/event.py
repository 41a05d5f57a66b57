"""Event handler: publishes on the Jupyter server's event bus (for the Lab UI)."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Mapping
from typing import Any

from ..violations import KINDS
from .base import HandlerConfigError, Incident, Options, ViolationHandler

log = logging.getLogger(__name__)


EVENT_SCHEMA_ID = "https://events.jupyter.org/jupyter_gpuhive/violation"
_NULLABLE_STRING = {"type": ["string", "null"]}
EVENT_SCHEMA: dict[str, Any] = {
    "$id": EVENT_SCHEMA_ID,
    "version": "1",
    "title": "gpuhive violation",
    "description": "A GPU used against its reservation, or a reservation left idle.",
    "type": "object",
    "required": ["kind", "message", "host", "gpu"],
    "properties": {
        "kind": {"type": "string", "enum": list(KINDS)},
        "message": {"type": "string"},
        "violation": {"type": "integer"},
        "host": {"type": "string"},
        "gpu": {"type": "string"},
        "gpu_uuid": {"type": "string"},
        "offender": _NULLABLE_STRING,
        "holder": _NULLABLE_STRING,
        "reservation": {"type": ["integer", "null"]},
        "reservation_title": _NULLABLE_STRING,
        "reservation_end": _NULLABLE_STRING,
        "since": {"type": "string"},
        "pids": {"type": "array", "items": {"type": "integer"}},
        "detail": _NULLABLE_STRING,
    },
}


# Every user of the server may subscribe to its event bus: the offender's command lines, which
# only the people involved and admins may see (docs/privacy.md), stay out of it. PIDs stay: any
# user of the host sees them with `ps`, and the toast names them.
PRIVATE_FIELDS = ("commands",)


class EventHandler(ViolationHandler):
    """Hands the incident to the server's event publisher (the Lab UI toasts the holder)."""

    def configure(self, opts: Options) -> None:
        if self.context.publish is None:
            raise HandlerConfigError(
                f"violation handler '{self.name}' needs an event publisher, and none was given."
            )

    async def handle(self, incident: Incident, step: Mapping[str, Any]) -> str:
        assert self.context.publish is not None
        data = {**incident.to_json(), "message": self.text(incident, step)}
        for name in PRIVATE_FIELDS:
            data.pop(name, None)
        result = self.context.publish(data)
        if inspect.isawaitable(result):
            await result
        return f"event published for {incident.holder or 'the admins'}"
