"""What the magics show: one rich result (HTML, with plain text for terminals) per call.

A result is the API's data itself (a dict or a list), so `r = %gpureserve …` binds data
that `r["id"]` reads; it only adds how it looks. Colours are the panel's: free green, mine
blue, reserved by others orange, busy red, failed dark red, drained and down grey
(JupyterLab's theme variables, with fallbacks for other front ends).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ..hosts.guidance import setup, setup_text
from .clock import local_zone
from .lending import lending_choice, lent_text

COLOURS = {
    "free": "var(--jp-success-color1, #388e3c)",
    "mine": "var(--jp-brand-color1, #1976d2)",
    "reserved": "var(--jp-warn-color1, #f57c00)",
    "busy": "var(--jp-error-color1, #d32f2f)",
    "down": "var(--jp-border-color1, #9e9e9e)",
    "failed": "var(--jp-error-color0, #b71c1c)",
    "drained": "var(--jp-border-color1, #9e9e9e)",
    "unknown": "var(--jp-border-color1, #9e9e9e)",
}
_TABLE = "border-collapse:collapse;font-size:var(--jp-ui-font-size1, 13px);margin:2px 0"
_CELL = "padding:2px 8px;text-align:left;vertical-align:top"
_CODE = (
    "font-family:var(--jp-code-font-family, monospace);background:var(--jp-layout-color2, "
    "#eee);padding:1px 4px;user-select:all"
)


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def local(iso: str | None) -> str:
    """An instant as the kernel's local wall-clock time: 'Mon 04 May 14:00'."""
    if not iso:
        return ""
    return datetime.fromisoformat(iso).astimezone(local_zone()).strftime("%a %d %b %H:%M")


