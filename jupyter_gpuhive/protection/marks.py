"""The ongoing violations on the processes of `GET hosts`: each offending process is marked.

Pure: the hosts listing and the ongoing violations a requester may see go in, a listing
whose offending processes carry `violation` ({id, kind, holder, since}) comes out. A process
matches when it runs on the violation's GPU or MIG slice as its offender and, where the
violation lists PIDs (people involved and admins see them), is one of them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..model.violations import FOREIGN, OVER_SHARE, UNRESERVED

MARKED = (FOREIGN, UNRESERVED, OVER_SHARE)  # kinds with an offending process (ghosts have none)


def _mark(proc: dict[str, Any], unit: str, found: list[dict[str, Any]]) -> dict[str, Any]:
    where = {unit, proc.get("slice")}
    for v in found:
        pids = v.get("pids")
        if (
            v.get("gpu") in where
            and v.get("offender") == proc.get("user")
            and (pids is None or proc.get("pid") in pids)
        ):
            brief = {"id": v.get("violation"), "kind": v["kind"], "holder": v.get("holder"),
                     "since": v.get("since")}  # fmt: skip
            return {**proc, "violation": brief}
    return {**proc, "violation": None}


def _unit(unit: dict[str, Any], found: list[dict[str, Any]]) -> dict[str, Any]:
    out = {**unit, "processes": [_mark(p, unit["id"], found) for p in unit.get("processes", [])]}
    if "slices" in unit:
        out["slices"] = [_unit(s, found) for s in unit["slices"]]
    return out


def mark_violations(
    hosts: list[dict[str, Any]], ongoing: Iterable[dict[str, Any]]
) -> list[dict[str, Any]]:
    """`hosts` (not changed) with every process marked: its ongoing violation, or None."""
    found = [v for v in ongoing if v.get("kind") in MARKED]
    return [{**h, "gpus": [_unit(g, found) for g in h.get("gpus", [])]} for h in hosts]
