"""JobBuilderView and JobListView: thin ipywidgets over JobBuilderModel / JobListModel."""

from __future__ import annotations

import contextlib
import html
from typing import Any

import ipywidgets as w

from ..model.jobs import LIVE
from ..notebook.client import HiveClientError
from ..notebook.lending import SIGNALS
from .builder_model import JobBuilderModel
from .display import Shown
from .job_form import MODES, FormError, task_text
from .joblist_model import JobListModel
from .poller import LiveSwitch, Poller

_WIDE = w.Layout(width="98%")
_MODE_LABELS = {"now": "Run now", "schedule": "Schedule", "queue": "Queue"}


def _error(text: str) -> str:
    return f"<span style='color:#b00'>{html.escape(text)}</span>" if text else ""


def template_html(info: dict[str, Any]) -> str:
    """The template's description, options (help and default) and example, as HTML."""
    rows = "".join(
        f"<tr><td style='padding:0 8px'><code>{html.escape(name)}</code></td>"
        f"<td style='padding:0 8px'>{html.escape(str(spec.get('type', '')))}</td>"
        f"<td style='padding:0 8px'>{html.escape(repr(spec.get('default')))}</td>"
        f"<td style='padding:0 8px'>{html.escape(str(spec.get('help', '')))}</td></tr>"
        for name, spec in info["options"].items()
    )
    fields = ", ".join(f"{{{f}}}" for f in info["fields"])
    return (
        f"<div>{html.escape(info['description'])}</div>"
        f"<div><b>Fields</b>: <code>{html.escape(fields)}</code></div>"
        f"<div><b>Example</b>: <code>{html.escape(info['example'])}</code></div>"
        + (f"<table><tr><th>option</th><th>type</th><th>default</th><th></th></tr>{rows}</table>"
           if rows else "")
    )  # fmt: skip


def preview_html(tasks: list[dict[str, Any]]) -> str:
    """Each task's environment and exact shell command."""
    if not tasks:
        return ""
    blocks = "".join(
        "<pre style='margin:4px 0;padding:4px;background:var(--jp-layout-color2, #f6f6f6);"
        f"white-space:pre-wrap'>"
        f"{html.escape(task_text(t))}</pre>"
        for t in tasks
    )
    return f"<b>Preview: {len(tasks)} task(s)</b>{blocks}"


_GPUS_LABEL = "<b>GPUs</b> (or one of your reservations, or a GPU count to queue)"


