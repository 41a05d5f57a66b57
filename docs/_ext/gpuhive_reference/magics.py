"""The magics reference, from each magic's `magic_arguments` help."""

from __future__ import annotations

import contextlib
import inspect
import io
from collections.abc import Iterator
from typing import Any

from .text import one_line, prose


def magic_classes() -> list[type]:
    """The Magics classes that `%load_ext jupyter_gpuhive` registers."""
    from jupyter_gpuhive.notebook.feedmagics import GpuFeedMagics
    from jupyter_gpuhive.notebook.jobmagics import GpuJobMagics
    from jupyter_gpuhive.notebook.magics import GpuHiveMagics

    return [GpuHiveMagics, GpuJobMagics, GpuFeedMagics]


def magics() -> Iterator[tuple[str, list[str], Any]]:
    """(name, kinds such as ['line', 'cell'], the method) of every magic, each once."""
    seen: set[str] = set()
    for cls in magic_classes():
        table = cls.magics  # type: ignore[attr-defined]
        for name in [*table["line"], *table["cell"]]:
            if name in seen:
                continue
            seen.add(name)
            kinds = [kind for kind in ("line", "cell") if name in table[kind]]
            yield name, kinds, getattr(cls, table["line"].get(name) or table["cell"][name])


def usage(name: str, kinds: list[str]) -> str:
    """How the magic is written: %name, %%name or both."""
    forms = {"line": f"%{name}", "cell": f"%%{name}"}
    return " / ".join(f"`{forms[k]}`" for k in kinds)


def help_text(method: Any) -> str:
    """Exactly what `%magic -h` prints."""
    from jupyter_gpuhive.notebook.magics import GpuHiveMagics

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        GpuHiveMagics._help(method)
    return out.getvalue().rstrip()


def summary(method: Any) -> str:
    """The magic's one-line docstring (magic_arguments puts the usage before it)."""
    doc = inspect.getdoc(method) or ""
    text = doc.split("\n\n")
    lines = [p for p in text if p.strip() and not p.startswith(("::", " ", "%"))]
    return lines[0].strip() if lines else ""


def magics_page() -> str:
    """The magics reference as MyST Markdown."""
    out = [
        "# Magics",
        "",
        "After `%load_ext jupyter_gpuhive` in an IPython kernel (the server extension exports "
        "`GPUHIVE_URL` and `GPUHIVE_TOKEN` to its kernels, so no setup is needed). Generated "
        "at build time from each magic's `magic_arguments`: the text under each heading is "
        "exactly what `-h` prints in a notebook.",
        "",
        "| magic | what |",
        "| --- | --- |",
    ]
    entries = list(magics())
    for name, kinds, method in entries:
        out.append(f"| [{usage(name, kinds)}](#magic-{name}) | {one_line(summary(method))} |")
    out.append("")
    for name, kinds, method in entries:
        out += [
            f"(magic-{name})=",
            f"## {usage(name, kinds)}",
            "",
            prose(summary(method)),
            "",
            "```text",
            help_text(method),
            "```",
            "",
        ]
    return "\n".join(out)
