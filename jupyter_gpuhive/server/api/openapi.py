"""The OpenAPI document of the REST API; a test keeps it equal to the route table."""

from __future__ import annotations

from typing import Any

from ..._version import __version__
from ...integrations.webhooks import EVENTS
from ...store.schema import ID_MAX
from .inputs import INT_MAX, MAX_BODY_BYTES

_ERROR = {"$ref": "#/components/schemas/Error"}
_ID = [
    {
        "name": "id",
        "in": "path",
        "required": True,
        "schema": {"type": "integer", "minimum": 0, "maximum": ID_MAX},
    }
]

# What each error status means, for every operation that can answer it.
_MEANING = {
    400: "Malformed: not JSON, a wrong type, nested too deeply, not valid Unicode",
    401: "No valid credentials (send 'Authorization: token <token>')",
    403: "Authenticated, but not allowed to do this",
    404: "No such thing (ids are ASCII digits)",
    409: "Clashes with the current state (the message names what is in the way)",
    413: f"The request body is over {MAX_BODY_BYTES} bytes",
    422: "Well-formed, but unacceptable values (the message says which and why)",
    503: "A host cannot be reached or cannot do this now",
}


def _q(
    name: str, description: str, kind: str = "string", fmt: str | None = None, **limits: Any
) -> dict:
    schema: dict[str, Any] = {"type": kind, **limits}
    if fmt:  # an empty value means the default
        schema["anyOf"] = [{"format": fmt}, {"maxLength": 0}]
    return {
        "name": name,
        "in": "query",
        "required": False,
        "schema": schema,
        "description": description,
    }


