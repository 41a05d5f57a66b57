"""The widgets reference: each entry point of `jupyter_gpuhive.widgets`, by autodoc."""

from __future__ import annotations


def entry_points() -> list[str]:
    """The names `jupyter_gpuhive.widgets` exports."""
    import jupyter_gpuhive.widgets as widgets

    return list(widgets.__all__)


def widgets_page() -> str:
    """The widgets reference as MyST Markdown (autodoc renders the docstrings)."""
    out = [
        "# Widgets",
        "",
        "Notebook views (ipywidgets and bqplot) on the same REST API. Generated at build "
        "time from the docstrings of `jupyter_gpuhive.widgets`.",
        "",
        "```{eval-rst}",
        ".. automodule:: jupyter_gpuhive.widgets",
        "   :no-members:",
        "```",
        "",
        "## Entry points",
        "",
    ]
    for name in entry_points():
        out += [
            f"(widget-{name.replace('_', '-')})=",
            f"### `{name}()`",
            "",
            "```{eval-rst}",
            f".. autofunction:: jupyter_gpuhive.widgets.{name}",
            "```",
            "",
        ]
    return "\n".join(out)
