"""The OpenAPI document of the REST API; a test keeps it equal to the route table."""

from __future__ import annotations

from typing import Any

from .._version import __version__

_ERROR = {"$ref": "#/components/schemas/Error"}
_ID = [{"name": "id", "in": "path", "required": True, "schema": {"type": "integer"}}]


def _q(name: str, description: str, kind: str = "string", fmt: str | None = None) -> dict:
    schema: dict[str, Any] = {"type": kind}
    if fmt:
        schema["format"] = fmt
    return {
        "name": name,
        "in": "query",
        "required": False,
        "schema": schema,
        "description": description,
    }


def _op(summary: str, ok: str, *errors: int, body: str | None = None, **extra: Any) -> dict:
    responses: dict[str, Any] = {
        ok: {"description": "OK", "content": {"application/json": {"schema": {"type": "object"}}}}
    }
    for code in (403, *errors):
        responses[str(code)] = {
            "description": "Error",
            "content": {"application/json": {"schema": _ERROR}},
        }
    op: dict[str, Any] = {"summary": summary, "responses": responses, **extra}
    if body:
        op["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{body}"}}},
        }
    return op


_WINDOW = [
    _q("start", "Window start (ISO 8601 with offset)", fmt="date-time"),
    _q("end", "Window end (ISO 8601 with offset)", fmt="date-time"),
    _q("host", "Only GPUs of this host"),
    _q("gpu", "Only this GPU ('host:index' or UUID)"),
]

PATHS: dict[str, dict[str, Any]] = {
    "/me": {"get": _op("Who am I: name, groups, admin flag", "200")},
    "/hosts": {
        "get": _op(
            "Live state of every host and GPU: metrics, processes with owners, who holds "
            "each GPU now and next",
            "200",
        )
    },
    "/metrics": {
        "get": _op(
            "Time series per host and GPU (points newer than 'since')",
            "200",
            422,
            parameters=[
                _q("host", "Only this host"),
                _q("gpu", "Only this GPU"),
                _q("since", "Only points after this instant", fmt="date-time"),
            ],
        )
    },
    "/usage": {
        "get": _op(
            "Reserved and used GPU-hours per user, per GPU and per reservation in a window",
            "200",
            422,
            parameters=[
                _q("start", "Window start (default: 7 days ago)", fmt="date-time"),
                _q("end", "Window end (default: now)", fmt="date-time"),
            ],
        )
    },
    "/reservations/{id}/usage": {
        "get": _op("Usage of one reservation (live while it runs)", "200", 404, parameters=_ID)
    },
    "/reservations": {
        "get": _op(
            "Reservations overlapping a window",
            "200",
            422,
            parameters=[
                *_WINDOW,
                _q("user", "Only this owner"),
                _q("include_cancelled", "Also cancelled ones", "boolean"),
                _q("limit", "At most this many (1–10000)", "integer"),
            ],
        ),
        "post": _op("Book GPUs", "201", 400, 409, 422, body="NewReservation"),
    },
    "/reservations/{id}": {
        "get": _op("One reservation", "200", 404, parameters=_ID),
        "patch": _op(
            "Edit (owner or admin)",
            "200",
            400,
            404,
            409,
            422,
            parameters=_ID,
            body="ReservationChange",
        ),
        "delete": _op(
            "Cancel an upcoming reservation or end a running one now",
            "200",
            404,
            409,
            parameters=_ID,
        ),
    },
    "/overview": {
        "get": _op(
            "GPU × time-slot occupancy: 'f' free, 'm' mine, 'o' others",
            "200",
            422,
            parameters=[*_WINDOW, _q("slot", "Slot size, e.g. '1h', '1d' or seconds")],
        )
    },
    "/rules": {
        "get": _op("Access rules (admins: all; others: those that apply to them)", "200"),
        "post": _op("Add an access rule (admin)", "201", 400, 422, body="Rule"),
    },
    "/rules/coverage": {
        "get": _op("When the requester may book each GPU", "200", 422, parameters=_WINDOW)
    },
    "/rules/{id}": {
        "get": _op("One access rule", "200", 404, parameters=_ID),
        "put": _op(
            "Replace an access rule (admin)", "200", 400, 404, 422, parameters=_ID, body="Rule"
        ),
        "delete": _op("Delete an access rule (admin)", "200", 404, parameters=_ID),
    },
    "/openapi.json": {"get": _op("This document", "200")},
}

_INSTANT = {"type": "string", "format": "date-time"}
SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "required": ["message"],
        "properties": {"message": {"type": "string"}, "conflicts": {"type": "array"}},
    },
    "NewReservation": {
        "type": "object",
        "required": ["title", "gpus"],
        "properties": {
            "title": {"type": "string", "maxLength": 200},
            "description": {"type": "string", "maxLength": 4000},
            "gpus": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            "start": _INSTANT,
            "end": _INSTANT,
            "duration": {"type": "string", "example": "2h"},
            "owner": {"type": "string", "description": "Admins only: book for someone else"},
        },
    },
    "ReservationChange": {
        "type": "object",
        "properties": {
            "title": {"type": "string"},
            "description": {"type": "string"},
            "gpus": {"type": "array", "items": {"type": "string"}},
            "start": _INSTANT,
            "end": _INSTANT,
            "duration": {"type": "string"},
        },
    },
    "Rule": {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "users": {"type": "array", "items": {"type": "string"}},
            "groups": {"type": "array", "items": {"type": "string"}},
            "hosts": {"type": "array", "items": {"type": "string"}},
            "gpus": {"type": "array", "items": {"type": "string"}},
            "windows": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "days": {"type": "array", "items": {"type": "string"}},
                        "start": {"type": "string", "example": "08:00"},
                        "end": {"type": "string", "example": "16:00"},
                    },
                },
            },
            "valid_from": {"type": "string", "format": "date"},
            "valid_until": {"type": "string", "format": "date"},
        },
    },
}


def openapi_document(base_url: str = "/") -> dict[str, Any]:
    """The OpenAPI 3 document, with the server's base URL."""
    return {
        "openapi": "3.0.3",
        "info": {"title": "jupyter-gpuhive", "version": __version__},
        "servers": [{"url": base_url.rstrip("/") + "/gpuhive/api"}],
        "security": [{"token": []}],
        "paths": PATHS,
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {
                "token": {"type": "apiKey", "in": "header", "name": "Authorization"}
            },
        },
    }
