"""What each endpoint method takes and answers, declared next to it for the OpenAPI document.

    @web.authenticated
    @operation("Book GPUs", 201, body=NewReservation, reply=ReservationReply, errors=(409,))
    async def post(self) -> None:
        booking = self.body(NewReservation).value()

The handler reads its body and query parameters with the same models (`HiveLogic.body`,
`HiveLogic.query` refuse a model the method did not declare), so the document cannot drift
from what the server reads. Error statuses that follow from an operation's shape (401/403;
400/413/422 with a body; 400/422 with query parameters; 404 with a path id) are added by
the document; `errors` names the others it can answer (404, 409, 503, ...).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel

from ...model import ID_MAX

F = TypeVar("F", bound=Callable[..., Any])
_ATTRIBUTE = "gpuhive_operation"  # functools.wraps (web.authenticated) carries it outward
METHODS = ("get", "post", "put", "patch", "delete")

# Each parameter named in braces in a route's path: the pattern the route matches, and the
# schema the document promises (an id that is not ASCII digits up to ID_MAX is a 404: id_arg).
PATH_PARAMETERS: dict[str, tuple[str, dict[str, Any]]] = {
    "id": ("([^/]+)", {"type": "integer", "minimum": 0, "maximum": ID_MAX}),
    "token": ("([^/]*)", {"type": "string", "pattern": "^[^/.]+$"}),
    "kernel": ("([^/]+)", {"type": "string", "pattern": "^[^/]+$"}),  # a Jupyter kernel id
    "group": ("([^/]+)", {"type": "string", "pattern": "^[^/]+$"}),  # a host group's name
}


@dataclass(frozen=True)
class Operation:
    """One HTTP method of one endpoint, as the OpenAPI document describes it."""

    summary: str
    status: int = 200
    body: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    reply: type[BaseModel] | None = None
    errors: tuple[int, ...] = ()
    media: str = "application/json"
    public: bool = False  # no Jupyter credentials (a feed: the token in its URL is one)
    idempotent: bool | None = None  # takes an Idempotency-Key (None: if it creates, 201)

    @property
    def keyed(self) -> bool:
        """Whether it takes an Idempotency-Key (its answer is stored for retries)."""
        return self.status == 201 if self.idempotent is None else self.idempotent


def operation(
    summary: str,
    status: int = 200,
    *,
    body: type[BaseModel] | None = None,
    query: type[BaseModel] | None = None,
    reply: type[BaseModel] | None = None,
    errors: tuple[int, ...] = (),
    media: str = "application/json",
    public: bool = False,
    idempotent: bool | None = None,
) -> Callable[[F], F]:
    """Declare a handler method's operation (put it under @web.authenticated)."""
    declared = Operation(summary, status, body, query, reply, errors, media, public, idempotent)

    def mark(method: F) -> F:
        setattr(method, _ATTRIBUTE, declared)
        return method

    return mark


def operation_of(handler: type, method: str) -> Operation | None:
    """The operation a handler class declares for an HTTP method (lower case), if any."""
    return getattr(getattr(handler, method, None), _ATTRIBUTE, None)


def implemented(handler: type) -> list[str]:
    """The HTTP methods (lower case) a handler class answers itself."""
    from tornado.web import RequestHandler

    return [m for m in METHODS if getattr(handler, m) is not getattr(RequestHandler, m)]
