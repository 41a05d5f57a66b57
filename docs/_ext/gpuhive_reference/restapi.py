"""The REST API reference, from the OpenAPI document the server serves."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from .text import fence, label, one_line, prose

METHODS = ("get", "post", "put", "patch", "delete")


def document() -> dict[str, Any]:
    """The OpenAPI document exactly as `GET {base_url}gpuhive/api/openapi.json` serves it."""
    from jupyter_gpuhive.server.api import openapi_document

    return openapi_document("/")


def operations(doc: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(METHOD, path, operation) for every operation, in the document's order."""
    for path, item in doc["paths"].items():
        for method in METHODS:
            if method in item:
                yield method.upper(), path, item[method]


def operation_label(method: str, path: str) -> str:
    """The Sphinx label of one operation, e.g. api-get-reservations-id."""
    return label("api", method, path)


def _resolve(doc: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if not isinstance(ref, str) or not ref.startswith("#/"):
        return schema
    node: Any = doc
    for part in ref[2:].split("/"):
        node = node[part]
    return _resolve(doc, node)


def schema_type(doc: dict[str, Any], schema: dict[str, Any]) -> str:
    """A short description of a schema's type: string (date-time), array of integer, …"""
    schema = _resolve(doc, schema)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            rest = {k: v for k, v in schema.items() if k not in ("anyOf", "oneOf")}
            kinds = dict.fromkeys(schema_type(doc, {**rest, **s}) for s in schema[key])
            return " or ".join(k for k in kinds if k)
    if "allOf" in schema:
        return " and ".join(schema_type(doc, s) for s in schema["allOf"])
    kind = schema.get("type", "")
    if isinstance(kind, list):
        kind = " or ".join(kind)
    if kind == "array":
        kind = "array of " + (schema_type(doc, schema["items"]) if "items" in schema else "any")
    if schema.get("format"):
        kind += f" ({schema['format']})"
    if schema.get("enum"):
        kind += ": " + ", ".join(json.dumps(v) for v in schema["enum"])
    if schema.get("nullable"):
        kind += ", or null"
    return kind.strip()


def _limits(schema: dict[str, Any]) -> str:
    parts = []
    for key, word in (
        ("minimum", "≥"),
        ("maximum", "≤"),
        ("minLength", "length ≥"),
        ("maxLength", "length ≤"),
        ("minItems", "items ≥"),
        ("maxItems", "items ≤"),
    ):
        if key in schema:
            parts.append(f"{word} {schema[key]}")
    if "example" in schema:
        parts.append(f"e.g. {json.dumps(schema['example'])}")
    return ", ".join(parts)


def _fields(
    doc: dict[str, Any], schema: dict[str, Any], prefix: str = ""
) -> Iterator[tuple[str, str, bool, str]]:
    """(name, type, required, description) of an object's properties, nested ones dotted."""
    schema = _resolve(doc, schema)
    required = set(schema.get("required", []))
    for name, prop in schema.get("properties", {}).items():
        prop = _resolve(doc, prop)
        notes = [one_line(prop.get("description", "")), _limits(prop)]
        yield (
            prefix + name,
            schema_type(doc, prop),
            name in required,
            "; ".join(n for n in notes if n),
        )
        items = prop.get("items", {}) if prop.get("type") == "array" else {}
        if _resolve(doc, items).get("properties"):
            yield from _fields(doc, items, f"{prefix}{name}[].")
        elif prop.get("properties"):
            yield from _fields(doc, prop, f"{prefix}{name}.")


def _operation(doc: dict[str, Any], method: str, path: str, op: dict[str, Any]) -> list[str]:
    out = [f"({operation_label(method, path)})=", f"### `{method} {path}`", ""]
    out += [prose(op.get("summary", "")), ""]
    if op.get("description"):
        out += [prose(op["description"]), ""]
    params = op.get("parameters", [])
    if params:
        out += [
            "| parameter | in | type | required | description |",
            "| --- | --- | --- | --- | --- |",
        ]
        for p in params:
            schema = p.get("schema", {})
            notes = "; ".join(n for n in (one_line(p.get("description", "")), _limits(schema)) if n)
            required = "yes" if p.get("required") else ""
            out.append(
                f"| `{p['name']}` | {p['in']} | {fence(schema_type(doc, schema))} | "
                f"{required} | {notes} |"
            )
        out.append("")
    body = op.get("requestBody", {}).get("content", {})
    for media, content in body.items():
        schema = content.get("schema", {})
        name = schema.get("$ref", "").rsplit("/", 1)[-1]
        out += [f"Request body ({media}){f': `{name}`' if name else ''}:", ""]
        fields = list(_fields(doc, schema))
        if fields:
            out += ["| field | type | required | description |", "| --- | --- | --- | --- |"]
            for field, kind, required, notes in fields:
                mark = "yes" if required else ""
                out.append(f"| `{field}` | {fence(kind)} | {mark} | {notes} |")
        else:
            out.append(f"{fence(schema_type(doc, schema)) or 'any JSON value'}")
        out.append("")
    out += ["| status | meaning |", "| --- | --- |"]
    for status, response in op.get("responses", {}).items():
        media = ", ".join(response.get("content", {}))
        meaning = one_line(response.get("description", ""))
        out.append(f"| {status} | {meaning}{f' ({media})' if media else ''} |")
    out.append("")
    return out


def api_page(doc: dict[str, Any] | None = None) -> str:
    """The REST API reference as MyST Markdown."""
    doc = doc or document()
    auth = doc["components"]["securitySchemes"]["token"]
    out = [
        "# REST API",
        "",
        "Generated at build time from the OpenAPI document that the server serves at "
        "`{base_url}gpuhive/api/openapi.json` (download this build's copy: "
        "{download}`openapi.json`). Paths below are relative to "
        f"`{{base_url}}gpuhive/api` (the document's server URL: `{doc['servers'][0]['url']}` "
        "on a server at `/`). In team mode the users' servers forward the same routes to the "
        "service.",
        "",
        f"OpenAPI {doc['openapi']}, API version {doc['info']['version']}.",
        "",
        prose(doc["info"].get("description", "")),
        "",
        f"Authentication: the `{auth['name']}` header, {prose(auth.get('description', ''))}.",
        "",
        "## Operations",
        "",
        "| operation | summary |",
        "| --- | --- |",
    ]
    ops = list(operations(doc))
    for method, path, op in ops:
        summary = one_line(op.get("summary", ""))
        out.append(f"| [`{method} {path}`](#{operation_label(method, path)}) | {summary} |")
    out.append("")
    groups: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for method, path, op in ops:
        groups.setdefault(path.strip("/").split("/")[0], []).append((method, path, op))
    for group, members in groups.items():
        out += [f"## `{group}`", ""]
        for method, path, op in members:
            out += _operation(doc, method, path, op)
    return "\n".join(out)


def document_json(doc: dict[str, Any] | None = None) -> str:
    """The OpenAPI document as the JSON text written next to the page."""
    return json.dumps(doc or document(), indent=2, ensure_ascii=False) + "\n"