def _op(summary: str, ok: str, *errors: int, body: str | None = None, **extra: Any) -> dict:
    """One operation; the error statuses follow from its shape, plus those named."""
    responses: dict[str, Any] = {
        ok: {"description": "OK", "content": {"application/json": {"schema": {"type": "object"}}}}
    }
    codes = {401, 403, *errors}
    parameters = extra.get("parameters", [])
    if any(p["in"] == "query" for p in parameters):
        codes |= {400, 422}  # not UTF-8; a value out of range or of the wrong kind
    if any(p["in"] == "path" for p in parameters):
        codes.add(404)
    if body:
        codes |= {400, 413, 422}
    for code in sorted(codes):
        responses[str(code)] = {
            "description": _MEANING[code],
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
    "/me/ssh": {
        "get": _op(
            "The public key to add to ~/.ssh/authorized_keys, and per SSH host whether "
            "gpuhive can already log in as me (needed to run my jobs)",
            "200",
        )
    },
    "/hosts": {
        "get": _op(
            "Live state of every host and GPU: metrics, processes with owners, who holds "
            "each GPU now and next; on a host that is down, 'advice' (the reason and the fix); "
            "with no hosts, 'setup' (the first steps)",
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
            "Reserved and used GPU-hours per GPU and for the site in a window; per user and "
            "per reservation: one's own rows (admins: all; see docs/privacy.md)",
            "200",
            422,
            parameters=[
                _q("start", "Window start (default: 7 days ago)", fmt="date-time"),
                _q("end", "Window end (default: now)", fmt="date-time"),
            ],
        )
    },
    "/violations": {
        "get": _op(
            "Violation history (foreign, unreserved, ghost, idle) with the actions taken, "
            "and those ongoing now: those the requester holds or caused (admins: all)",
            "200",
            422,
            parameters=[
                _q("start", "Window start (default: 7 days ago)", fmt="date-time"),
                _q("end", "Window end (default: now)", fmt="date-time"),
                _q("user", "Offender or holder"),
                _q("host", "Only this host"),
                _q(
                    "reservation",
                    "Only during this reservation",
                    "integer",
                    minimum=0,
                    maximum=ID_MAX,
                ),
                _q("kind", "foreign, unreserved, ghost or idle (repeatable)"),
                _q("limit", "At most this many (1–10000)", "integer", minimum=1, maximum=10000),
            ],
        )
    },
    "/reservations/{id}/usage": {
        "get": _op(
            "Usage of one reservation (live while it runs; owner and admins)",
            "200",
            404,
            parameters=_ID,
        )
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
                _q("limit", "At most this many (1–10000)", "integer", minimum=1, maximum=10000),
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
    "/templates": {"get": _op("Job templates with their fields, options and an example", "200")},
    "/jobs": {
        "get": _op(
            "Jobs, optionally of one user or in one status; others' jobs as a summary "
            "(no command, variables, options or env); env values always masked",
            "200",
            parameters=[_q("user", "Only this owner"), _q("status", "Only this status")],
        ),
        "post": _op(
            "Create a job from a template ('start': true runs it now)",
            "201",
            404,
            409,
            body="NewJob",
        ),
    },
    "/queue": {
        "get": _op(
            "Queued jobs not yet running, with their projected start (from the queue's own "
            "plan: for the first 32 waiting jobs a start they will not miss unless a booking, "
            "a foreign process or a host failure intervenes) and what they wait for",
            "200",
        )
    },
    "/jobs/preview": {
        "post": _op(
            "The exact per-task commands and environments, without creating anything",
            "200",
            404,
            409,
            body="NewJob",
        )
    },
    "/jobs/{id}": {
        "get": _op(
            "One job with its tasks (its definition for the owner and admins)",
            "200",
            404,
            parameters=_ID,
        ),
        "delete": _op(
            "Delete a job that is not running (owner/admin)", "200", 404, 409, parameters=_ID
        ),
    },
    "/jobs/{id}/start": {
        "post": _op("Start (or restart) a job now (owner/admin)", "200", 404, 409, parameters=_ID)
    },
    "/jobs/{id}/stop": {
        "post": _op(
            "Stop gracefully: SIGINT, then SIGKILL after a grace", "200", 404, 409, parameters=_ID
        )
    },
    "/jobs/{id}/enqueue": {
        "post": _op(
            "Put the job in the queue (runs in non-reserved time)", "200", 404, 409, parameters=_ID
        )
    },
    "/jobs/{id}/dequeue": {
        "post": _op("Take the job out of the queue", "200", 404, 409, parameters=_ID)
    },
    "/jobs/{id}/log": {
        "get": _op(
            "A task's log from 'offset' (or its last 'tail' bytes), and how to attach",
            "200",
            404,
            422,
            503,
            parameters=[
                *_ID,
                _q("task", "Task index (default 0)", "integer", minimum=0, maximum=INT_MAX),
                _q("offset", "Byte offset to read from", "integer", minimum=0, maximum=INT_MAX),
                _q("tail", "Only the last N bytes", "integer", minimum=0, maximum=INT_MAX),
            ],
        )
    },
    "/feeds": {
        "get": _op("My calendar feed (without its token) and, for admins, the site feeds", "200")
    },
    "/feeds/personal": {
        "post": _op(
            "Make or rotate my calendar feed; the answer's 'url' (shown only now) is the "
            "feed, and the old URL stops working (404)",
            "201",
        ),
        "delete": _op("Turn my calendar feed off", "200", 404),
    },
    "/feeds/site": {
        "post": _op(
            "Publish a site feed (admin): every reservation, or one host's; the answer's "
            "'url' is shown only now",
            "201",
            body="SiteFeed",
        )
    },
    "/feeds/site/{id}": {
        "delete": _op("Stop a site feed (admin); its URL then answers 404", "200", parameters=_ID)
    },
    "/calendar/{token}.ics": {
        "get": {
            "summary": "An iCalendar (RFC 5545) feed; the token in the URL is its only "
            "credential (no Jupyter token needed or used)",
            "security": [],
            "parameters": [
                {
                    "name": "token",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string", "pattern": "^[^/.]+$"},
                }
            ],
            "responses": {
                "200": {
                    "description": "The feed",
                    "content": {"text/calendar": {"schema": {"type": "string"}}},
                },
                "404": {
                    "description": "No feed has this token (it may have been rotated)",
                    "content": {"application/json": {"schema": _ERROR}},
                },
            },
        }
    },
    "/webhooks": {
        "get": _op("My webhook endpoints (admins: all); URLs masked, secrets never shown", "200"),
        "post": _op(
            "Add a webhook endpoint; the answer holds its full URL and signing secret, shown "
            "only now ('site': true, admins only, gets everyone's events)",
            "201",
            body="NewWebhook",
        ),
    },
    "/webhooks/{id}": {
        "get": _op("One of my webhook endpoints (URL masked)", "200", parameters=_ID),
        "delete": _op("Remove one of my webhook endpoints", "200", parameters=_ID),
    },
    "/webhooks/{id}/deliveries": {
        "get": _op(
            "The delivery log of an endpoint: per event its state (pending, delivered, "
            "dead) and every attempt's outcome",
            "200",
            parameters=[
                *_ID,
                _q("limit", "At most this many (1–1000)", "integer", minimum=1, maximum=1000),
            ],
        )
    },
    "/subscriptions": {
        "get": _op("My availability subscriptions (admins: all)", "200"),
        "post": _op(
            "Tell me when N GPUs (on a host, or of a model) are free for a duration before a "
            "deadline; fires through the chosen channels (lab, email, webhook) once, or on "
            "every new slot with 'repeat'",
            "201",
            body="NewSubscription",
        ),
    },
    "/subscriptions/{id}": {
        "get": _op("One of my subscriptions, with its last offer", "200", parameters=_ID),
        "delete": _op("End one of my subscriptions", "200", parameters=_ID),
    },
    "/subscriptions/{id}/book": {
        "post": _op(
            "Book exactly the slot the subscription last offered, if it is still free",
            "201",
            409,
            422,
            parameters=_ID,
        )
    },
    "/digest": {
        "get": _op("My daily digest e-mail setting", "200"),
        "put": _op(
            "Turn my daily digest e-mail on or off (today's and tomorrow's reservations, "
            "GPUs left idle yesterday, violations on my GPUs)",
            "200",
            body="DigestSetting",
        ),
    },
    "/openapi.json": {"get": _op("This document", "200")},
}

_EVENTS = list(EVENTS)  # the webhook events, from where they are defined

_INSTANT = {"type": "string", "format": "date-time"}
# Durations: text like '90s', '15m', '2h', '1d', or a number of seconds.
_DURATION = {
    "anyOf": [
        {"type": "string", "example": "2h"},
        {"type": "number", "minimum": 0, "exclusiveMinimum": True},
    ]
}
_NAMES = {"type": "array", "items": {"type": "string", "minLength": 1, "pattern": r"\S"}}


def _text(limit: int, required: bool = False) -> dict[str, Any]:
    """A text field: at most `limit` characters; a required one also not blank."""
    if required:
        return {"type": "string", "minLength": 1, "maxLength": limit, "pattern": r"\S"}
    return {"type": "string", "maxLength": limit}


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
            "title": _text(200, required=True),
            "description": _text(4000),
            "gpus": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            "start": _INSTANT,
            "end": _INSTANT,
            "duration": _DURATION,
            "owner": {"type": "string", "description": "Admins only: book for someone else"},
        },
    },
    "ReservationChange": {
        "type": "object",
        "description": "Only these fields can change; any other field is refused (400).",
        "additionalProperties": False,
        "properties": {
            "title": _text(200, required=True),
            "description": _text(4000),
            "gpus": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            "start": _INSTANT,
            "end": _INSTANT,
            "duration": _DURATION,
        },
    },
    "NewJob": {
        "type": "object",
        "required": ["name", "command"],
        "properties": {
            "name": _text(120, required=True),
            "description": _text(4000),
            "template": {
                "type": "string",
                "enum": ["plain", "pytorch", "tensorflow", "tf-clusterspec"],
            },
            "command": {
                **_text(100_000, required=True),
                "description": "Command template with {fields}",
            },
            "gpus": {"type": "array", "items": {"type": "string"}},
            "reservation": {"type": "integer", "minimum": 0, "maximum": ID_MAX},
            "options": {"type": "object"},
            "variables": {"type": "object"},
            "sweep": {
                "anyOf": [{"type": "object"}, {"type": "array", "items": {"type": "string"}}],
                "description": "{'lr': ['0.1', '0.01']} or ['lr=0.1,0.01']",
            },
            "env": {"type": "object"},
            "workdir": {"type": "string"},
            "queued": {"type": "boolean"},
            "same_host": {
                "type": "string",
                "enum": ["required", "preferred", "any"],
                "description": "Where a job that asks for a GPU count (options.gpu_count) may "
                "run: all GPUs on one host, waiting for one (required, the default when the "
                "count fits the largest host); one host when one can take it, else as few "
                "as possible (preferred, the default for bigger jobs); anywhere, fullest "
                "hosts first (any). Also accepted in options.",
            },
            "walltime": _DURATION,
            "start_at": _INSTANT,
            "stop_at": _INSTANT,
            "max_retries": {"type": "integer", "minimum": 0, "maximum": 10},
            "start": {"type": "boolean", "description": "Run now"},
        },
    },
    "SiteFeed": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "host": {
                "type": "string",
                "nullable": True,
                "description": "Only this host's GPUs (absent or null: every host)",
            }
        },
    },
    "NewWebhook": {
        "type": "object",
        "required": ["url"],
        "additionalProperties": False,
        "properties": {
            "url": {"type": "string", "pattern": "^https?://[^/?#]+", "maxLength": 2000},
            "format": {"type": "string", "enum": ["json", "slack"]},
            "events": {
                "type": "array",
                "minItems": 1,
                "items": {"type": "string", "enum": [*_EVENTS, "*"]},
            },
            "site": {"type": "boolean", "description": "Admins only: everyone's events"},
        },
    },
    "NewSubscription": {
        "type": "object",
        "required": ["duration"],
        "additionalProperties": False,
        "properties": {
            "gpus": {"type": "integer", "minimum": 1, "maximum": 64},
            "host": {
                **_text(128, required=True),
                "nullable": True,
                "description": "Only this host",
            },
            "model": {
                **_text(128, required=True),
                "nullable": True,
                "description": "GPU model contains this",
            },
            "duration": _DURATION,
            "deadline": {**_INSTANT, "nullable": True},
            "channels": {
                "type": "array",
                "minItems": 1,
                "items": {"type": "string", "enum": ["lab", "email", "webhook"]},
            },
            "email": {"type": "string", "pattern": "@", "nullable": True},
            "repeat": {"type": "boolean"},
        },
    },
    "DigestSetting": {
        "type": "object",
        "required": ["enabled"],
        "additionalProperties": False,
        "properties": {
            "enabled": {"type": "boolean"},
            "email": {"type": "string", "pattern": "@", "nullable": True},
        },
    },
    "Rule": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 120},
            "users": _NAMES,
            "groups": _NAMES,
            "hosts": _NAMES,
            "gpus": _NAMES,
            "windows": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "days": {
                            "type": "array",
                            "minItems": 1,
                            "items": {
                                "anyOf": [
                                    {"type": "string", "example": "mon-fri"},
                                    {"type": "integer", "minimum": 0, "maximum": 6},
                                ]
                            },
                        },
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


_DESCRIPTION = (
    "GPU reservations, monitoring and jobs. Every error is JSON {'message': '…'} with a "
    "sentence that says what is wrong: 400 malformed, 401 no valid credentials, 403 not "
    "allowed, 404 no such thing, 409 a clash with the current state, 413 a request body "
    f"over {MAX_BODY_BYTES} bytes ({MAX_BODY_BYTES // 1024} KiB, the one size limit), "
    "422 unacceptable values, 503 a host cannot do it now. Ids are ASCII digits up to "
    f"{ID_MAX}; whole-number query parameters lie within ±{INT_MAX}."
)


def openapi_document(base_url: str = "/") -> dict[str, Any]:
    """The OpenAPI 3 document, with the server's base URL."""
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "jupyter-gpuhive",
            "version": __version__,
            "description": _DESCRIPTION,
        },
        "servers": [{"url": base_url.rstrip("/") + "/gpuhive/api"}],
        "security": [{"token": []}],
        "paths": PATHS,
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {
                "token": {
                    "type": "apiKey",
                    "in": "header",
                    "name": "Authorization",
                    "description": "'token <token>': a Jupyter server or JupyterHub token",
                }
            },
        },
    }
