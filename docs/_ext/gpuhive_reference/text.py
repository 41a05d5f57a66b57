"""Small helpers that write Markdown safely (tables, inline code, labels)."""

from __future__ import annotations

import re


def prose(text: str) -> str:
    """Free text for Markdown: '<' written as an entity, so `<token>` is not read as HTML."""
    return text.replace("<", "&lt;")


def one_line(text: str) -> str:
    """Text for one table cell: whitespace collapsed, pipes escaped, no raw HTML."""
    return prose(re.sub(r"\s+", " ", text).strip().replace("|", "\\|"))


def fence(text: str) -> str:
    """Inline code that survives backticks inside it, for a table cell."""
    text = re.sub(r"\s+", " ", text).strip().replace("|", "\\|")
    if not text:
        return ""
    ticks = "``" if "`" in text else "`"
    return f"{ticks} {text} {ticks}" if ticks == "``" else f"`{text}`"


def label(*parts: str) -> str:
    """A Sphinx label from parts: lower case, words joined by '-'."""
    return "-".join(re.sub(r"[^a-z0-9]+", "-", p.lower()).strip("-") for p in parts if p)