def text_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table that reads the same in a terminal and a notebook."""
    cells = [[str(c) for c in header], *[["" if v is None else str(v) for v in r] for r in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip()
             for row in cells]  # fmt: skip
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def html_table(
    header: Sequence[str], rows: Sequence[Sequence[Any]], kinds: Sequence[str | None] = ()
) -> str:
    """An HTML table; a row with a kind gets that kind's colour as its left border."""
    head = "".join(f"<th style='{_CELL}'>{esc(h)}</th>" for h in header)
    body = []
    for i, row in enumerate(rows):
        kind = kinds[i] if i < len(kinds) else None
        style = f" style='border-left:4px solid {COLOURS[kind]}'" if kind else ""
        data = f" data-state='{kind}'" if kind else ""
        cells = "".join(f"<td style='{_CELL}'>{esc(v)}</td>" for v in row)
        body.append(f"<tr{style}{data}>{cells}</tr>")
    return (
        f"<table class='gpuhive-table' style='{_TABLE}'><thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def steps_html(found: dict[str, Any]) -> str:
    """Guidance (`setup()` or a host's advice) as HTML: the message, then numbered steps."""
    items = []
    for item in found["steps"]:
        command = item.get("command")
        code = f"<br><code style='{_CODE}'>{esc(command)}</code>" if command else ""
        items.append(f"<li>{esc(item['text'])}{code}</li>")
    note = f"<p>{esc(found['note'])}</p>" if found.get("note") else ""
    return f"<p><b>{esc(found['message'])}</b></p><ol>{''.join(items)}</ol>{note}"


def steps_text(found: dict[str, Any]) -> str:
    lines = [found["message"]]
    for number, item in enumerate(found["steps"], 1):
        lines.append(f"  {number}. {item['text']}")
        if item.get("command"):
            lines.append(f"       {item['command']}")
    return "\n".join(lines)


class Rich:
    """Mixin: `_repr_html_` and a plain-text `_repr_pretty_` from two methods."""

    def html(self) -> str:
        raise NotImplementedError

    def text(self) -> str:
        raise NotImplementedError

    def _repr_html_(self) -> str:
        return self.html()

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(self.text())


# What %gpureserve says of a booking that waits for approval (docs/how-to/approvals.md).
TENTATIVE_NOTE = (
    "It waits for an administrator's approval (its hosts' threshold): the GPUs are held for you, "
    "but no job or kernel can run on them, and this kernel's GPUs are left alone, until it is "
    "approved. You are told the answer."
)


class ReservationResult(Rich, dict):  # type: ignore[type-arg]
    """A reservation as the API returned it, shown as a card: what happened and the facts."""

    def __init__(self, data: dict[str, Any], headline: str, notes: Sequence[str] = ()) -> None:
        super().__init__(data)
        self.headline = headline
        self.notes = list(notes)

    def facts(self) -> list[tuple[str, str]]:
        flag = f" (flagged: {self.get('flag_reason')})" if self.get("flagged") else ""
        flag += (
            " (tentative: waits for an administrator's approval)" if self.get("tentative") else ""
        )
        facts = [
            ("Reservation", f"{self.get('id')} · {self.get('title', '')}"),
            ("GPUs", ", ".join(self.get("gpus", []))),
            ("When", f"{local(self.get('start'))} – {local(self.get('end'))}"),
            ("Owner", str(self.get("owner", ""))),
            ("Status", f"{self.get('status', '')}{flag}"),
        ]
        lending = lent_text(self) or lending_choice(self)
        if lending:
            facts.append(("Lending", lending))
        return facts

    def html(self) -> str:
        rows = "".join(
            f"<tr><th style='{_CELL}'>{esc(k)}</th><td style='{_CELL}'>{esc(v)}</td></tr>"
            for k, v in self.facts()
        )
        notes = "".join(f"<li>{esc(n)}</li>" for n in self.notes)
        return (
            f"<div class='gpuhive-reservation' style='border-left:4px solid {COLOURS['mine']};"
            f"padding:2px 8px'><b>{esc(self.headline)}</b><table style='{_TABLE}'>{rows}"
            f"</table>{f'<ul>{notes}</ul>' if notes else ''}</div>"
        )

    def text(self) -> str:
        width = max(len(k) for k, _ in self.facts())
        lines = [self.headline, *(f"  {k.ljust(width)}  {v}" for k, v in self.facts())]
        return "\n".join([*lines, *(f"  · {n}" for n in self.notes)])


class ReservationList(Rich, list):  # type: ignore[type-arg]
    """My current and upcoming reservations, as a table."""

    HEADER = ("ID", "GPUS", "START", "END", "STATUS", "TITLE")

    def rows(self) -> list[tuple[Any, ...]]:
        return [
            (r["id"], ", ".join(r["gpus"]), local(r["start"]), local(r["end"]),
             r["status"] + (" (flagged)" if r.get("flagged") else "")
             + (f" ({lent})" if (lent := lent_text(r)) else ""), r["title"])
            for r in self
        ]  # fmt: skip

    def html(self) -> str:
        if not self:
            return "<p>You have no current or upcoming reservations.</p>"
        return html_table(self.HEADER, self.rows(), ["mine"] * len(self))

    def text(self) -> str:
        if not self:
            return "You have no current or upcoming reservations."
        return text_table(self.HEADER, self.rows())


def gpu_state(gpu: dict[str, Any], host_state: str, me: str) -> tuple[str, str]:
    """(kind, label) of a GPU for `me`, as the panel says it: the server's `state`
    (model.health.gpu_state), with "reserved" by `me` read as "mine"."""
    if host_state == "down":
        return "down", "down"
    health = gpu.get("health") or {}
    if gpu.get("state") == "failed":
        reasons = health.get("reasons") or ["its health check failed"]
        return "failed", f"failed: {reasons[0]}"
    if gpu.get("state") == "drained":
        by = f" by {health['drained_by']}" if health.get("drained_by") else ""
        return "drained", f"drained{by}"
    users = sorted({p.get("user") or f"pid {p.get('pid')}" for p in gpu.get("processes", [])})
    now = gpu.get("reservation")
    if now:
        until = local(now["end"])
        if now["owner"] == me:
            return "mine", f"mine until {until}"
        return "reserved", f"{now['owner']} until {until}"
    if users:
        return "busy", f"busy: {', '.join(users)}"
    if gpu.get("held_by_engine"):  # a job of the cluster's scheduler (Slurm) holds it
        return "busy", f"busy: {gpu['held_by_engine']}"
    if host_state != "up":
        return "unknown", "no data"
    nxt = gpu.get("next_reservation")
    return "free", f"free until {local(nxt['start'])}" if nxt else "free"


def in_container(proc: dict[str, Any]) -> str:
    """' in container NAME (IMAGE)' for a process in a container, else ''."""
    box = proc.get("container")
    if not box:
        return ""
    name = box.get("name") or str(box.get("id", ""))[:12]
    return f" in container {name}" + (f" ({box['image']})" if box.get("image") else "")


def violation_line(gpu: str, proc: dict[str, Any], me: str) -> str:
    """One process that breaks a reservation, as `me` reads it under %gpustatus's table."""
    program = (proc.get("command") or "").split(" ", 1)[0].rsplit("/", 1)[-1]
    what = f"process {proc.get('pid')}{f' ({program})' if program else ''}{in_container(proc)}"
    user = proc.get("user") or "an unknown user"
    who = f"Your {what}" if user == me else f"{user}'s {what}"
    holder = (proc.get("violation") or {}).get("holder")
    where = "a GPU nobody reserved" if not holder else (
        "your reservation" if holder == me else f"{holder}'s reservation")  # fmt: skip
    return f"⚠ Violation on {gpu}: {who} runs on {where}."


class GpuStatus(Rich):
    """%gpustatus: one row per GPU and MIG slice (mine first), then my queued jobs that wait
    (their place in the queue, projected start and why; `queued`: GET queue's jobs), then
    what to do about hosts that are down. Utilisation the driver does not report reads 'not
    reported'. Where the site mixes GPU vendors, each GPU says its host's (`am1:0 (AMD)`)."""

    HEADER = ("GPU", "STATE", "UTIL", "MEMORY", "PROCESSES", "NEXT")
    QUEUE_HEADER = ("JOB", "PLACE", "EXPECTED START", "WAITING FOR")

    def __init__(
        self,
        hosts: list[dict[str, Any]],
        me: str,
        queued: Sequence[dict[str, Any]] = (),
        shares: Sequence[str] = (),  # who holds which share of each shared GPU, and uses
    ) -> None:
        self.hosts = hosts
        self.me = me
        self.shares = list(shares)
        mine = [job for job in queued if job.get("owner") == me]
        self.queued: list[tuple[str, ...]] = [queued_row(job) for job in mine]
        self.queue_header: tuple[str, ...] = self.QUEUE_HEADER
        if any(job.get("preemptions") for job in mine):  # what preemption cost them
            self.queue_header += ("PREEMPTED",)
            self.queued = [
                (*row, preempted_text(job)) for row, job in zip(self.queued, mine, strict=True)
            ]
        rows: list[tuple[str, tuple[Any, ...]]] = []
        self.violations: list[str] = []
        mixed = len({h.get("vendor") or "nvidia" for h in hosts}) > 1
        for h in hosts:
            tag = f" ({(h.get('vendor') or 'nvidia').upper()})" if mixed else ""  # which is which
            if h.get("state") == "down" and not h.get("gpus"):
                rows.append(("down", (h["name"] + tag, "down", "", "", "", "")))
            # each GPU, then its MIG slices ('host:index/migGI', booked like GPUs)
            for g in (u for gpu in h.get("gpus", []) for u in (gpu, *gpu.get("slices", ()))):
                kind, label = gpu_state(g, h.get("state", ""), me)
                util = (g.get("util_label") or "") if g.get("util") is None else f"{g['util']}%"
                mem = ""
                if g.get("mem_used_mib") is not None:
                    mem = f"{g['mem_used_mib']}/{g.get('mem_total_mib') or '?'} MiB"
                procs = g.get("processes", [])
                users = sorted({(p.get("user") or "?") + in_container(p) for p in procs
                                if not p.get("violation")})  # fmt: skip
                bad = sorted({f"⚠ {p.get('user') or '?'}{in_container(p)} (violation)"
                              for p in procs if p.get("violation")})  # fmt: skip
                nxt = g.get("next_reservation")
                after = f"{nxt['owner']} {local(nxt['start'])}" if nxt else ""
                rows.append((kind, (g["id"] + tag, label, util, mem, ", ".join(bad + users),
                                    after)))  # fmt: skip
                if g.get("kind") != "slice":  # a slice's processes are its GPU's, too
                    self.violations += [violation_line(g["id"], p, me) for p in procs
                                        if p.get("violation")]  # fmt: skip
        rows.sort(key=lambda r: r[0] != "mine")  # stable: my GPUs first, then host order
        self.kinds = [kind for kind, _ in rows]
        self.rows = [row for _, row in rows]
        self.advice = [h["advice"] for h in hosts if h.get("advice")]

    def html(self) -> str:
        if not self.hosts:
            return steps_html(setup())
        parts = [html_table(self.HEADER, self.rows, self.kinds)]
        parts += [f"<p>{esc(line)}</p>" for line in self.shares]
        parts += [f'<p class="gpuhive-violation">{esc(line)}</p>' for line in self.violations]
        if self.queued:
            parts += ["<p><b>My queued jobs</b></p>", html_table(self.queue_header, self.queued)]
        parts += [steps_html(advice) for advice in self.advice]
        return "".join(parts)

    def text(self) -> str:
        if not self.hosts:
            return setup_text()
        table = "\n".join([text_table(self.HEADER, self.rows), *self.shares, *self.violations])
        parts = [table]
        if self.queued:
            parts.append("My queued jobs:\n" + text_table(self.queue_header, self.queued))
        return "\n\n".join([*parts, *(steps_text(a) for a in self.advice)])


def queued_row(job: dict[str, Any]) -> tuple[str, str, str, str]:
    """A waiting queued job (GET queue): itself, its place in the queue's order (1: next),
    its projected start and why it waits (none yet: the queue has not looked at it)."""
    place = job.get("place")
    shown = "not yet" if place is None else f"{place} (next)" if place == 1 else str(place)
    start = local(job.get("estimated_start")) or "not known"
    return (
        f"{job['id']} {job.get('name') or ''}".rstrip(),
        shown,
        start,
        job.get("waiting_for") or "",
    )


def preempted_text(job: dict[str, Any]) -> str:
    """What preemption cost a job (GET jobs' or GET queue's fields): '2× · had 1.5 GPU-h,
    lost 0.75' ('' if never preempted; the hours left out where not known)."""
    n = job.get("preemptions") or 0
    if not n:
        return ""
    had, lost = job.get("service_gpu_h"), job.get("lost_gpu_h")
    cost = (
        f" · had {had:.3g} GPU-h, lost {lost:.3g}" if had is not None and lost is not None else ""
    )
    return f"{n}×{cost}"


def job_gpus(job: dict[str, Any]) -> list[str]:
    """A job's GPUs as 'host:index' refs, from its tasks (the job's own list holds UUIDs)."""
    refs = [f"{t['host']}:{i}" for t in job.get("tasks", []) for i in t.get("gpu_indices", [])]
    return list(dict.fromkeys(refs))


class JobResult(Rich, dict):  # type: ignore[type-arg]
    """A job as the API returned it: what happened, its tasks, and how to follow it."""

    HEADER = ("TASK", "HOST", "GPUS", "STATE", "EXIT")

    def __init__(self, data: dict[str, Any], headline: str, notes: Sequence[str] = ()) -> None:
        super().__init__(data)
        self.headline = headline
        self.notes = list(notes)

    def rows(self) -> list[tuple[Any, ...]]:
        return [
            (t["index"], t["host"], ", ".join(job_gpus({"tasks": [t]})), t["state"],
             "" if t.get("exit_status") is None else t["exit_status"])
            for t in self.get("tasks", [])
        ]  # fmt: skip

    def kind(self) -> str:
        return {
            "succeeded": "free",
            "running": "mine",
            "starting": "mine",
            "pending": "reserved",
        }.get(str(self.get("status")), "busy")

    def html(self) -> str:
        notes = "".join(f"<li>{esc(n)}</li>" for n in self.notes)
        return (
            f"<div class='gpuhive-job' style='border-left:4px solid {COLOURS[self.kind()]};"
            f"padding:2px 8px'><b>{esc(self.headline)}</b>"
            f"{html_table(self.HEADER, self.rows())}"
            f"{f'<ul>{notes}</ul>' if notes else ''}</div>"
        )

    def text(self) -> str:
        lines = [self.headline]
        if self.get("tasks"):
            lines.append(text_table(self.HEADER, self.rows()))
        return "\n".join([*lines, *(f"  · {n}" for n in self.notes)])


class Rows(Rich, list):  # type: ignore[type-arg]
    """Any list of API objects shown as a table (`columns`: (header, function of an item))."""

    def __init__(self, items: list[Any], columns: Sequence[tuple[str, Any]], empty: str) -> None:
        super().__init__(items)
        self.columns = list(columns)
        self.empty = empty

    def rows(self) -> list[tuple[Any, ...]]:
        return [tuple(fn(item) for _, fn in self.columns) for item in self]

    def html(self) -> str:
        if not self:
            return f"<p>{esc(self.empty)}</p>"
        return html_table([h for h, _ in self.columns], self.rows())

    def text(self) -> str:
        return text_table([h for h, _ in self.columns], self.rows()) if self else self.empty


class JobPreview(Rich, list):  # type: ignore[type-arg]
    """%%gpujob --dry-run: each task's host, GPUs, environment and exact shell command."""

    def text(self) -> str:
        lines = []
        for task in self:
            lines.append(f"# task {task['index']} on {task['host']} ({', '.join(task['gpus'])})")
            lines += [f"#   {key}={value}" for key, value in sorted(task["env"].items())]
            lines.append(task["shell"])
        return "\n".join(lines)

    def html(self) -> str:
        return f"<pre class='gpuhive-preview'>{esc(self.text())}</pre>"


JOB_COLUMNS = [
    ("ID", lambda j: j["id"]),
    ("NAME", lambda j: j["name"]),
    ("STATUS", lambda j: j["status"] + (" (queued)" if j.get("queued") else "")),
    ("GPUS", lambda j: len(j["gpus"])),
    ("TEMPLATE", lambda j: j["template"]),
]


class Notice(dict):  # type: ignore[type-arg]
    """An API answer shown as a short message (text and HTML)."""

    def __init__(self, data: dict[str, Any], message: str) -> None:
        super().__init__(data)
        self.message = message

    def __repr__(self) -> str:
        return self.message

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(self.message)

    def _repr_html_(self) -> str:
        lines = "<br>".join(html.escape(line) for line in self.message.splitlines())
        return f"<div class='gpuhive-notice'>{lines}</div>"
