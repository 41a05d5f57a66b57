"""The job templates reference, from the template catalog (what `GET templates` lists)."""

from __future__ import annotations

from .text import fence, one_line, prose


def templates_page() -> str:
    """The job templates as MyST Markdown."""
    from jupyter_gpuhive.jobs.catalog import TEMPLATES

    out = [
        "# Job templates",
        "",
        "What `%%gpujob --template NAME`, the job builder and `POST jobs` (`template`) accept. "
        "Generated at build time from the template catalog, as `GET templates` lists it. A "
        "command is a template: `{name}` fields are filled in per task, shell-quoted.",
        "",
    ]
    for name, template in TEMPLATES.items():
        out += [f"(template-{name})=", f"## `{name}`", "", prose(template.description), ""]
        if template.example:
            out += [f"Example command: {fence(template.example)}", ""]
        if template.options:
            out += ["| option | type | default | meaning |", "| --- | --- | --- | --- |"]
            for option, spec in template.options.items():
                default = fence(repr(spec.default)) if spec.default is not None else ""
                out.append(
                    f"| `{option}` | {spec.kind.__name__} | {default} | {one_line(spec.help)} |"
                )
            out.append("")
        out += ["Fields: " + ", ".join(f"`{{{f}}}`" for f in template.fields) + ".", ""]
    return "\n".join(out)