class JobBuilderView(Shown):
    """Template, GPUs or a reservation, command, variables and sweeps; preview; submit."""

    def __init__(self, model: JobBuilderModel) -> None:
        self.model = model
        f = model.form
        self.template = w.Dropdown(description="Template", options=list(model.templates))
        self.template.value = f.template if f.template in model.templates else None
        self.template.observe(self._template_changed, "value")
        self.info = w.HTML()
        self.name = w.Text(value=f.name, description="Name")
        self.command = w.Textarea(value=f.command, description="Command", layout=_WIDE,
                                  placeholder="python train.py --lr {lr}")  # fmt: skip
        example = w.Button(description="Use example", icon="paste")
        example.on_click(lambda _b: self._use_example())
        self.options = w.VBox()
        self.option_widgets: dict[str, w.ValueWidget] = {}
        self.gpu_boxes: dict[str, w.Checkbox] = {}
        self.gpus = w.VBox()
        self.reservation = w.Dropdown(description="Reservation", layout=w.Layout(width="600px"))
        self.reservation.observe(self._reservation_changed, "value")
        self.variables = w.Textarea(value=f.variables, description="Variables",
                                    placeholder="epochs=10 (one a line)")  # fmt: skip
        self.sweeps = w.Textarea(value=f.sweeps, description="Sweeps",
                                 placeholder="lr=0.1,0.01 (one a line)")  # fmt: skip
        self.env = w.Textarea(value=f.env, description="Env",
                              placeholder="NCCL_DEBUG=INFO (one a line)")  # fmt: skip
        self.workdir = w.Text(value=f.workdir, description="Workdir", placeholder="(home)")
        self.mode = w.ToggleButtons(options=[(_MODE_LABELS[m], m) for m in MODES], value=f.mode)
        self.start_at = w.DatetimePicker(value=f.start_at, description="Start at")
        self.stop_at = w.DatetimePicker(value=f.stop_at, description="Stop at")
        self.walltime = w.Text(description="Walltime", placeholder="2h", value=f.walltime)
        self.count = w.BoundedIntText(value=f.gpu_count, min=0, max=4096, description="GPU count",
                                      tooltip="Queue only: this many GPUs, chosen by the queue"
                                      )  # fmt: skip
        self.placement = w.Dropdown(description="Placement", value=f.same_host, options=[
            ("default", ""), ("one host, wait for it", "required"),
            ("one host if free, else few", "preferred"), ("anywhere", "any")])  # fmt: skip
        self.vendor = w.Dropdown(description="Vendor", value=f.vendor, options=[
            ("any", ""), ("NVIDIA", "nvidia"), ("AMD", "amd")])  # fmt: skip
        self.gpu_model = w.Text(description="Model", value=f.gpu_model,
                                placeholder="any (A100, MI300X)")  # fmt: skip
        self.preemptible = w.Checkbox(value=f.preemptible, description="Preemptible",
                                      tooltip="Queue only: may also run on reserved GPUs "
                                      "their holder leaves idle; stopped and requeued when "
                                      "the holder needs them")  # fmt: skip
        self.preempt_signal = w.Dropdown(description="Signal", value=f.preempt_signal,
                                         options=[("SIGTERM (default)", ""), *[
                                             (name, name) for name in SIGNALS[1:]]])  # fmt: skip
        self.grace = w.Text(description="Grace (s)", value=f.grace, placeholder="site default")
        self.preview_button = w.Button(description="Preview", icon="eye")
        self.preview_button.on_click(lambda _b: self.preview())
        self.submit_button = w.Button(description="Submit", button_style="primary", icon="play")
        self.submit_button.on_click(lambda _b: self.submit())
        self.status = w.HTML()
        self.preview_out = w.HTML()
        self.widget = w.VBox(
            [w.HBox([self.template, self.name]), self.info, w.HBox([self.command, example]),
             self.options, w.HTML(_GPUS_LABEL), self.gpus,
             self.reservation, w.HBox([self.count, self.placement]),
             w.HBox([self.vendor, self.gpu_model]),
             w.HBox([self.variables, self.sweeps]),
             w.HBox([self.env, self.workdir]), self.mode, w.HBox([self.start_at, self.stop_at]),
             self.walltime, w.HBox([self.preemptible, self.preempt_signal, self.grace]),
             w.HBox([self.preview_button, self.submit_button]), self.status,
             self.preview_out]
        )  # fmt: skip
        model.listeners.append(self.render)
        self._build_gpus()
        self._build_options()
        self.render()

    # --- building the parts that depend on the server's lists ---------------------------

    def _build_gpus(self) -> None:
        rows = []
        for host, refs in self.model.hosts.items():
            boxes = []
            for ref in refs:
                box = w.Checkbox(value=ref in self.model.form.gpus, description=ref, indent=False,
                                 layout=w.Layout(width="110px"))  # fmt: skip
                box.observe(lambda c, ref=ref: self._gpu_toggled(ref, c["new"]), "value")
                self.gpu_boxes[ref] = box
                boxes.append(box)
            label = self.model.host_label(host)
            width = "80px" if label == host else "130px"
            rows.append(w.HBox([w.Label(label, layout=w.Layout(width=width)), *boxes]))
        self.gpus.children = rows
        self._build_reservations()

    def _build_reservations(self) -> None:
        options: list[tuple[str, int | None]] = [("— pick GPUs above —", None)]
        options += [(self.model.reservation_label(r), r["id"]) for r in self.model.reservations]
        if list(self.reservation.options) != options:
            self.reservation.options = options
        self.reservation.value = self.model.form.reservation

    def _build_options(self) -> None:
        self.option_widgets = {}
        for name, spec in self.model.template_info()["options"].items():
            current = self.model.form.options.get(name, spec.get("default"))
            widget: w.ValueWidget
            if spec.get("type") == "bool":
                widget = w.Checkbox(value=bool(current), description=name, tooltip=spec.get("help"))
            else:
                widget = w.Text(value="" if current is None else str(current), description=name,
                                placeholder=str(spec.get("help", ""))[:60])  # fmt: skip
            self.option_widgets[name] = widget
        self.options.children = list(self.option_widgets.values())

    # --- widgets -> model ---------------------------------------------------------------

    def sync(self) -> None:
        """Copy the free-text fields into the model's form."""
        self.model.edit(
            name=self.name.value, command=self.command.value, variables=self.variables.value,
            sweeps=self.sweeps.value, env=self.env.value, workdir=self.workdir.value,
            mode=self.mode.value, start_at=self.start_at.value, stop_at=self.stop_at.value,
            walltime=self.walltime.value, gpu_count=self.count.value,
            same_host=self.placement.value, vendor=self.vendor.value,
            gpu_model=self.gpu_model.value, preemptible=self.preemptible.value,
            preempt_signal=self.preempt_signal.value, grace=self.grace.value,
            options={n: wd.value for n, wd in self.option_widgets.items()},
        )  # fmt: skip

    def _template_changed(self, change: dict[str, Any]) -> None:
        if change["new"] and change["new"] != self.model.form.template:
            with contextlib.suppress(FormError):
                self.sync()  # keep what was typed
            self.model.choose_template(change["new"])
            self.command.value = self.model.form.command
            self._build_options()
            self.render()

    def _use_example(self) -> None:
        self.model.choose_template(self.model.form.template, use_example=True)
        self.command.value = self.model.form.command
        self._build_options()
        self.render()

    def _gpu_toggled(self, ref: str, on: bool) -> None:
        if (ref in self.model.form.gpus) != on:
            self.model.toggle_gpu(ref, on)
            if on:
                self.reservation.value = None

    def _reservation_changed(self, change: dict[str, Any]) -> None:
        if change["new"] == self.model.form.reservation:
            return
        self.model.choose_reservation(change["new"])
        if change["new"] is not None:
            for box in self.gpu_boxes.values():
                box.value = False

    def _run(self, action: str) -> None:
        try:
            self.sync()
        except FormError as error:
            self.model.error, self.model.message = f"Could not {action} the job: {error}", ""
            self.render()
            return
        if action == "preview":
            self.model.preview()
        else:
            self.model.submit()

    def preview(self) -> None:
        self._run("preview")

    def submit(self) -> None:
        self._run("submit")

    # --- model -> widgets ---------------------------------------------------------------

    def render(self) -> None:
        """Show the model's form (it may have been edited from code), status and preview."""
        m, f = self.model, self.model.form
        if f.template in m.templates:
            self.template.value = f.template
        self.info.value = template_html(m.template_info()) if m.template else ""
        for widget, value in ((self.name, f.name), (self.command, f.command),
                              (self.variables, f.variables), (self.sweeps, f.sweeps),
                              (self.env, f.env), (self.workdir, f.workdir),
                              (self.walltime, f.walltime), (self.mode, f.mode),
                              (self.count, f.gpu_count), (self.placement, f.same_host),
                              (self.vendor, f.vendor), (self.gpu_model, f.gpu_model),
                              (self.start_at, f.start_at), (self.stop_at, f.stop_at)):  # fmt: skip
            if widget.value != value:
                widget.value = value
        for name, widget in self.option_widgets.items():
            value = f.options.get(name)
            if value is not None and isinstance(value, type(widget.value)):
                widget.value = value
        for ref, box in self.gpu_boxes.items():
            box.value = ref in f.gpus
        self._build_reservations()
        self.start_at.disabled = m.form.mode != "schedule"
        text = _error(m.error) or html.escape(m.message)
        self.status.value = m.notice + text
        self.preview_out.value = preview_html(m.tasks)


