"""JobBuilderModel: the job builder, without any widget.

The builder holds a form (`job_form.JobForm`: template, GPUs or a reservation, command,
variables, sweeps, options, when to run) and turns it into the exact request the server gets:
`preview()` sends it to ``POST jobs/preview`` and keeps the per-task commands and
environments, `submit()` sends it to ``POST jobs`` (run now, at a time, or in the queue).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from ..notebook.client import HiveClientError
from ..notebook.clock import UTC, iso, parse
from ..notebook.jobsweeps import clashing
from ..notebook.lending import lent_text
from .calendar_model import gpus_of
from .job_form import (
    MODES,
    FormError,
    JobForm,
    convert_option,
    parse_pairs,
    parse_sweeps,
    preemption_fields,
    task_text,
)
from .joblist_model import job_gpus
from .messages import error_text, hosts_notice


class JobBuilderModel:
    """The job builder: templates, GPUs and my reservations, preview and submit."""

    def __init__(self, client: Any, *, now: Callable[[], datetime] | None = None) -> None:
        self.client = client
        self.clock = now or (lambda: datetime.now(UTC))
        self.form = JobForm()
        self.me = ""
        self.templates: dict[str, dict[str, Any]] = {}
        self.hosts: dict[str, list[str]] = {}  # host -> its GPU refs
        self.vendors: dict[str, str] = {}  # host -> its GPU vendor (GET hosts)
        self.reservations: list[dict[str, Any]] = []  # mine, current or upcoming
        self.tasks: list[dict[str, Any]] = []  # the last preview
        self.previewed: dict[str, Any] | None = None  # the body that preview was made from
        self.job: dict[str, Any] | None = None  # the last submitted job
        self.error = ""
        self.message = ""
        self.listeners: list[Callable[[], None]] = []
        self.submitted: list[Callable[[dict[str, Any]], None]] = []
        self.notice = ""  # HTML: what to do with no hosts, or about hosts that are down

    # --- loading ---------------------------------------------------------------------

    def load(self) -> None:
        """Fetch who I am, the templates, the GPUs and my reservations."""
        self.me = str(self.client.request("GET", "me")["name"])
        reply = self.client.request("GET", "templates")
        self.templates = {t["name"]: t for t in reply["templates"]}
        reply = self.client.request("GET", "hosts")
        self.notice = hosts_notice(reply)
        hosts = reply["hosts"]
        self.hosts = {h["name"]: gpus_of([h]) for h in sorted(hosts, key=lambda h: h["name"])}
        self.vendors = {h["name"]: str(h.get("vendor") or "nvidia") for h in hosts}
        self.load_reservations()
        if self.form.template not in self.templates and self.templates:
            self.form.template = next(iter(self.templates))
        if not self.form.command.strip():
            self.form.command = self.template.get("example", "")
        self._changed()

    def host_label(self, host: str) -> str:
        """A host as the GPU picker names it: with its vendor where the site mixes vendors."""
        if len(set(self.vendors.values())) < 2:
            return host
        return f"{host} ({self.vendors.get(host, 'nvidia').upper()})"

    def load_reservations(self) -> list[dict[str, Any]]:
        """My reservations that have not ended (the ones a job may run in)."""
        found = self.client.request("GET", "reservations", params={"user": self.me})
        now = self.clock()
        self.reservations = [
            r for r in found["reservations"]
            if r.get("owner") == self.me and not r.get("cancelled_at") and parse(r["end"]) > now
        ]  # fmt: skip
        self.reservations.sort(key=lambda r: r["start"])
        if self.form.reservation is not None and all(
            r["id"] != self.form.reservation for r in self.reservations
        ):
            self.form.reservation = None
        return self.reservations

    @property
    def all_gpus(self) -> list[str]:
        return [g for refs in self.hosts.values() for g in refs]

    def reservation_label(self, r: dict[str, Any]) -> str:
        when = parse(r["start"]).strftime("%a %d %b %H:%M")
        until = parse(r["end"]).strftime("%H:%M")
        lent = f", {text}" if (text := lent_text(r)) else ""
        return (
            f"#{r['id']} {r['title']} — {', '.join(r['gpus'])} "
            f"({when}–{until}, {r['status']}{lent})"
        )

    # --- editing the form --------------------------------------------------------------

    def choose_template(self, name: str, use_example: bool = False) -> dict[str, Any]:
        """Pick a template; its options start at their defaults (its example replaces an empty
        command or the previous template's example, or any command with `use_example`)."""
        if name not in self.templates:
            raise FormError(f"There is no template '{name}' ({', '.join(self.templates)}).")
        untouched = self.form.command.strip() in ("", self.template.get("example", ""))
        self.form.template = name
        self.form.options = {}
        template = self.templates[name]
        if use_example or untouched:
            self.form.command = template.get("example", "")
        self._invalidate()
        return template

    @property
    def template(self) -> dict[str, Any]:
        return self.templates.get(self.form.template, {})

    def template_info(self) -> dict[str, Any]:
        """Description, fields, options (help, default, type) and example of the template."""
        t = self.template
        return {
            "name": t.get("name", self.form.template),
            "description": t.get("description", ""),
            "fields": list(t.get("fields", [])),
            "options": dict(t.get("options", {})),
            "example": t.get("example", ""),
        }

    def pick_gpus(self, gpus: Iterable[str]) -> list[str]:
        """Run on these GPUs (in the order of the hosts list); forgets a chosen reservation."""
        gpus = list(gpus)
        wanted = set(gpus)
        unknown = sorted(wanted - set(self.all_gpus))
        if unknown and self.hosts:
            raise FormError(f"Unknown GPU {', '.join(unknown)}.")
        order = self.all_gpus if self.hosts else list(gpus)
        self.form.gpus = [g for g in order if g in wanted]
        if self.form.gpus:
            self.form.reservation = None
        self._invalidate()
        return self.form.gpus

    def toggle_gpu(self, gpu: str, on: bool) -> list[str]:
        chosen = set(self.form.gpus)
        (chosen.add if on else chosen.discard)(gpu)
        return self.pick_gpus(chosen)

    def choose_reservation(self, reservation_id: int | None) -> dict[str, Any] | None:
        """Run on the GPUs of one of my reservations (None: pick GPUs instead)."""
        self.form.reservation = reservation_id
        self._invalidate()
        if reservation_id is None:
            return None
        for r in self.reservations:
            if r["id"] == reservation_id:
                self.form.gpus = []
                return r
        self.form.reservation = None
        raise FormError(f"Reservation {reservation_id} is not one of your current reservations.")

    def set_option(self, name: str, value: Any) -> None:
        """Set a template option as typed in a field ('' or None: its default)."""
        if name not in self.template.get("options", {}):
            raise FormError(f"The template '{self.form.template}' has no option '{name}'.")
        self.form.options[name] = value
        self._invalidate()

    def edit(self, **changes: Any) -> JobForm:
        """Change form fields by name (command=..., sweeps='lr=0.1,0.01', mode='queue', ...)."""
        for key, value in changes.items():
            if key == "template":
                self.choose_template(value)
            elif key == "gpus":
                self.pick_gpus(value)
            elif key == "reservation":
                self.choose_reservation(value)
            elif key == "options":
                for name, option in value.items():
                    self.set_option(name, option)
            elif hasattr(self.form, key):
                if key == "mode" and value not in MODES:
                    raise FormError(f"Run '{value}'? Choose one of {', '.join(MODES)}.")
                setattr(self.form, key, value)
            else:
                raise FormError(f"The job form has no field '{key}'.")
        self._invalidate()
        self._changed()
        return self.form

    # --- requests ----------------------------------------------------------------------

    def options_body(self) -> dict[str, Any]:
        """The options that differ from the template's defaults, of the right types."""
        specs = self.template.get("options", {})
        out = {}
        for name, raw in self.form.options.items():
            spec = specs.get(name, {})
            value = convert_option(spec, name, raw)
            if value is not None and value != spec.get("default"):
                out[name] = value
        return out

    def body(self) -> dict[str, Any]:
        """The job as ``POST jobs/preview`` gets it (the same body ``POST jobs`` starts from)."""
        f = self.form
        if not f.name.strip():
            raise FormError("Give the job a name.")
        if not f.command.strip():
            raise FormError("Write the command to run.")
        body: dict[str, Any] = {
            "name": f.name.strip(),
            "description": f.description,
            "template": f.template,
            "command": f.command.strip(),
        }
        options = self.options_body()
        if f.gpu_count:
            if f.mode != "queue":
                raise FormError("A GPU count is for the queue: choose Queue, or pick the GPUs.")
            options = {**options, "gpu_count": int(f.gpu_count)}
            body["queued"] = True
            if f.same_host:
                body["same_host"] = f.same_host
        elif f.reservation is not None:
            body["reservation"] = f.reservation
        elif f.gpus:
            body["gpus"] = list(f.gpus)
        else:
            raise FormError("Pick GPUs or one of your reservations.")
        if f.vendor:
            body["vendor"] = f.vendor
        if f.gpu_model.strip():
            body["model"] = f.gpu_model.strip()
        variables = parse_pairs(f.variables, "variable")
        sweep = parse_sweeps(f.sweeps)
        clash = clashing(variables, sweep)
        if clash:
            raise FormError(clash)
        env = parse_pairs(f.env, "environment variable")
        for key, value in (("options", options), ("variables", variables), ("sweep", sweep),
                           ("env", env)):  # fmt: skip
            if value:
                body[key] = value
        if f.workdir.strip():
            body["workdir"] = f.workdir.strip()
        if f.walltime.strip():
            body["walltime"] = f.walltime.strip()
        if f.max_retries:
            body["max_retries"] = int(f.max_retries)
        body.update(preemption_fields(f))
        return body

    def request(self, action: str = "submit") -> tuple[str, str, dict[str, Any]]:
        """(method, path, body) that 'preview' or 'submit' sends."""
        body = self.body()
        if action == "preview":
            return "POST", "jobs/preview", body
        f = self.form
        if f.mode == "now":
            body["start"] = True
        elif f.mode == "schedule":
            if f.start_at is None:
                raise FormError("Give the time the job should start at.")
            body["start_at"] = iso(f.start_at)
            body["start"] = False
        elif f.mode == "queue":
            body["queued"] = True
            body["start"] = False
        else:
            raise FormError(f"Run '{f.mode}'? Choose one of {', '.join(MODES)}.")
        if f.stop_at is not None:
            body["stop_at"] = iso(f.stop_at)
        return "POST", "jobs", body

    def preview(self) -> list[dict[str, Any]] | None:
        """Ask the server for the exact per-task commands and environments."""
        self.error = self.message = ""
        try:
            method, path, body = self.request("preview")
            self.tasks = self.client.request(method, path, body)["tasks"]
        except FormError as error:
            self.tasks, self.previewed = [], None
            self.error = f"Could not preview the job: {error}"
        except HiveClientError as error:
            self.tasks, self.previewed = [], None
            self.error = error_text(error, "preview the job")
        else:
            self.previewed = body
            n, count = len(self.tasks), (body.get("options") or {}).get("gpu_count")
            if not n and count:  # placed when it starts: no task can be shown yet
                gpus = f"{count} GPU{'s' if count != 1 else ''}"
                self.message = f"Queued by count: it runs on {gpus} chosen when it starts."
            else:
                self.message = f"{n} task{'s' if n != 1 else ''} on {self._hosts_text()}."
        self._changed()
        return self.tasks if not self.error else None

    def submit(self) -> dict[str, Any] | None:
        """Create the job: run now, at `start_at`, or queue it (with its walltime)."""
        self.error = self.message = ""
        try:
            method, path, body = self.request("submit")
            job: dict[str, Any] = self.client.request(method, path, body)
        except FormError as error:
            self.error = f"Could not submit the job: {error}"
            self._changed()
            return None
        except HiveClientError as error:
            self.error = error_text(error, "submit the job")
            self._changed()
            return None
        self.job = job
        verb = {"now": "started", "schedule": "scheduled", "queue": "queued"}[self.form.mode]
        if job.get("preemptible"):
            verb += " (preemptible)"
        count = (job.get("options") or {}).get("gpu_count")
        where = ", ".join(job_gpus(job)) or (f"{count} GPUs chosen when it starts" if count
                                             else "its GPUs")  # fmt: skip
        self.message = f"Job {job['id']} ({job['name']}) {verb} on {where}: {job['status']}."
        if self.form.mode == "schedule" and self.form.start_at is not None:
            self.message += f" It starts at {self.form.start_at:%a %d %b %H:%M}."
        for listener in list(self.submitted):
            listener(job)
        self._changed()
        return job

    def preview_text(self) -> str:
        return "\n\n".join(task_text(t) for t in self.tasks)

    def _hosts_text(self) -> str:
        hosts = list(dict.fromkeys(t["host"] for t in self.tasks))
        return ", ".join(hosts) or "no host"

    def _invalidate(self) -> None:
        """A changed form makes the shown preview stale."""
        self.previewed = None

    def _changed(self) -> None:
        for listener in list(self.listeners):
            listener()
