"""`jupyter gpuhive doctor`: check one host the way gpuhive uses it, and keep what it said.

The host's GPU vendor (hosts/vendors/) gives its checks: its tool's queries, each run
alone and read by gpuhive's own parsers, and GPU health as the monitor judges it; then the
connection (SSH: the host key and the login), the task runner's tool (GNU screen: jobs) and
the kernel Python (ipykernel, isolated with `-I`, as kernels start). A host's container
engine (its `containers` entry) is not checked yet: its settings are checked when the
configuration is read, and a container job's start failure names the engine's error.
"""

from __future__ import annotations

import asyncio
import shlex
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from ..hosts.backends import backend_of
from ..hosts.pool import HostPool, HostUnavailable
from ..hosts.vendors import DoctorCheck, DoctorOutput, vendor_of
from ..kernels.launch import python_command
from ..model import HostDecl

OK, WARN, FAIL = "ok", "warn", "fail"
_KERNEL_PY = "import sys, ipykernel; print(sys.version.split()[0], ipykernel.__version__)"


Check = DoctorCheck  # one finding (the vendors make theirs)
Output = DoctorOutput  # one raw answer


@dataclass
class HostReport:
    """The checks of one host and the raw outputs they read."""

    host: str
    where: str
    checks: list[Check] = field(default_factory=list)
    outputs: list[Output] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        """The report as JSON-ready data (outputs by file name, without their text)."""
        return {
            "host": self.host,
            "where": self.where,
            "checks": [asdict(c) for c in self.checks],
            "outputs": [
                {"file": o.file, "command": o.command, "exit_status": o.status}
                for o in self.outputs
            ],
        }


def where(decl: HostDecl, user: str) -> str:
    """How gpuhive reaches the host, in words (its backend says)."""
    return backend_of(decl).where(decl, user)


async def diagnose(
    pool: HostPool, decl: HostDecl, *, user: str, python: str, timeout: float
) -> HostReport:
    """Run every check on one host (the vendor's queries at once) and judge the answers."""
    vendor = vendor_of(decl.extra)
    runner = pool.backend_of(decl).runner(decl)
    queries = vendor.doctor_queries()
    report = HostReport(decl.name, where(decl, user))
    add = report.checks.append
    took: dict[str, float] = {}  # seconds by command (the vendor's queries run at once)

    async def run(command: str) -> tuple[int, str]:
        began = time.monotonic()
        done = await pool.run(decl.name, command, timeout=timeout)
        took[command] = time.monotonic() - began
        return done.exit_status, done.stdout + done.stderr

    try:
        await run("echo gpuhive-doctor")
    except HostUnavailable as error:
        said = "gpuhive trust" in error.reason or "gpuhive key" in error.reason  # the fix
        fix = "" if said else "check the host's address, port and user (jupyter gpuhive hosts)."
        add(Check(decl.name, "connection", FAIL, f"{report.where}: {error.reason}", fix))
        return report
    if backend_of(decl).uses_ssh_keys:
        add(Check(decl.name, "connection", OK, f"{report.where}: logged in; host key trusted"))
    else:
        add(Check(decl.name, "connection", OK, f"{report.where}: commands run"))
    try:
        smi = await run(vendor.doctor_find())
        answers = await asyncio.gather(*(run(f"{cmd} 2>&1") for _, _, cmd in queries))
        find = runner.doctor_find()
        tool = await run(find) if find is not None else None
        kernel = await run(_kernel_command(python))
    except HostUnavailable as error:
        add(Check(decl.name, "connection", FAIL, f"the host stopped answering: {error.reason}"))
        return report
    add(vendor.doctor_tool(decl.name, *smi))
    if smi[0] == 0:
        report.outputs = [
            Output(file, cmd, status, text, took.get(f"{cmd} 2>&1"))
            for (_, file, cmd), (status, text) in zip(queries, answers, strict=True)
        ]
        report.checks += vendor.doctor_judge(decl.name, {o.file: o for o in report.outputs})
    judged = runner.doctor_check(decl.name, *tool) if tool is not None else None
    if judged is not None:
        add(judged)
    add(_kernel_python(decl.name, python, *kernel))
    return report


def _kernel_command(python: str) -> str:
    return (
        f'{python_command(python)}; [ -x "$PY" ] || exit 127; '
        f'out=$("$PY" -I -c {shlex.quote(_KERNEL_PY)} 2>&1); st=$?; '
        'printf "%s\\n" "$out" | tail -n 1; exit $st'
    )


def _kernel_python(host: str, python: str, status: int, text: str) -> Check:
    words = text.strip().split()
    if status == 0 and len(words) == 2:
        return Check(
            host,
            "kernel-python",
            OK,
            f"{python}: Python {words[0]}, ipykernel {words[1]} (isolated, -I)",
        )
    if status == 127:
        return Check(
            host,
            "kernel-python",
            FAIL,
            f"{python} does not exist there",
            "set the host's kernel_python to a Python with ipykernel.",
        )
    return Check(
        host,
        "kernel-python",
        FAIL,
        f"ipykernel does not import in {python} -I: {text.strip()[-200:] or 'no output'}",
        f"install it there ({python} -m pip install ipykernel), or set the host's "
        "kernel_python to a Python that has it.",
    )
