"""The Lab extension's REST API types (labextension/src/api-types.ts) are generated from the
OpenAPI document and checked in; `make lint` and this test fail when they differ."""

from __future__ import annotations

from pathlib import Path

from jupyter_gpuhive.server.api import openapi_document
from jupyter_gpuhive.server.api.typescript import generate, main

CHECKED_IN = Path(__file__).resolve().parents[2] / "labextension" / "src" / "api-types.ts"


def test_the_checked_in_types_are_what_the_document_gives() -> None:
    assert CHECKED_IN.read_text() == generate(), (
        "regenerate: python -m jupyter_gpuhive.server.api.typescript > labextension/src/api-types.ts"
    )


def test_every_schema_of_the_document_has_a_type() -> None:
    text = generate()
    for name in openapi_document("/")["components"]["schemas"]:
        assert f"export interface {name} {{" in text or f"export type {name} = " in text


def test_the_states_are_unions_of_their_values() -> None:
    text = generate()
    assert "export type ReservationStatus = 'cancelled' | 'upcoming' | 'active' | 'ended';" in text
    assert "  status: ReservationStatus;\n" in text
    assert "export type TaskState = 'pending' | 'starting' | 'running'" in text


def test_the_generator_maps_json_schema() -> None:
    document = {
        "components": {
            "schemas": {
                "A": {
                    "type": "object",
                    "description": "An A.",
                    "required": ["n"],
                    "properties": {
                        "n": {"type": "integer", "description": "a number"},
                        "s": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                        "l": {"type": "array", "items": {"$ref": "#/components/schemas/E"}},
                        "m": {"type": "object", "additionalProperties": {"type": "boolean"}},
                        "it's": {"enum": ["x", "y's"]},
                        "u": {
                            "type": "array",
                            "items": {"anyOf": [{"type": "string"}, {"type": "number"}]},
                        },
                    },
                },
                "E": {"enum": ["a", "b"], "type": "string"},
            }
        }
    }
    assert generate(document).split("\n", 6)[-1] == (
        "/** An A. */\n"
        "export interface A {\n"
        "  /** a number */\n"
        "  n: number;\n"
        "  s?: string | null;\n"
        "  l?: E[];\n"
        "  m?: { [key: string]: boolean };\n"
        "  'it\\'s'?: 'x' | 'y\\'s';\n"
        "  u?: (string | number)[];\n"
        "}\n"
        "\n"
        "export type E = 'a' | 'b';\n"
    )


def test_check_says_when_the_file_is_stale(tmp_path: Path) -> None:
    stale = tmp_path / "api-types.ts"
    stale.write_text("export interface Old {}\n")
    assert main(["--check", str(stale)]) == 1
    stale.write_text(generate())
    assert main(["--check", str(stale)]) == 0
