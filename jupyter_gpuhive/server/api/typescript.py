"""TypeScript types of the REST API, generated from its OpenAPI document's schemas.

`python -m jupyter_gpuhive.server.api.typescript > labextension/src/api-types.ts` writes
them; `--check FILE` exits 1 when FILE is not what would be written (`make lint` runs it).
One `export interface` per object schema, one `export type` per other schema (enums become
unions of string literals); a property the schema does not require is optional.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from . import openapi_document

HEADER = (
    "/**\n"
    " * The REST API's types, generated from its OpenAPI document (server/api/openapi.py)\n"
    " * by `python -m jupyter_gpuhive.server.api.typescript`. Do not edit: `make lint` checks\n"
    " * that this file is what the generator writes.\n"
    " */\n"
)
REF = re.compile(r"#/components/schemas/(\w+)\Z")
IDENTIFIER = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*\Z")
PRIMITIVES = {"string": "string", "integer": "number", "number": "number", "boolean": "boolean"}


def literal(value: Any) -> str:
    """A JSON value as a TypeScript literal type (strings in single quotes, as the lint says)."""
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return json.dumps(value)


def union(parts: list[str]) -> str:
    """`a | b` without repeats; `unknown` for none."""
    unique = list(dict.fromkeys(parts))
    return " | ".join(unique) if unique else "unknown"


def type_of(schema: Any, indent: str = "") -> str:
    """The TypeScript type of a JSON schema (refs by their component name)."""
    if not isinstance(schema, dict) or not schema:
        return "unknown"
    if "$ref" in schema:
        found = REF.match(schema["$ref"])
        return found.group(1) if found else "unknown"
    if "const" in schema:
        return literal(schema["const"])
    if "enum" in schema:
        return union([literal(value) for value in schema["enum"]])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return union([_wrapped(type_of(part, indent)) for part in schema[key]])
    if "allOf" in schema and len(schema["allOf"]) == 1:
        return type_of(schema["allOf"][0], indent)
    kind = schema.get("type")
    if isinstance(kind, list):
        return union([type_of({**schema, "type": one}, indent) for one in kind])
    if kind == "null":
        return "null"
    if kind in PRIMITIVES:
        return PRIMITIVES[kind]
    if kind == "array":
        items = schema.get("prefixItems")
        if items and schema.get("items") is False:
            return "[" + ", ".join(type_of(item, indent) for item in items) + "]"
        return f"{_wrapped(type_of(schema.get('items'), indent))}[]"
    if kind == "object" or "properties" in schema:
        return object_type(schema, indent)
    return "unknown"


def _wrapped(text: str) -> str:
    """A union or function type in parentheses, where `[]` or `|` would bind wrongly."""
    return f"({text})" if " | " in text and not text.startswith("{") else text


def object_type(schema: dict[str, Any], indent: str = "") -> str:
    """`{ ... }` with one line per property; extra properties as an index signature."""
    properties: dict[str, Any] = schema.get("properties", {})
    extra = schema.get("additionalProperties")
    if not properties:
        if isinstance(extra, dict):
            return f"{{ [key: string]: {type_of(extra, indent)} }}"
        return "{ [key: string]: unknown }"
    return "{\n" + members(schema, indent + "  ") + indent + "}"


def members(schema: dict[str, Any], indent: str) -> str:
    """The property lines of an object schema (with their descriptions as doc comments)."""
    required = set(schema.get("required", ()))
    lines = []
    for name, prop in schema.get("properties", {}).items():
        description = prop.get("description") if isinstance(prop, dict) else None
        if description:
            lines.append(f"{indent}/** {_comment(description)} */")
        key = name if IDENTIFIER.match(name) else literal(name)
        optional = "" if name in required else "?"
        lines.append(f"{indent}{key}{optional}: {type_of(prop, indent)};")
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        lines.append(f"{indent}[key: string]: unknown;")
    return "".join(line + "\n" for line in lines)


def _comment(text: str) -> str:
    return " ".join(text.split()).replace("*/", "*\\/")


def declaration(name: str, schema: dict[str, Any]) -> str:
    """One component as `export interface` (objects with properties) or `export type`."""
    doc = schema.get("description")
    head = f"/** {_comment(doc)} */\n" if doc else ""
    if schema.get("type") == "object" and schema.get("properties"):
        return f"{head}export interface {name} {{\n{members(schema, '  ')}}}\n"
    return f"{head}export type {name} = {type_of(schema)};\n"


def generate(document: dict[str, Any] | None = None) -> str:
    """The whole file: every component schema of the document, in name order."""
    schemas = (document or openapi_document("/"))["components"]["schemas"]
    body = "\n".join(declaration(name, schemas[name]) for name in sorted(schemas))
    return f"{HEADER}\n{body}"


def main(argv: list[str]) -> int:
    """Print the file, or with `--check FILE` say whether FILE is up to date (1: it is not)."""
    text = generate()
    if argv[:1] == ["--check"] and len(argv) == 2:
        if Path(argv[1]).read_text() == text:
            return 0
        print(
            f"{argv[1]} is not what the OpenAPI document gives; regenerate it with\n"
            f"  python -m jupyter_gpuhive.server.api.typescript > {argv[1]}",
            file=sys.stderr,
        )
        return 1
    if argv:
        print("usage: python -m jupyter_gpuhive.server.api.typescript [--check FILE]")
        return 2
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
