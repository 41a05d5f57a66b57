"""Value types of the job layer (defined in `model.jobs`): GPU slots, resolved tasks, and the
template error."""

from ..model.jobs import GpuSlot, TaskSpec, TemplateError

__all__ = ["GpuSlot", "TaskSpec", "TemplateError"]
