"""%%gpujob: the cell is the command template of a job; %gpujob attach|stop|log ID."""

from __future__ import annotations

import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from ..model.jobs import FINAL
from .args import parse_gpu_args
from .client import HiveClientError
from .jobsweeps import clashing, sweep_body
from .lending import SIGNALS
from .magics import GpuHiveMagics, unquote
from .magicviews import JOB_COLUMNS, JobPreview, JobResult, Rows, job_gpus


def _pairs(items: list[str] | None, what: str) -> dict[str, str]:
    out = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise UsageError(f"{what} must look like name=value, not {item!r}.")
        out[name.strip()] = value
    return out


def typed(name: str, text: str, kind: str | None) -> Any:
    """An --option value as its option's type: `resume=true`, `checkpoint_every=50`."""
    if kind == "bool":
        word = text.strip().lower()
        if word in ("true", "yes", "on", "1"):
            return True
        if word in ("false", "no", "off", "0"):
            return False
        raise UsageError(f"--option {name} takes true or false, not {text!r}.")
    if kind == "int":
        try:
            return int(text)
        except ValueError:
            raise UsageError(f"--option {name} takes a whole number, not {text!r}.") from None
    return text


def preemption_body(args: Any) -> dict[str, Any]:
    """The job's preemption fields (--preemptible implies --queue: it runs when placed)."""
    if not args.preemptible:
        if args.preempt_signal or args.grace is not None:
            raise UsageError("--preempt-signal and --grace go with --preemptible.")
        return {}
    if args.grace is not None and args.grace < 0:
        raise UsageError("--grace is a number of seconds, 0 or more.")
    body: dict[str, Any] = {"preemptible": True}
    if args.preempt_signal:
        body["preempt_signal"] = args.preempt_signal
    if args.grace is not None:
        body["grace_s"] = args.grace
    return body


