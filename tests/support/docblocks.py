"""The code blocks of the docs' Markdown, so that tests run what a reader is told to run.

A block is a fenced one (```lang … ```), possibly indented under a list item; its text is
dedented. `section` narrows to the blocks under one `## ` heading (up to the next one).
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

BLOCK = re.compile(r"^( *)```([^\n`]*)\n(.*?)^\1```", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Block:
    """One fenced code block: its language (the fence's info string) and dedented text."""

    language: str
    text: str


def section_text(doc: Path, heading: str) -> str:
    """The text under `## heading` up to the next `## ` heading."""
    text = doc.read_text()
    start = text.find(f"\n## {heading}\n")
    assert start >= 0, f"no section '## {heading}' in {doc}"
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def code_blocks(doc: Path, section: str | None = None) -> list[Block]:
    """Every fenced block of `doc` (or of one `## ` section of it), in order."""
    text = section_text(doc, section) if section else doc.read_text()
    return [Block(lang.strip(), textwrap.dedent(body)) for _, lang, body in BLOCK.findall(text)]
