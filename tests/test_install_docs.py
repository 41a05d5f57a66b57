"""The install lines users copy say what works today (issue #48).

gpuhive is not on PyPI (and the PyPI project `gpuhive` is another one), so until a release every
install line of the README and the docs installs the wheel `make dist` builds, and names the extra
that brings the front end: `[lab]` (JupyterLab, which is not a dependency) or `[hub]`.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
PUBLISHED = False  # the release checklist (docs/development.md) turns this and the lines over
INSTALL = re.compile(r"pip install (?:--upgrade )?['\"]?([^'\"\s]*gpuhive[^'\"\s]*)")


def install_lines(text: str) -> list[str]:
    """What each `pip install … gpuhive …` in a text installs."""
    return INSTALL.findall(text)


def wrong(target: str) -> str | None:
    if "/_build/" in target:
        return None
    if not PUBLISHED and not target.split("[")[0].endswith(".whl"):
        return "names the package on PyPI, where gpuhive is not published yet"
    if not re.search(r"\[[^\]]*\b(lab|hub)\b", target):
        return "installs no front end: name the [lab] (or [hub]) extra"
    return None


def test_every_install_line_installs_what_exists() -> None:
    found = []
    for page in PAGES:
        if "_build" in page.parts:
            continue
        for target in install_lines(page.read_text(encoding="utf-8")):
            why = wrong(target)
            if why:
                found.append(f"{page.relative_to(ROOT)}: pip install {target}: {why}")
    assert found == []


def test_the_rule_catches_the_old_lines() -> None:
    old = (
        "pip install jupyter-gpuhive\n`pip install 'jupyter-gpuhive[hub]'`\npip install gpuhive.whl"
    )
    assert [wrong(t) is not None for t in install_lines(old)] == [True, True, True]
    assert wrong("jupyter_gpuhive-0.1.0-py3-none-any.whl[lab]") is None
