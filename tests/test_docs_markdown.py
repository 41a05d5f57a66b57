"""The docs' Markdown reads right as raw text too: whole tables, and shipped files shown in full.

Sphinx (MyST) renders a table row with too many cells without a warning, and a
`{literalinclude}` directive shows on GitHub as the bare directive. So every table row has
its header's number of cells, and the deployment files a how-to shows are written out there,
identical to the files in examples/deploy/.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.docblocks import code_blocks

REPO = Path(__file__).resolve().parents[1]
DOCS = sorted(p for p in (REPO / "docs").rglob("*.md") if "_build" not in p.parts)
SEPARATOR = re.compile(r"^\s*\|[\s:|-]+\|\s*$")
FENCE = re.compile(r"^\s*```")


def cells(row: str) -> int:
    """How many cells a table row has (a `|` inside `code` or escaped does not split)."""
    row = re.sub(r"`[^`]*`", "code", row.strip()).replace("\\|", "")
    return len(row.strip("|").split("|"))


def bad_rows(text: str) -> list[str]:
    """Each table row whose cell count differs from its header's, as 'line N: got/want'."""
    lines, found, fenced = text.splitlines(), [], False
    for n, line in enumerate(lines):
        fenced ^= bool(FENCE.match(line))
        header = not fenced and line.lstrip().startswith("|") and n + 1 < len(lines)
        if not header or not SEPARATOR.match(lines[n + 1]):
            continue
        if n > 0 and lines[n - 1].lstrip().startswith("|"):
            continue  # a separator-like row inside a table, not a new table
        want, k = cells(line), n + 2
        while k < len(lines) and lines[k].lstrip().startswith("|"):
            if cells(lines[k]) != want:
                found.append(f"line {k + 1}: {cells(lines[k])} cells, the header has {want}")
            k += 1
    return found


def test_a_row_with_too_many_cells_is_found() -> None:
    table = "| a | b |\n|---|---|\n| 1 | 2 |\n| 1 | `x|y` | 3 |\n"
    assert bad_rows(table) == ["line 4: 3 cells, the header has 2"]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO / "docs")))
def test_every_table_row_has_its_headers_cells(doc: Path) -> None:
    assert bad_rows(doc.read_text()) == []


@pytest.mark.parametrize("name", ["gpuhive@.service", "haproxy.cfg", "jupyterhub-gpuhive.conf",
                                  "replica.env"])  # fmt: skip
def test_the_replicas_how_to_shows_each_deploy_file_as_it_is(name: str) -> None:
    doc = REPO / "docs" / "how-to" / "replicas.md"
    shipped = (REPO / "examples" / "deploy" / name).read_text()
    assert "{literalinclude}" not in doc.read_text()
    assert [b.text for b in code_blocks(doc) if b.text == shipped], f"{name} is not shown as it is"
