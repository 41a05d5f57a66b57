"""Shares of a GPU in the magics: `%gpureserve --share 0.25` / `--memory 20G`, the fullest
shareable GPU a share fits on, and `%gpustatus`'s lines of who holds which share and how much
of it each one's processes use."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from IPython.core.error import UsageError

from ..model.caps import JAX_ENV, Cap, cap_env
from ..model.gpus import Pinning
from ..model.shares import WHOLE, describe_memory, parse_memory, share_of_fraction
from .client import HiveClient, HiveClientError


def unquote(text: str) -> str:
    """A value without the quotes IPython keeps (--share '0.25')."""
    return str(text).strip().strip("'\"")


def share_body(args: Any) -> dict[str, Any]:
    """The booking's `share` or `memory` from --share / --memory (none: whole GPUs)."""
    share, memory = getattr(args, "share", None), getattr(args, "memory", None)
    if share is not None and memory is not None:
        raise UsageError("Give either --share or --memory, not both.")
    if share is not None:
        return {"share": unquote(share)}
    if memory is not None:
        return {"memory": unquote(memory)}
    return {}


def _fraction(asked: dict[str, Any], gpu: dict[str, Any]) -> float | None:
    """The part of `gpu` a share request asks for (None: its memory is not known; a value
    the server will refuse counts as a whole GPU here, and the server says why)."""
    try:
        if "share" in asked:
            return share_of_fraction(asked["share"]) / WHOLE
        mib = parse_memory(asked["memory"])
    except Exception:
        return 1.0
    total = gpu.get("memory_mib") or gpu.get("mem_total_mib")
    return mib / total if total else None


def fullest(
    client: HiveClient, count: int, asked: dict[str, Any], start: datetime, end: datetime
) -> list[str]:
    """The shareable GPU the share fits on that bookings fill most in [start, end), so that
    whole GPUs stay free for whole-GPU work (a count must be 1: a share is of one GPU)."""
    if count != 1:
        raise HiveClientError("A share is of one GPU: ask for 1 (or name the GPU).")
    held: dict[str, float] = {}
    for res in client.reservations(start=start.isoformat(), end=end.isoformat()):
        for ref in res["gpus"]:
            held[ref] = held.get(ref, 0.0) + float(res.get("share") or 1.0)
    fits = []
    for host in client.hosts():
        for gpu in host.get("gpus", []):
            part = _fraction(asked, gpu) if gpu.get("shareable") else None
            used = held.get(gpu["id"], 0.0)
            if part is not None and used + part <= 1.0 + 1e-9:
                fits.append((-used, gpu["id"]))
    if not fits:
        raise HiveClientError("No shareable GPU has room for that share then.")
    return [min(fits)[1]]


def share_lines(
    hosts: Sequence[dict[str, Any]], active: Iterable[dict[str, Any]], me: str
) -> list[str]:
    """One line per shared GPU: each holder, their share and what their processes use
    ('gpu1:0 shares: alice 0.25 (10 GiB), uses 6000 MiB; …')."""
    shares: dict[str, list[dict[str, Any]]] = {}
    for res in active:
        if (res.get("share") or 1.0) < 1.0:
            for ref in res["gpus"]:
                shares.setdefault(ref, []).append(res)
    lines = []
    for host in hosts:
        for gpu in host.get("gpus", []):
            held = shares.get(gpu["id"])
            if not held:
                continue
            use: dict[str, int] = {}
            for proc in gpu.get("processes", []):
                user = proc.get("user") or "?"
                use[user] = use.get(user, 0) + int(proc.get("used_memory_mib") or 0)
            owners: dict[str, tuple[float, int | None]] = {}  # owner -> share, its MiB
            for res in held:
                share, size = owners.get(res["owner"], (0.0, 0))
                mib = res.get("share_memory_mib")
                total = None if mib is None or size is None else size + mib
                owners[res["owner"]] = (share + float(res["share"]), total)
            parts = []
            for owner, (share, size) in sorted(owners.items(), key=lambda o: (o[0] != me, o[0])):
                memory = f" ({describe_memory(size)})" if size else ""
                used = use.get(owner, 0)
                over = " ⚠ over its share" if size and used > size else ""
                parts.append(f"{owner} {share:.4g}{memory}, uses {used} MiB{over}")
            free = max(0.0, 1.0 - sum(share for share, _ in owners.values()))
            lines.append(f"{gpu['id']} shares: " + "; ".join(parts) + f"; free {free:.4g}")
    return lines


def share_caps(reservation: dict[str, Any], uuid: str, pinning: dict[str, Any]) -> str:
    """Cap this kernel to a share booking (the frameworks' variables, set before they are
    imported, as the pin is); what was set, as the end of the pin's sentence ('' for whole
    GPUs)."""
    share = float(reservation.get("share") or 1.0)
    cap = Cap(uuid, share, reservation.get("share_memory_mib"))
    env = cap_env(cap, Pinning(pinning.get("variable") or "", alloc_conf=pinning.get("alloc_conf")),
                  base=os.environ)  # fmt: skip
    if not env:
        return ""
    os.environ.update(env)
    return f", capped to its share: {JAX_ENV}={env[JAX_ENV]} and {len(env) - 1} more"
