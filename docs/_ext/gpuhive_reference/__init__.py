"""Sphinx extension: writes the reference pages from the live objects before each build.

The pages (docs/reference/*.md but index.md, and openapi.json) are generated, never edited,
and not committed (docs/.gitignore): the configuration from the traitlets metadata, the
REST API from the served OpenAPI document, the magics from their `magic_arguments` help,
the CLI from `--help`, the job templates from their catalog, the widgets from docstrings,
the Prometheus metrics from their collector, the authorization policy from its table.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from .cli import cli_page
from .config import config_page
from .magics import magics_page
from .policy import policy_page
from .prometheus import prometheus_page
from .restapi import api_page, document, document_json
from .templates import templates_page
from .widgets import widgets_page

# File under docs/reference/ → what writes it.
PAGES: dict[str, Callable[[], str]] = {
    "configuration.md": config_page,
    "rest-api.md": lambda: api_page(document()),
    "openapi.json": lambda: document_json(document()),
    "magics.md": magics_page,
    "cli.md": cli_page,
    "templates.md": templates_page,
    "widgets.md": widgets_page,
    "prometheus.md": prometheus_page,
    "authorization.md": policy_page,
}


def write_pages(folder: Path) -> dict[str, Path]:
    """Write every generated page into `folder`; files whose text is unchanged are kept."""
    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, make in PAGES.items():
        path = folder / name
        text = make()
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
        written[name] = path
    return written


def _on_builder_inited(app: Any) -> None:
    write_pages(Path(app.srcdir) / "reference")


def setup(app: Any) -> dict[str, Any]:
    """Register the hook that writes the reference pages."""
    app.connect("builder-inited", _on_builder_inited)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
