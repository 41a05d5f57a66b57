"""The job builder's form: its fields, and how their text becomes a request's values."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..notebook.jobsweeps import NAME, sweep_body

MODES = ("now", "schedule", "queue")  # run now, start at a time, put in the queue
_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off", ""}


class FormError(ValueError):
    """Something in the form that cannot be sent (said in words)."""


def _lines(text: str) -> list[str]:
    """Non-empty lines without '#' comments."""
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]


def parse_pairs(text: str, what: str = "variable") -> dict[str, str]:
    """'name=value' per line (the value verbatim after the first '=') into a dict."""
    out: dict[str, str] = {}
    for line in _lines(text):
        name, sep, value = line.partition("=")
        name = name.strip()
        if not sep or not NAME.match(name):
            raise FormError(f"The {what} '{line}' must look like name=value.")
        if name in out:
            raise FormError(f"The {what} '{name}' is given twice.")
        out[name] = value.strip()
    return out


def parse_sweeps(text: str) -> dict[str, list[str]]:
    """'lr=0.1,0.01' per line (or separated by ';') into {"lr": ["0.1", "0.01"]}: the body's
    sweep as %%gpujob builds it too (notebook.jobsweeps)."""
    try:
        return sweep_body(_lines(text.replace(";", "\n")))
    except ValueError as error:
        raise FormError(str(error)) from None


def convert_option(spec: dict[str, Any], name: str, value: Any) -> Any:
    """An option value of the template's type ('bool', 'int', 'str') from a widget's value."""
    kind = spec.get("type", "str")
    blank = isinstance(value, str) and not value.strip()
    if value is None or (blank and (kind != "str" or spec.get("default") is None)):
        return None  # left empty: the default (a text option without one: not given)
    if kind == "bool":
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in _TRUE | _FALSE:
            return text in _TRUE
        raise FormError(f"The option '{name}' is yes or no, not '{value}'.")
    if kind == "int":
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        try:
            return int(str(value).strip())
        except ValueError:
            raise FormError(f"The option '{name}' must be a whole number, not '{value}'.") from None
    return str(value)


def preemption_fields(form: JobForm) -> dict[str, Any]:
    """The job's preemption fields from the form (none unless preemptible)."""
    if not form.preemptible:
        return {}
    if form.mode != "queue":
        raise FormError("A preemptible job waits in the queue for GPUs: choose Queue.")
    out: dict[str, Any] = {"preemptible": True}
    if form.preempt_signal:
        out["preempt_signal"] = form.preempt_signal
    if str(form.grace).strip():
        try:
            grace = int(str(form.grace).strip())
        except ValueError:
            raise FormError(f"The grace time is whole seconds, not '{form.grace}'.") from None
        if grace < 0:
            raise FormError("The grace time cannot be negative.")
        out["grace_s"] = grace
    return out


LONG_VALUE = 160  # longer environment values are shortened in previews (a shipped module)


def _shown(value: str) -> str:
    if len(value) <= LONG_VALUE:
        return value
    return f"{value[:40]}… ({len(value)} characters)"


def task_text(task: dict[str, Any]) -> str:
    """One previewed task as the lines a terminal would show (environment, then the shell)."""
    head = f"# task {task['index']} on {task['host']} ({', '.join(task['gpus']) or 'no GPUs'})"
    if task.get("role"):
        head += f" role={task['role']}"
    env = [f"#   {k}={_shown(v)}" for k, v in sorted(task.get("env", {}).items())]
    return "\n".join([head, *env, task.get("shell") or task.get("command", "")])


@dataclass
class JobForm:
    """Everything the builder's fields hold."""

    name: str = "notebook job"
    description: str = ""
    template: str = "plain"
    command: str = ""
    gpus: list[str] = field(default_factory=list)
    reservation: int | None = None
    variables: str = ""  # name=value per line
    sweeps: str = ""  # name=v1,v2 per line
    options: dict[str, Any] = field(default_factory=dict)  # as typed; converted on sending
    env: str = ""  # NAME=value per line
    workdir: str = ""
    mode: str = "now"
    start_at: datetime | None = None
    stop_at: datetime | None = None
    walltime: str = ""
    max_retries: int = 0
    gpu_count: int = 0  # queue this many GPUs, chosen by the queue (instead of picking GPUs)
    same_host: str = ""  # with gpu_count: required, preferred, any ("": the default)
    vendor: str = ""  # only this vendor's GPUs: nvidia, amd ("": any)
    gpu_model: str = ""  # only GPUs whose name holds this, e.g. A100 ("": any)
    preemptible: bool = False  # queue only: may run on reserved GPUs their holder leaves idle
    preempt_signal: str = ""  # "": the default (SIGTERM)
    grace: str = ""  # seconds from the signal to the kill ("": the site's)
