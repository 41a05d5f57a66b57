"""Jobs on GPU hosts: templates, the launcher (through each host's task runner), the queue
with backfill, reports.

Re-exported here: the templates, from a job's GPUs and a command template to resolved, quoted
shell commands (pure: they touch no host, process or store).
"""

from ..model.jobs import session_name
from .catalog import TEMPLATES, get_template
from .commands import shell_command, task_script
from .sweeps import MAX_COMBINATIONS, expand, parse_sweep, parse_sweeps
from .tasks import GpuSlot, TaskSpec, TemplateError
from .template import Template, command_fields

__all__ = [
    "MAX_COMBINATIONS",
    "TEMPLATES",
    "GpuSlot",
    "TaskSpec",
    "Template",
    "TemplateError",
    "command_fields",
    "expand",
    "get_template",
    "parse_sweep",
    "parse_sweeps",
    "session_name",
    "shell_command",
    "task_script",
]
