"""The dashboard's GPU topology table: per host, how each pair of GPUs is connected (NVLink
highlighted), each GPU's CPU affinity and NUMA node, from GET hosts' `topology`."""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from typing import Any

NVLINK = "#c7e9c0"  # NVLink cells: the pairs a request for connected GPUs can use
CELL = "padding:2px 8px;text-align:center"


def _cell(text: str, colour: str = "") -> str:
    style = f"{CELL};background:{colour}" if colour else CELL
    return f"<td style='{style}'>{html.escape(text)}</td>"


def host_table(name: str, topology: dict[str, Any]) -> str:
    """One host's matrix as an HTML table."""
    gpus = [g["index"] for g in topology.get("gpus", [])]
    links = {(x["a"], x["b"]): x["kind"] for x in topology.get("links", [])}
    head = "".join(f"<th style='{CELL}'>GPU{i}</th>" for i in gpus)
    rows = []
    for place in topology.get("gpus", []):
        a = place["index"]
        cells = []
        for b in gpus:
            kind = "X" if a == b else links.get((min(a, b), max(a, b)), "?")
            nvlink = kind.startswith("NV") and kind[2:].isdigit()
            cells.append(_cell(kind, NVLINK if nvlink else ""))
        numa = "—" if place.get("numa") is None else str(place["numa"])
        extra = _cell(place.get("cpu_affinity") or "—") + _cell(numa)
        rows.append(f"<tr><th style='{CELL}'>GPU{a}</th>{''.join(cells)}{extra}</tr>")
    groups = topology.get("nvlink_groups") or []
    said = ", ".join("{" + ", ".join(map(str, g)) + "}" for g in groups) or "none"
    return (
        f"<div><b>{html.escape(name)}</b> — NVLink groups: {html.escape(said)}"
        f"<table><thead><tr><th></th>{head}<th style='{CELL}'>CPU affinity</th>"
        f"<th style='{CELL}'>NUMA</th></tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )


def topology_table(
    hosts: Sequence[dict[str, Any]], wants_host: Callable[[str], bool] = lambda _n: True
) -> str:
    """Every chosen host's topology (hosts that did not report one are named as such)."""
    parts, silent = [], []
    for host in hosts:
        if not wants_host(host["name"]):
            continue
        if host.get("topology"):
            parts.append(host_table(host["name"], host["topology"]))
        else:
            silent.append(host["name"])
    if silent:
        names = ", ".join(html.escape(n) for n in silent)
        parts.append(f"<p>No topology reported by: {names}.</p>")
    return "".join(parts) or "<p>No hosts.</p>"