class JobListView(Shown):
    """My jobs, the selected job's log tail (refreshed in the background), stop, attach."""

    def __init__(self, model: JobListModel, interval: float = 2.0) -> None:
        self.model = model
        self.jobs = w.Select(description="Jobs", rows=8, layout=w.Layout(width="98%"))
        self.jobs.observe(self._selected, "value")
        self.task = w.BoundedIntText(description="Task", min=0, max=0, value=0,
                                     layout=w.Layout(width="160px"))  # fmt: skip
        self.task.observe(self._task_changed, "value")
        refresh = w.Button(icon="refresh", tooltip="Reload", layout=w.Layout(width="40px"))
        refresh.on_click(lambda _b: self.refresh())
        self.stop_button = w.Button(description="Stop", button_style="danger", icon="stop")
        self.stop_button.on_click(lambda _b: self.model.stop())
        self.status = w.HTML()
        self.attach = w.HTML()
        self.log = w.HTML()
        self.poller = Poller(self.refresh, interval, name="gpuhive-jobs")
        self.live = LiveSwitch(self.poller)
        self.toggle = self.live.button
        self.widget = w.VBox(
            [w.HBox([self.toggle, refresh, self.task, self.stop_button]), self.jobs,
             self.status, self.attach, self.log]
        )  # fmt: skip
        model.listeners.append(self.render)
        self.render()

    def refresh(self) -> None:
        """Poll the server once and update the widgets in place."""
        self.model.refresh()

    def render(self) -> None:
        m = self.model
        options: list[tuple[str, int]] = [(row.label, row.id) for row in m.rows()]
        if list(self.jobs.options) != options:
            self.jobs.options = options
        if self.jobs.value != m.selected and (m.selected is None or m.job() is not None):
            self.jobs.value = m.selected
        job = m.job()
        self.task.max = max(len(job["tasks"]) - 1, 0) if job else 0
        self.stop_button.disabled = job is None or job["status"] not in LIVE
        error = self.poller.last_error or m.error
        self.status.value = m.notice + (_error(error) or html.escape(m.message))
        hint = m.attach_hint()
        self.attach.value = f"Attach: <code>{html.escape(hint)}</code>" if hint else ""
        state = f" ({html.escape(m.log_state)})" if m.log_state else ""
        self.log.value = (
            f"<b>Log of task {m.task}{state}</b><pre style='max-height:300px;overflow:auto;"
            "background:var(--jp-layout-color2, #f6f6f6);"
            f"white-space:pre-wrap'>{html.escape(m.log)}</pre>"
            if m.selected is not None else ""
        )  # fmt: skip

    def _selected(self, change: dict[str, Any]) -> None:
        if change["new"] != self.model.selected:
            self._guard(lambda: self.model.select(change["new"]))

    def _task_changed(self, change: dict[str, Any]) -> None:
        if self.model.selected is not None and change["new"] != self.model.task:
            self._guard(lambda: self.model.select(self.model.selected, task=change["new"]))

    def _guard(self, action: Any) -> None:
        try:
            action()
        except HiveClientError as error:
            self.status.value = _error(error.message)

    def start(self) -> None:
        """Start the background refresh (also the Live button)."""
        self.live.start()

    def stop(self) -> None:
        self.live.stop()
