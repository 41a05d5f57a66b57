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


def test_calendar_example_runs_top_to_bottom(url: str, monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:  # fmt: skip
    """examples/calendar.ipynb: its brushes in the calendar's coordinates (hours along x, a lane
    per GPU along y) book two GPUs overnight, clash, then shorten and cancel the booking."""
    monkeypatch.setenv("GPUHIVE_URL", url)
    monkeypatch.setenv("GPUHIVE_TOKEN", TOKENS["boss"])
    book = nbformat.read(EXAMPLES / "calendar.ipynb", as_version=4)
    NotebookClient(book, timeout=60, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()  # fmt: skip
    text = "\n".join(_text(cell) for cell in book.cells if cell.cell_type == "code")
    assert "4 lanes" in text
    assert "['gpu01:0', 'gpu01:1']" in text
    assert "Reserved gpu01:0, gpu01:1 from Tue" in text and "18:00 to Wed" in text
    assert "09:00 (reservation" in text
    assert "Changed gpu01:0, gpu01:1 from" in text
    assert "cancelled." in text


def test_kernels_example_is_safe_under_run_all(url: str, as_user: Any,
                                               monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path) -> None:  # fmt: skip
    """examples/kernels.ipynb run top to bottom as JupyterLab's Run All does (#48 item 5): the
    first kernel books and asks for the switch, which comes once it is idle, after the last
    cell; no cell fails and the reservation is still active then, so the reservation's kernel
    can start. Run All again on that kernel (its GPUHIVE_KERNEL_RESERVATION) books nothing."""
    monkeypatch.setenv("GPUHIVE_URL", url)
    monkeypatch.setenv("GPUHIVE_TOKEN", TOKENS["boss"])
    monkeypatch.delenv("GPUHIVE_KERNEL_RESERVATION", raising=False)
    boss = as_user("boss")
    text = _run_all(EXAMPLES / "kernels.ipynb", tmp_path)
    assert "This notebook switches to a kernel on " in text
    assert "Not switched yet: this kernel runs where it started" in text
    assert "step 300: loss 0.0098" in text
    assert "minutes." in text and "ends in 29 minutes" in text
    (made,) = [r for r in boss.reservations(user="boss") if r["title"] == "kernels example"
               and r["status"] == "active"]  # fmt: skip
    rid = made["id"]
    assert f"Reservation {rid} stays yours until its end" in text, text
    assert boss.request("GET", f"reservations/{rid}")["status"] == "active"  # not ended

    # The switched notebook on the reservation's kernel: nothing booked, nothing ended.
    monkeypatch.setenv("GPUHIVE_KERNEL_RESERVATION", str(rid))
    again = _run_all(EXAMPLES / "kernels.ipynb", tmp_path)
    assert f"This kernel runs on reservation {rid}: nothing to book." in again
    assert f"On reservation {rid}: host " in again and "step 300" in again
    booked = [r for r in boss.reservations(user="boss") if r["title"] == "kernels example"]
    assert [r["id"] for r in booked] == [rid], booked
    assert boss.request("GET", f"reservations/{rid}")["status"] == "active"
    boss.request("DELETE", f"reservations/{rid}")  # given back, as the last cell would


def _run_all(path: Path, workdir: Path) -> str:
    """Every cell of the notebook at `path` run in order on a fresh kernel (Run All); the code
    cells' text (a cell that failed fails the test)."""
    book = nbformat.read(path, as_version=4)
    NotebookClient(book, timeout=60, kernel_name="python3",
                   resources={"metadata": {"path": str(workdir)}}).execute()  # fmt: skip
    return "\n".join(_text(cell) for cell in book.cells if cell.cell_type == "code")


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
