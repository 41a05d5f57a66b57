"""The example notebooks, executed top to bottom by a real kernel against a real server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

from tests.conftest import TOKENS

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_quickstart_runs_top_to_bottom(url: str, monkeypatch: pytest.MonkeyPatch,
                                       tmp_path: Path) -> None:  # fmt: skip
    # The kernel inherits these, as it would from the server extension.
    monkeypatch.setenv("GPUHIVE_URL", url)
    monkeypatch.setenv("GPUHIVE_TOKEN", TOKENS["boss"])
    book = nbformat.read(EXAMPLES / "quickstart.ipynb", as_version=4)
    NotebookClient(book, timeout=60, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()  # fmt: skip
    text = "\n".join(_text(cell) for cell in book.cells if cell.cell_type == "code")
    assert "I am boss; 64 GPUs on 16 hosts" in text
    assert "Reserved gpu01:0, gpu01:1 from" in text
    assert "('POST', 'reservations'," in text
    assert "cancelled." in text
    widgets = [o for c in book.cells for o in c.get("outputs", [])
               if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]  # fmt: skip
    assert len(widgets) == 3  # calendar, overview, dashboard


def test_kernels_example_runs_top_to_bottom(url: str, monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path) -> None:  # fmt: skip
    """examples/kernels.ipynb outside JupyterLab: it books, asks for the switch (nobody
    answers), finds its booking, trains, counts down and gives the GPUs back."""
    monkeypatch.setenv("GPUHIVE_URL", url)
    monkeypatch.setenv("GPUHIVE_TOKEN", TOKENS["boss"])
    monkeypatch.delenv("GPUHIVE_KERNEL_RESERVATION", raising=False)
    book = nbformat.read(EXAMPLES / "kernels.ipynb", as_version=4)
    NotebookClient(book, timeout=60, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()  # fmt: skip
    text = "\n".join(_text(cell) for cell in book.cells if cell.cell_type == "code")
    assert "This notebook switches to a kernel on " in text
    assert "the booking is reservation " in text
    assert "step 300: loss 0.0098" in text
    assert "minutes." in text and "ends in 29 minutes" in text
    assert " is ended." in text or " is cancelled." in text


def _text(cell: Any) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(out["text"])
        elif out.get("output_type") == "error":
            raise AssertionError(f"{out['ename']}: {out['evalue']}")
        else:
            parts.append(out.get("data", {}).get("text/plain", ""))
    return "".join(parts)
