"""No user-facing text names an internal route (#48): every sentence in the package's string
literals (docstrings and the REST API's own descriptions aside) is scanned for `POST
reservations/search`-like words. A person is told of the sidebar or a magic instead."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import jupyter_gpuhive

PACKAGE = Path(jupyter_gpuhive.__file__).parent
# A method and a route: 'POST reservations/search', 'GET hosts', 'DELETE /jobs/{id}'.
ROUTE = re.compile(r"\b(GET|POST|PUT|PATCH|DELETE) /?[a-z_]+(/[a-z_{}]+)*\b")
SKIP = ("server/",)  # the API's own descriptions and the admins' settings: they name routes
API = "the REST API: "  # where the API is the only way, a sentence says so and gives the path


def docstrings(tree: ast.AST) -> set[int]:
    """ids of the string nodes that are docstrings."""
    found = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                found.add(id(value))
    return found


def sentences_naming_routes() -> list[str]:
    """'path:line: text' of each literal (or f-string part) that names a route."""
    hits = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith(SKIP):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value
                if id(node) in skip or " " not in text or API in text:
                    continue
                if ROUTE.search(text):
                    hits.append(f"{rel}:{node.lineno}: {text.strip()[:90]}")
    return hits


def test_the_scan_finds_a_route_in_a_sentence() -> None:
    assert ROUTE.search("choose another GPU (POST reservations/search finds the earliest)")
    assert ROUTE.search("GET hosts (the sidebar, %gpustatus) says why")
    assert not ROUTE.search("%gpureserve N --earliest finds the earliest free ones")


def test_no_user_facing_text_names_an_internal_route() -> None:
    hits = sentences_naming_routes()
    assert not hits, "user-facing text names internal routes:\n" + "\n".join(hits)
