"""A Slurm node gpuhive may reach itself: the vendor probe there, merged into Slurm's sample.

A Slurm host entry's `slurm.probe` says how gpuhive reaches the node: `local` (the node is
this machine: single-node clusters, the tests). Without it gpuhive reads only what Slurm says
(GPUs, states; no readings, no processes) and runs nothing on the node.

On a reached node each sweep runs the vendor's probe (readings, processes with their owners
from `ps`) and `scontrol listpids '*' NODE` (which pids run inside a Slurm job: see
`hosts/slurmpids.py`), both as the server's account (root). GPU identity stays Slurm's: GPU
`IDX` N of the node (gres.conf's `File=` order, as `scontrol show job -d` names a job's GPUs)
is the vendor's index N, so the vendor's readings and processes go to the UUID gpuhive gives
that IDX (`slurm_uuid`). Slurm's own health and drains stay as Slurm says them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ...errors import Invalid
from ...model import HostDecl, utcnow
from ..slurmpids import confinement
from ..status import CommandResult, HostUnavailable
from ..vendors import vendor_of
from .local import LocalBackend

if TYPE_CHECKING:
    from ..probe import HostSample

REACHES = ("local",)


def reach_of(decl: HostDecl) -> str | None:
    """How gpuhive reaches a Slurm node itself (`slurm.probe`), or None: it does not."""
    spec: Any = decl.extra.get("slurm") or {}
    reach = spec.get("probe") if isinstance(spec, Mapping) else None
    if reach is not None and reach not in REACHES:
        raise Invalid(
            f"Host {decl.name}: slurm: probe must be one of {', '.join(REACHES)}, not {reach!r}."
        )
    return reach


def merge(slurm: HostSample, probe: HostSample, jobs: Mapping[int, int]) -> HostSample:
    """Slurm's sample with the probe's readings and processes, by index (= Slurm's IDX), each
    process marked with the Slurm job that holds it (`jobs`: pid -> job id)."""
    by_index = {g.index: g for g in probe.gpus}
    uuids = {g.uuid: s.uuid for s in slurm.gpus if (g := by_index.get(s.index)) is not None}
    gpus = tuple(
        replace(by_index[s.index], uuid=s.uuid, name=s.name) if s.index in by_index else s
        for s in slurm.gpus
    )
    processes = tuple(
        replace(p, gpu_uuid=uuids[p.gpu_uuid],
                confined_by=confinement(jobs[p.pid]) if p.pid in jobs else None)
        for p in probe.processes if p.gpu_uuid in uuids
    )  # fmt: skip
    return replace(
        slurm, gpus=gpus, processes=processes, cpu_jiffies=probe.cpu_jiffies,
        cpu_count=probe.cpu_count, mem_total_mib=probe.mem_total_mib,
        mem_available_mib=probe.mem_available_mib, gpu_error=probe.gpu_error,
    )  # fmt: skip


class ReachedNode:
    """The commands gpuhive runs on reached nodes (`local`: this machine, through runuser)."""

    def __init__(self, settings: Any, me: str) -> None:
        self.me = me
        self.local = LocalBackend(settings, me)
        self.seen: dict[str, Any] = {}  # the vendor's memory of earlier answers, per host

    async def run(
        self, decl: HostDecl, command: str, user: str, timeout: float, stdin: str | None
    ) -> CommandResult:
        """`command` as `user` on the node (kill steps of protection, clean-ups)."""
        return await self.local.run(decl, command, user, timeout, stdin)

    async def probe(self, decl: HostDecl, timeout: float) -> HostSample:
        """The vendor probe's sample of the node (to `merge` into Slurm's)."""
        from ..probe import parse_probe, probe_command

        vendor = vendor_of(decl.extra)
        done = await self.local.run(decl, probe_command(vendor), self.me, timeout, None)
        if done.exit_status != 0 and not done.stdout:
            raise HostUnavailable(decl.name, f"the probe failed: {done.stderr.strip()[-300:]}")
        return parse_probe(decl.name, done.stdout, utcnow(), self.seen, vendor)
