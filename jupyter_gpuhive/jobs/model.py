"""Jobs and tasks as stored (their value types live in `model.jobs`), and rendering a job's
tasks from its template and sweep."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from ..model.jobs import (
    ACTIVE,
    DEFAULT_LOG_DIR,
    FINAL,
    LIVE,
    Job,
    NewJob,
    Task,
    TaskState,
    job_status,
    task_paths,
    task_session,
)
from .catalog import get_template
from .sweeps import SweepSpecs, expand
from .tasks import GpuSlot, TaskSpec, TemplateError

__all__ = [
    "ACTIVE",
    "DEFAULT_LOG_DIR",
    "FINAL",
    "LIVE",
    "Job",
    "NewJob",
    "Task",
    "TaskState",
    "job_status",
    "render_tasks",
    "task_paths",
    "task_session",
]


def render_tasks(
    job: NewJob,
    gpus_by_host: Sequence[tuple[str, str, Sequence[GpuSlot]]],
    *,
    sweep: SweepSpecs | None = None,
) -> list[TaskSpec]:
    """The job's tasks from its template: one rendering per sweep combination, renumbered.

    Every combination runs on the same GPUs; `{task}` in a command counts within its
    combination, while the stored task index counts across the whole job.
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
        )
        specs += [replace(spec, index=len(specs) + i) for i, spec in enumerate(rendered)]
    return specs
