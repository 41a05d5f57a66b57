"""Sphinx configuration of the jupyter-gpuhive documentation (`make docs`)."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE / "_ext"))
sys.path.insert(0, str(HERE.parent))

from jupyter_gpuhive._version import __version__  # noqa: E402

project = "jupyter-gpuhive"
author = "jupyter-gpuhive developers"
copyright = "jupyter-gpuhive developers"
version = release = __version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "gpuhive_reference",  # docs/_ext: writes reference/*.md from the live objects
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "README.md"]

myst_enable_extensions = ["colon_fence", "deflist", "fieldlist", "attrs_inline"]
myst_heading_anchors = 3

# Every reference must resolve: a renamed page, heading, trait or command breaks the build.
nitpicky = True
# Type hints in the widgets' signatures name classes of other projects (date, Sequence,
# HiveClient…) that have no page here, and the machines are offline (no intersphinx).
nitpick_ignore_regex = [("py:class", r".*")]

# docs/integrations.md shows JSON bodies with "…" for what is left out.
suppress_warnings = ["misc.highlighting_failure"]

autodoc_typehints = "signature"
autodoc_member_order = "bysource"

html_theme = "pydata_sphinx_theme"
html_title = "jupyter-gpuhive"
html_static_path = ["_static"]
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "footer_start": ["copyright"],
    "footer_end": [],
}
html_last_updated_fmt = None

# linkcheck: the machines are offline, so only internal targets (pages, anchors, files) are
# checked; every external link is skipped.
linkcheck_ignore = [r"https?://.*", r"mailto:.*"]
linkcheck_anchors = True
