"""MIG slices in monitoring: what discovery records, and each slice's live view.

The GPU tool reports no utilisation for a MIG slice (and none for a GPU with MIG on): the views
carry `util: null` with `util_label: "not reported"`, never 0 %.
"""

from __future__ import annotations

from typing import Any

from ..hosts.probe import HostSample, ProcessInfo
from ..model import Gpu, SliceDecl
from ..store.inventory import Inventory

NOT_REPORTED = "not reported"


def slice_decls(inventory: Inventory, gpu: Gpu) -> tuple[SliceDecl, ...]:
    """The live slices the inventory holds for a physical GPU, as discovery would declare them."""
    return tuple(
        SliceDecl(s.gpu_instance_id or 0, s.compute_instance_id or 0, s.profile or "", s.uuid,
                  s.memory_mib)
        for s in sorted(
            inventory.slices_of(gpu), key=lambda s: (s.gpu_instance_id, s.compute_instance_id)
        )
    )  # fmt: skip


def discovered_slices(
    sample: HostSample,
    uuid: str,
    mig_enabled: bool | None,
    held: tuple[SliceDecl, ...] | None,
) -> tuple[SliceDecl, ...] | None:
    """The slices a sweep found on GPU `uuid`: () with MIG off; what the inventory `held`
    when MIG is on but the sweep could not tell (its MIG queries failed)."""
    found = sample.slices.get(uuid)
    if found:
        decls = [
            SliceDecl(m.gpu_instance_id, m.compute_instance_id or 0, m.profile, m.uuid,
                      m.mem_total_mib)
            for m in found
            if m.gpu_instance_id is not None and m.profile and m.uuid
        ]  # fmt: skip
        return tuple(sorted(decls, key=lambda d: (d.gpu_instance_id, d.compute_instance_id)))
    if mig_enabled:
        return held
    return ()


def process_json(proc: ProcessInfo, slice_refs: dict[str, str]) -> dict[str, Any]:
    """A GPU process as the hosts listing shows it (with its slice's ref, where it has one)."""
    out: dict[str, Any] = {
        "pid": proc.pid,
        "user": proc.user,
        "command": proc.command,
        "used_memory_mib": proc.used_memory_mib,
    }
    if proc.mig_uuid is not None:
        out["slice"] = slice_refs.get(proc.mig_uuid, proc.mig_uuid)
    if proc.container is not None:  # `user` is then the container's owner (None: exempt)
        out["container"] = {**proc.container.to_json(), "process_user": proc.container.process_user}
    return out


def slice_views(
    sample: HostSample | None, gpu: Gpu, slices: list[Gpu], slice_refs: dict[str, str]
) -> list[dict[str, Any]]:
    """Each live slice of `gpu` with its memory and processes; utilisation not reported."""
    seen = {m.uuid: m for m in sample.slices.get(gpu.uuid, ())} if sample else {}
    procs = sample.processes if sample else ()
    out = []
    for part in slices:
        m = seen.get(part.uuid)
        out.append(
            {
                **part.to_json(),
                "util": None,
                "util_label": NOT_REPORTED,
                "mem_used_mib": m.mem_used_mib if m else None,
                "mem_total_mib": m.mem_total_mib if m else part.memory_mib,
                "processes": [process_json(p, slice_refs) for p in procs
                              if p.mig_uuid == part.uuid],
            }
        )  # fmt: skip
    return out
