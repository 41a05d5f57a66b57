"""The OpenAPI 3.1 document, generated from the route table and the models.

Paths come from the route table (`server.api.ENDPOINTS`, passed in: `openapi_document` there),
path parameters from their names in braces (`operations.PATH_PARAMETERS`), each method's
summary, body, query parameters, answer, extra error statuses and whether it is public from
its `@operation`, and every schema from the pydantic models (their `$defs` become
components/schemas). Nothing here is written per endpoint.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from jupyter_server.auth.decorator import authorized
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema
from tornado import web

from ..._version import __version__
from ...model import ID_MAX
from ...model.authority import READ
from .base import HiveLogic
from .inputs import INT_MAX, MAX_BODY_BYTES
from .operations import PATH_PARAMETERS, Operation, implemented, operation, operation_of
from .schemas import BODIES, REPLIES, ErrorReply

REF = "#/components/schemas/{model}"

# What each error status means, for every operation that can answer it.
MEANING = {
    400: "Malformed: not JSON, a wrong type, nested too deeply, not valid Unicode",
    401: "No valid credentials (send 'Authorization: token <token>')",
    403: "Authenticated, but not allowed to do this",
    404: "No such thing (ids are ASCII digits)",
    409: "Clashes with the current state (the message names what is in the way)",
    413: f"The request body is over {MAX_BODY_BYTES} bytes",
    422: "Well-formed, but unacceptable values (the message says which and why)",
    503: "A host cannot be reached or cannot do this now, or the service is busy (more "
    "requests in flight than it serves at once, or the request waited past its deadline or "
    "past the time its client said it waits; "
    "nothing was changed): retry after the Retry-After header's seconds",
}
# What 409 and 422 also mean where an Idempotency-Key is taken.
KEYED_MEANING = {
    409: " — or a request with the same Idempotency-Key is still running (retry after "
    "Retry-After to get its answer)",
    422: " — or the Idempotency-Key was used for a different request",
}
IDEMPOTENCY_KEY = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "description": "A new key per request (1 to 255 visible ASCII characters, e.g. a UUID), "
    "the same with each retry of it: a retry gets the first answer again (with "
    "'Idempotent-Replayed: true') instead of doing the work twice. Per user; kept 24 hours.",
    "schema": {"type": "string", "pattern": "^[!-~]{1,255}$"},
}
SUCCESS = {200: "OK", 201: "Created"}

DESCRIPTION = (
    "GPU reservations, monitoring and jobs. Every error is JSON {'message': '…'} with a "
    "sentence that says what is wrong: 400 malformed, 401 no valid credentials, 403 not "
    "allowed, 404 no such thing, 409 a clash with the current state, 413 a request body "
    f"over {MAX_BODY_BYTES} bytes ({MAX_BODY_BYTES // 1024} KiB, the one size limit), "
    "422 unacceptable values, 503 a host cannot do it now or the service is busy (retry "
    "after Retry-After). Creating POSTs take an Idempotency-Key header. A client may say how "
    "many seconds it waits for an answer (Gpuhive-Client-Timeout header, more than 0 and at "
    "most 3600; counted from the load balancer's X-Request-Start where one sets it): past "
    "that, the request changes nothing and is answered 503. Ids are ASCII digits up to "
    f"{ID_MAX}; whole-number query parameters lie within ±{INT_MAX}. Text fields are "
    "trimmed of surrounding whitespace (their limits apply to the text as sent), except a "
    "job's command, which is kept exactly as sent."
)
SECURITY_SCHEMES = {
    "token": {
        "type": "apiKey",
        "in": "header",
        "name": "Authorization",
        "description": "'token <token>': a Jupyter server or JupyterHub token",
    }
}


def _schemas(models: Iterable[type[BaseModel]]) -> dict[str, Any]:
    """components/schemas: each model under its name, nested models ($defs) beside them."""
    unique = list(dict.fromkeys(models))
    _, top = models_json_schema([(m, "validation") for m in unique], ref_template=REF)
    return dict(sorted(top.get("$defs", {}).items()))


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": REF.format(model=model.__name__)}


def _without_titles(schema: Any) -> Any:
    """A schema without pydantic's generated 'title' keywords (the names say it already)."""
    if isinstance(schema, list):
        return [_without_titles(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in ("properties", "$defs") and isinstance(value, dict):
            out[key] = {name: _without_titles(v) for name, v in value.items()}
        else:
            out[key] = _without_titles(value)
    return out


def query_parameters(model: type[BaseModel]) -> list[dict[str, Any]]:
    """The query parameters a model declares, as OpenAPI parameter objects."""
    properties = model.model_json_schema()["properties"]
    out = []
    for name, field in model.model_fields.items():
        schema = _without_titles(properties[name])
        description = schema.pop("description", None) or field.description or name
        schema.pop("default", None)
        out.append(
            {
                "name": name,
                "in": "query",
                "required": False,
                "schema": schema,
                "description": description,
            }
        )
    return out


def path_parameters(path: str, kinds: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The parameters named in braces in a route's path."""
    return [
        {"name": name, "in": "path", "required": True, "schema": kinds[name]}
        for name in re.findall(r"{(\w+)}", path)
    ]


def _operation(
    op: Operation, path_params: list[dict[str, Any]], admitted: bool = True
) -> dict[str, Any]:
    """One operation object; the error statuses follow from its shape, plus those declared."""
    reply = _ref(op.reply) if op.reply else {"type": "object"}
    if op.media != "application/json":
        reply = {"type": "string"}
    responses: dict[str, Any] = {
        str(op.status): {
            "description": SUCCESS.get(op.status, "OK"),
            "content": {op.media: {"schema": reply}},
        }
    }
    codes = set(op.errors) if op.public else {401, 403, *op.errors}
    if admitted:  # counted against max_requests_in_flight, with a deadline
        codes.add(503)
    parameters = list(path_params)
    if op.keyed:
        parameters.append(IDEMPOTENCY_KEY)
        codes |= {400, 409, 422}
    if op.query is not None:
        parameters += query_parameters(op.query)
        codes |= {400, 422}  # not UTF-8; a value out of range or of the wrong kind
    if path_params:
        codes.add(404)
    if op.body is not None:
        codes |= {400, 413, 422}
    for code in sorted(codes):
        responses[str(code)] = {
            "description": MEANING[code] + (KEYED_MEANING.get(code, "") if op.keyed else ""),
            "content": {"application/json": {"schema": _ref(ErrorReply)}},
        }
    out: dict[str, Any] = {"summary": op.summary, "responses": responses}
    if parameters:
        out["parameters"] = parameters
    if op.body is not None:
        out["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": _ref(op.body)}},
        }
    if op.public:
        out["security"] = []
    return out


@lru_cache(maxsize=8)
def generate(endpoints: tuple[tuple[str, type], ...], base_url: str = "/") -> dict[str, Any]:
    """The document for a route table (path, handler class): every method each implements."""
    kinds = {name: schema for name, (_, schema) in PATH_PARAMETERS.items()}
    paths: dict[str, Any] = {}
    models: list[type[BaseModel]] = [ErrorReply, *BODIES, *REPLIES]
    for path, handler in endpoints:
        params = path_parameters(path, kinds)
        operations = {}
        for method in implemented(handler):
            op = operation_of(handler, method)
            if op is None:
                raise TypeError(f"{handler.__name__}.{method} ({path}) declares no @operation")
            operations[method] = _operation(op, params, getattr(handler, "admitted", True))
            models += [m for m in (op.body, op.reply) if m is not None]
        paths[path] = operations
    return {
        "openapi": "3.1.0",
        "info": {"title": "jupyter-gpuhive", "version": __version__, "description": DESCRIPTION},
        "servers": [{"url": base_url.rstrip("/") + "/gpuhive/api"}],
        "security": [{"token": []}],
        "paths": paths,
        "components": {
            "schemas": {k: _without_titles(v) for k, v in _schemas(models).items()},
            "securitySchemes": SECURITY_SCHEMES,
        },
    }


class OpenAPIHandler(HiveLogic):
    auth_resource = "gpuhive:api"

    @web.authenticated
    @authorized(READ)
    @operation("This document (OpenAPI 3.1, generated from the routes and their models)")
    async def get(self) -> None:
        self.reply(generate(self.endpoints, self.settings.get("base_url", "/")))
