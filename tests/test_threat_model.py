"""The threat model's trust-boundary table names tests that exist: a row without its hostile
test is a boundary nobody holds."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "explanation" / "threat-model.md"
REF = re.compile(r"`((?:tests/[\w/]+\.py|…)(?:::\w+)?)")


def boundary_rows() -> list[str]:
    """The rows of the table under '## Trust boundaries' (header and rule left out)."""
    section = PAGE.read_text(encoding="utf-8").split("## Trust boundaries", 1)[1]
    section = section.split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    return rows[2:]


def names_in(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.name.startswith("test_")
    }


def references(rows: list[str]) -> list[tuple[str, str | None]]:
    """(file, test or None) for each test the rows name; '…::name' means the file named last."""
    found: list[tuple[str, str | None]] = []
    last: str | None = None
    for row in rows:
        cell = row.rstrip(" |").rsplit(" | ", 1)[-1]
        refs = REF.findall(cell)
        assert refs, f"a trust boundary without a test: {row[:80]}"
        for ref in refs:
            file, _, name = ref.partition("::")
            if file == "…":
                assert last, f"'…' with no file named before it: {row[:80]}"
                file = last
            last = file
            found.append((file, name or None))
    return found


def test_every_boundary_names_a_test_that_exists() -> None:
    rows = boundary_rows()
    assert len(rows) >= 15
    for file, name in references(rows):
        path = ROOT / file
        assert path.is_file(), f"the threat model names a missing test file: {file}"
        if name:
            assert name in names_in(path), f"the threat model names a missing test: {file}::{name}"


def test_the_check_sees_a_row_without_a_test_and_a_missing_test() -> None:
    good = "| a | b | c | `tests/test_threat_model.py::names_in` |"
    assert references([good]) == [("tests/test_threat_model.py", "names_in")]
    missing = "| a | b | c | `tests/test_threat_model.py::test_nothing_like_it` |"
    ((file, name),) = references([missing])
    assert name not in names_in(ROOT / file)
    try:
        references(["| a | b | c | nothing |"])
    except AssertionError:
        pass
    else:
        raise AssertionError("a row without a test passed")
