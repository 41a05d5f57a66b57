"""The dashboard's GPU table: a row per GPU and, under it, a row per MIG slice.

The driver reports no utilisation for a MIG slice (nor for a GPU with MIG on): such cells read
'not reported' (the API's `util_label`), never 0 %.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from typing import Any

HEAD = ("Host", "GPU", "Model / profile", "Utilization", "Memory", "Reserved by")


def util_text(unit: dict[str, Any]) -> str:
    """'37 %', the API's label where the driver reports none ('not reported'), or '—'."""
    if unit.get("util") is not None:
        return f"{unit['util']:g} %"
    return str(unit.get("util_label") or "—")


def memory_text(unit: dict[str, Any]) -> str:
    """'used / total MiB', with '?' for a part not known."""
    used, total = unit.get("mem_used_mib"), unit.get("mem_total_mib") or unit.get("memory_mib")
    if used is None and total is None:
        return "—"
    return f"{'?' if used is None else used} / {'?' if total is None else total} MiB"


def _row(cells: Sequence[Any], style: str = "") -> str:
    tds = "".join(f"<td style='padding:2px 8px'>{html.escape(str(c))}</td>" for c in cells)
    return f"<tr style='{style}'>{tds}</tr>"


def gpu_table(hosts: Sequence[dict[str, Any]], wants_gpu: Callable[[str], bool]) -> str:
    """Each chosen GPU with its utilisation, memory and holder; its MIG slices under it."""
    head = "".join(f"<th style='text-align:left;padding:2px 8px'>{h}</th>" for h in HEAD)
    body = []
    for h in hosts:
        for g in h.get("gpus", []):
            if not wants_gpu(g["id"]):
                continue
            holder = (g.get("reservation") or {}).get("owner") or "—"
            body.append(_row((h["name"], g["id"], g.get("model") or "", util_text(g),
                              memory_text(g), holder)))  # fmt: skip
            for s in g.get("slices", []):
                owner = (s.get("reservation") or {}).get("owner") or "—"
                body.append(_row(("", f"↳ {s['id']}", s.get("profile") or "", util_text(s),
                                  memory_text(s), owner), "color:#444"))  # fmt: skip
    if not body:
        body.append(f"<tr><td colspan='{len(HEAD)}'>No GPUs.</td></tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