@magics_class
class GpuJobMagics(GpuHiveMagics):
    """%%gpujob and %gpujob."""

    @magic_arguments()
    @argument("gpus", nargs="*", help="GPUs as host:0,1; or 'attach ID' / 'stop ID' / 'log ID'")
    @argument("--template", "-t", default="plain",
              help="plain, pytorch, tensorflow or tf-clusterspec")  # fmt: skip
    @argument("--reservation", "-r", type=int, help="Run on the GPUs of this reservation")
    @argument("--name", default="notebook job", help="Job name")
    @argument("--sweep", action="append", help="A sweep variable: lr=0.1,0.01 (repeatable)")
    @argument("--var", action="append", help="A variable: name=value (repeatable)")
    @argument("--option", action="append", help="A template option: name=value (repeatable)")
    @argument("--python", action="store_true",
              help="The cell is Python: run it with this kernel's interpreter, here")  # fmt: skip
    @argument("--queue", action="store_true",
              help="Queue it for non-reserved time (with a count, e.g. 4 --queue: any GPUs)"
              )  # fmt: skip
    @argument("--same-host", choices=("required", "preferred", "any"),
              help="With a GPU count: all on one host, waiting for one (required, the default "
                   "when they fit one host); one host if one is free, else few (preferred); "
                   "anywhere (any)")  # fmt: skip
    @argument("--vendor", help="Only this vendor's GPUs: nvidia, amd (a count picks only "
              "those; named GPUs must be)")  # fmt: skip
    @argument("--model", help="Only GPUs whose name holds this, any case: A100, MI300X")
    @argument(
        "--memory",
        help="A share of one shareable GPU: this much of its memory, e.g. "
        "20G (a share job, packed with other shares and capped to it)",
    )
    @argument("--walltime", help="Declared run time (for the queue), e.g. 2h")
    @argument("--preemptible", action="store_true",
              help="Queue it as preemptible: it may also run on reserved GPUs their holder does "
                   "not use, and is stopped (signal, grace, then kill) and requeued when the "
                   "holder needs them. Save checkpoints: --option resume=true with the pytorch "
                   "or tensorflow template, or read GPUHIVE_CHECKPOINT_DIR")  # fmt: skip
    @argument("--preempt-signal", choices=SIGNALS,
              help="With --preemptible: the signal that asks it to save and stop (default "
                   "SIGTERM)")  # fmt: skip
    @argument("--grace", type=int, metavar="S",
              help="With --preemptible: seconds between the signal and the kill (default and "
                   "most: the site's)")  # fmt: skip
    @argument("--image", help="Run each task in this container image (the host's allow-list "
              "decides)")  # fmt: skip
    @argument("--mount", action="append", metavar="PATH",
              help="With --image: mount this host path, among those the host allows "
                   "(repeatable)")  # fmt: skip
    @argument("--release", action="store_true",
              help="End the reservation as soon as the job finishes")  # fmt: skip
    @argument("--dry-run", action="store_true", help="Show the exact commands and environment")
    @argument("--no-follow", action="store_true", help="Do not stream the output here")
    @argument("--task", type=int, default=None, help="With 'log': only this task")
    @argument("-o", "--output", metavar="NAME", help="Also bind the result to NAME")
    @argument("-h", "--help", action="store_true", help="Show this help")
    @line_cell_magic
    def gpujob(self, line: str, cell: str | None = None) -> Any:
        """Run the cell as a gpuhive job on reserved GPUs, streaming its output here."""
        args = parse_argstring(self.gpujob, line)
        if args.help:
            return self._help(self.gpujob)
        if cell is None:
            return self._give(self._line(args), args.output)
        return self._give(self._cell(args, cell), args.output)

    def _cell(self, args: Any, cell: str) -> Any:
        body = self._body(args, cell)
        if args.dry_run:
            tasks = self._call(self.client.request, "POST", "jobs/preview", body)["tasks"]
            return JobPreview(tasks)
        queued = bool(body["queued"])
        job = self._call(self.client.request, "POST", "jobs", {**body, "start": not queued})
        count = (body.get("options") or {}).get("gpu_count")
        where = ", ".join(job_gpus(job)) or (
            f"{count} GPU{'s' if count != 1 else ''} chosen when it starts" if count else "its GPUs"
        )
        verb = "queued" if queued else "started"
        if job.get("preemptible"):
            verb += " (preemptible)"
        later = [f"Later: %gpujob attach {job['id']} · %gpujob log {job['id']} · "
                 f"%gpujob stop {job['id']}"]  # fmt: skip
        if args.no_follow or queued:
            return JobResult(job, f"Job {job['id']} ({job['name']}) {verb} on {where}.", later)
        print(f"Job {job['id']} ({job['name']}) {verb} on {where}; its output follows "
              "(interrupt the kernel to stop or detach).")  # fmt: skip
        job = self._follow(job["id"])
        notes = []
        if args.release and args.reservation is not None:
            self._call(self.client.cancel, args.reservation)
            notes.append(f"Reservation {args.reservation} ended: its GPUs are free for others.")
        return JobResult(job, f"Job {job['id']} ({job['name']}) {job['status']}.", notes)

    def _body(self, args: Any, cell: str) -> dict[str, Any]:
        command = cell.strip()
        if not command:
            raise UsageError("The cell is empty: write the command to run (or --python code).")
        if args.python:
            folder = Path.cwd() / ".gpuhive"
            folder.mkdir(exist_ok=True)
            with tempfile.NamedTemporaryFile(
                "w", suffix=".py", dir=folder, delete=False, prefix="cell-"
            ) as script:
                script.write(cell)
            command = f"{shlex.quote(sys.executable)} {shlex.quote(script.name)}"
        variables = _pairs(args.var, "--var")
        try:  # as the job builder builds it (notebook.jobsweeps)
            sweep = sweep_body(unquote(entry) for entry in args.sweep or [])  # IPython keeps quotes
        except ValueError as error:
            raise UsageError(f"--sweep: {error}") from None
        clash = clashing(variables, sweep)
        if clash:
            raise UsageError(clash)
        body: dict[str, Any] = {
            "name": args.name,
            "template": args.template,
            "command": command,
            "variables": variables,
            "options": self._options(args.template, _pairs(args.option, "--option")),
            "sweep": sweep,
            "queued": bool(args.queue),
        }
        if args.memory:
            body["options"] = {**body["options"], "memory": unquote(args.memory)}
        if args.python:
            body["workdir"] = str(Path.cwd())
        if args.walltime:
            body["walltime"] = args.walltime
        if args.image is not None or args.mount:
            body.update(image=args.image, mounts=list(args.mount or []))
        body.update(preemption_body(args))
        if body.get("preemptible"):
            body["queued"] = True
        if args.reservation is not None:
            body["reservation"] = args.reservation
        else:
            gpus, count = parse_gpu_args(args.gpus) if args.gpus else ([], None)
            if count is not None and body["queued"]:
                body["options"] = {**body["options"], "gpu_count": count}
            elif count is not None or not gpus:
                raise UsageError("Name the GPUs (gpu1:0,1), give --reservation ID, or queue a "
                                 "GPU count (4 --queue).")  # fmt: skip
            else:
                body["gpus"] = gpus
        if args.same_host:
            body["same_host"] = args.same_host
        body.update({k: v for k, v in (("vendor", args.vendor), ("model", args.model)) if v})
        return body

    def _options(self, template: str, given: dict[str, str]) -> dict[str, Any]:
        """--option values as the template's option types (bool, int) ask; str as given."""
        if not given:
            return {}
        listed = self._call(self.client.request, "GET", "templates")["templates"]
        kinds = {
            name: spec.get("type")
            for found in listed
            if found["name"] == template
            for name, spec in found["options"].items()
        }
        return {name: typed(name, value, kinds.get(name)) for name, value in given.items()}

    def _follow(self, job_id: int, poll: float = 1.0) -> dict[str, Any]:
        """Stream every task's new output, rank-prefixed, until the job ends."""
        offsets: dict[int, int] = {}
        try:
            while True:
                job = self._call(self.client.request, "GET", f"jobs/{job_id}")
                for task in job["tasks"]:
                    self._print_new(job_id, task["index"], offsets, len(job["tasks"]) > 1)
                if job["status"] in FINAL:
                    return job  # type: ignore[no-any-return]
                time.sleep(poll)
        except KeyboardInterrupt:
            answer = input(f"\nStop job {job_id}? [y/N] ").strip().lower()
            if answer == "y":
                return self._call(self.client.request, "POST", f"jobs/{job_id}/stop")  # type: ignore[no-any-return]
            print(f"Detached; job {job_id} keeps running. %gpujob attach {job_id} follows it.")
            return self._call(self.client.request, "GET", f"jobs/{job_id}")  # type: ignore[no-any-return]

    def _print_new(self, job_id: int, index: int, offsets: dict[int, int], prefix: bool) -> None:
        try:
            chunk = self.client.request(
                "GET", f"jobs/{job_id}/log", params={"task": index, "offset": offsets.get(index, 0)}
            )
        except HiveClientError as error:
            if error.status == 503:
                return  # host briefly unreachable: try again on the next poll
            raise UsageError(error.message) from None
        offsets[index] = chunk["next_offset"]
        text = chunk["text"]
        if not text:
            return
        lines = text.splitlines()
        print("\n".join(f"[{index}] {ln}" if prefix else ln for ln in lines), flush=True)

    def _line(self, args: Any) -> Any:
        if len(args.gpus) != 2 or args.gpus[0] not in ("attach", "stop", "log", "status"):
            jobs = self._call(self.client.request, "GET", "jobs", params={"user": self._me()})
            return Rows(jobs["jobs"], JOB_COLUMNS, "You have no jobs.")
        verb, raw = args.gpus
        if not raw.isdigit():
            raise UsageError(f"'{raw}' is not a job id.")
        job_id = int(raw)
        if verb == "attach":
            job = self._follow(job_id)
            return JobResult(job, f"Job {job_id} ({job['name']}) {job['status']}.")
        if verb == "stop":
            job = self._call(self.client.request, "POST", f"jobs/{job_id}/stop")
            return JobResult(job, f"Job {job_id} ({job['name']}) {job['status']}.")
        if verb == "status":
            job = self._call(self.client.request, "GET", f"jobs/{job_id}")
            return JobResult(job, f"Job {job_id} ({job['name']}) {job['status']}.")
        job = self._call(self.client.request, "GET", f"jobs/{job_id}")
        for task in job["tasks"]:
            if args.task is not None and task["index"] != args.task:
                continue
            chunk = self._call(
                self.client.request, "GET", f"jobs/{job_id}/log", params={"task": task["index"]}
            )
            print(f"--- task {task['index']} on {task['host']} ({task['state']}); "
                  f"attach: {chunk['attach']}")  # fmt: skip
            print(chunk["text"], end="" if chunk["text"].endswith("\n") else "\n")
        return None

    def _me(self) -> str:
        return str(self._call(self.client.me)["name"])
