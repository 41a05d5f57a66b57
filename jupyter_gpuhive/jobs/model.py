"""Rendering a job's tasks from its template and sweep (the job and task types are
`model.jobs`'s, imported from there and nowhere else)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace

from ..hosts.vendors import default_vendor, vendor_of
from ..model import HostDecl
from ..model.gpus import Pinning
from ..model.jobs import Job
from .caps import Cap, capped, job_caps
from .catalog import get_template
from .sweeps import SweepSpecs, expand
from .tasks import GpuSlot, TaskSpec, TemplateError

__all__ = ["mps_hosts", "pinnings_of", "render_tasks"]


def pinnings_of(hosts: Mapping[str, HostDecl]) -> dict[str, Pinning]:
    """How each configured host's GPU vendor pins its GPUs, by host."""
    return {name: vendor_of(decl.extra).pinning for name, decl in hosts.items()}


def mps_hosts(hosts: Mapping[str, HostDecl]) -> frozenset[str]:
    """The hosts whose entry says they run the vendor's multi-process service (`mps: true`):
    a share's memory cap there comes from it too (jobs/caps.py)."""
    return frozenset(name for name, decl in hosts.items() if decl.extra.get("mps") is True)


def render_tasks(
    job: Job,
    gpus_by_host: Sequence[tuple[str, str, Sequence[GpuSlot]]],
    *,
    sweep: SweepSpecs | None = None,
    pinnings: Mapping[str, Pinning] | None = None,
    caps: Mapping[str, Cap] | None = None,
    mps: Collection[str] = (),
    gpu_memory: Mapping[str, int | None] | None = None,
) -> list[TaskSpec]:
    """The job's tasks from its template: one rendering per sweep combination, renumbered.

    Every combination runs on the same GPUs; `{task}` in a command counts within its
    combination, while the stored task index counts across the whole job. `pinnings`: how
    each host's GPU vendor pins its GPUs (`pinnings_of`), by host. A task on one GPU that
    `caps` names (default: the job's `memory` option, of its one GPU whose MiB `gpu_memory`
    gives by UUID) gets the share's memory caps; on the `mps` hosts from MPS too.
    """
    template = get_template(job.template)
    combinations: list[Mapping[str, str]] = [{}]
    given = sweep if sweep is not None else job.sweep
    if given:
        combinations = list(expand(given))
    specs: list[TaskSpec] = []
    for combination in combinations:
        clash = sorted(set(combination) & set(job.variables))
        if clash:
            raise TemplateError(f"{', '.join(clash)} is both a variable and a sweep")
        rendered = template.render(
            job.name,
            job.command,
            gpus_by_host,
            {**job.variables, **combination},
            options=job.options,
            env=job.env,
            workdir=job.workdir,
            pinnings=pinnings,
        )
        specs += [replace(spec, index=len(specs) + i) for i, spec in enumerate(rendered)]
    if caps is None:
        slots = [slot for _host, _address, gpus in gpus_by_host for slot in gpus]
        memory = gpu_memory or {}
        caps = job_caps(job.options.get("memory"), [(s.uuid, memory.get(s.uuid)) for s in slots])
    if caps:
        pins = pinnings or {}
        specs = [
            capped(
                spec,
                caps,
                mps=spec.host in mps,
                pinning=pins.get(spec.host) or default_vendor().pinning,
            )
            for spec in specs
        ]
    return specs
