"""split_sections finds the probe's section marks with str.find (not a loop over every line
of the XML), and splits exactly as reading the answer line by line does."""

from __future__ import annotations

import random
import re

from jupyter_gpuhive.hosts.probe import MARK, split_sections

_LINE = re.compile(rf"^{re.escape(MARK)}(\w+) (\d+)$")


def by_lines(text: str) -> dict[str, tuple[int, str]]:
    """The reference: one line at a time, a trailing CR dropped, a mark only on a line alone."""
    sections: dict[str, tuple[int, str]] = {}
    name: str | None = None
    status, lines = 0, list[str]()
    for line in text.split("\n"):
        line = line.removesuffix("\r")
        match = _LINE.match(line)
        if match:
            if name is not None:
                sections[name] = (status, "\n".join(lines))
            name, status, lines = match.group(1), int(match.group(2)), []
        elif name is not None:
            lines.append(line)
    if name is not None:
        sections[name] = (status, "\n".join(lines))
    return sections


def test_same_as_line_by_line() -> None:
    """Marks at the start, behind a '|' (an XML line: never a mark), with trailing text or
    CRs, empty sections, text before the first mark, with and without a final newline."""
    parts = [f"{MARK}gpus 0", f"{MARK}xml 3", f"{MARK}apps 12", "a", "", "|x", "b\r", "\r",
             f"|{MARK}xml 0", f" {MARK}ps 0", f"{MARK}ps 0 ", f"{MARK}ps x", "\r\r", "c d"]  # fmt: skip
    rng = random.Random(30)
    for _ in range(20_000):
        text = "\n".join(rng.choice(parts) for _ in range(rng.randrange(9)))
        text += rng.choice(["\n", "\r\n", "\r", ""])
        assert split_sections(text) == by_lines(text), repr(text)


def test_sections() -> None:
    """Each section's exit status and text; a forged mark behind '|' stays in the XML."""
    text = f"junk\n{MARK}gpus 0\nrow\r\n{MARK}xml 0\n|<a>\n|{MARK}ps 9\n{MARK}ps 0\n"
    assert split_sections(text) == {
        "gpus": (0, "row"),
        "xml": (0, f"|<a>\n|{MARK}ps 9"),
        "ps": (0, ""),
    }
