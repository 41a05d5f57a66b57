"""The job templates: the plain one, and the registry of all templates by name."""

from __future__ import annotations

from typing import Any

from . import caps
from .pytorch import PyTorchTemplate
from .tasks import GpuSlot, TaskSpec, TemplateError
from .template import COMMON_FIELDS, Node, Option, Template
from .tensorflow import ClusterSpecTemplate, TensorFlowTemplate


class PlainTemplate(Template):
    """The command as written, once per host (or once per GPU)."""

    name = "plain"
    description = (
        "Runs the command once per host with all of the job's GPUs on that host, or once per GPU "
        "with per_gpu. Fields are substituted shell-quoted: write {lr}, not '{lr}'."
    )
    fields = COMMON_FIELDS
    options = {
        "per_gpu": Option("one task per GPU instead of one per host", False, bool),
        **caps.OPTIONS,
    }
    example = "python train.py --lr {lr} --out results/{job}-{task}"

    def _render(
        self,
        job_name: str,
        command_template: str,
        nodes: list[Node],
        variables: dict[str, str],
        options: dict[str, Any],
    ) -> list[TaskSpec]:
        placed: list[tuple[Node, tuple[GpuSlot, ...]]]
        if options["per_gpu"]:
            placed = [(node, (gpu,)) for node in nodes for gpu in node.gpus]
            if not placed:
                raise TemplateError("per_gpu: the job has no GPUs")
        else:
            placed = [(node, node.gpus) for node in nodes]
        return [
            self.task(
                job_name=job_name,
                command_template=command_template,
                node=node,
                gpus=gpus,
                index=index,
                ntasks=len(placed),
                variables=variables,
                fields={},
                env={},
            )
            for index, (node, gpus) in enumerate(placed)
        ]


TEMPLATES: dict[str, Template] = {
    template.name: template
    for template in (
        PlainTemplate(),
        PyTorchTemplate(),
        TensorFlowTemplate(),
        ClusterSpecTemplate(),
    )
}


def get_template(name: str) -> Template:
    """The template registered under `name`; TemplateError lists the known names otherwise."""
    try:
        return TEMPLATES[name]
    except KeyError:
        known = ", ".join(sorted(TEMPLATES))
        raise TemplateError(f"unknown job template {name!r} (known: {known})") from None
