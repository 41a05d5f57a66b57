"""`jupyter gpuhive doctor [--json] [--save DIR] [HOST]`: check hosts the way gpuhive uses them.

One line per check (ok, warn or fail, what was seen, what to do), ready to paste into an issue;
`--json` prints the same as JSON; `--save DIR` keeps each raw output of the GPU tool it read in
DIR/HOST/, one file per query, to become test samples. Status 1 when a check fails.
"""

from __future__ import annotations

import asyncio
import getpass
import json
import platform
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from traitlets import Bool, Unicode

from .._version import __version__
from .base import _Base
from .common import fail

MARKS = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL"}


class DoctorApp(_Base):
    """Check hosts as gpuhive uses them (driver, the GPU tool's formats, SSH, screen, kernels)."""

    name = "jupyter-gpuhive-doctor"
    description = __doc__
    examples = """
jupyter gpuhive doctor
jupyter gpuhive doctor gpu1 --save ./gpu1-samples
jupyter gpuhive doctor --json > doctor.json
"""
    json = Bool(False, help="Print the report as JSON.").tag(config=True)
    save = Unicode("", help="Keep the GPU tool's raw outputs in this folder (one per query).").tag(
        config=True
    )
    aliases = {"save": "DoctorApp.save"}
    flags = {"json": ({"DoctorApp": {"json": True}}, "Print the report as JSON.")}

    def start(self) -> None:
        from ..hosts.config import local_host_name, parse_host

        if len(self.extra_args) > 1:
            fail("Usage: jupyter gpuhive doctor [--json] [--save DIR] [HOST]")
        app = self.gpuhive()
        settings = app.settings_for_hive()
        hosts = list(settings.hosts) or [
            parse_host({"name": local_host_name(), "transport": "local"})
        ]
        if self.extra_args:
            named = [h for h in hosts if h.name == self.extra_args[0]]
            if not named:
                fail(
                    f"No host {self.extra_args[0]!r}; the hosts are "
                    f"{', '.join(h.name for h in hosts)} (jupyter gpuhive hosts)."
                )
            hosts = named
        reports = asyncio.run(self._diagnose(hosts, settings.ssh))
        if self.save:
            self._save(Path(self.save).expanduser(), reports)
        checks = [c for r in reports for c in r.checks]
        failed = sum(c.status == "fail" for c in checks)
        if self.json:
            print(json.dumps(self._json(reports), indent=2))
        else:
            print(self._text(reports))
        sys.exit(1 if failed else 0)

    async def _diagnose(self, hosts: list[Any], ssh: Any) -> list[Any]:
        from ..hosts.pool import HostPool
        from .doctor_checks import diagnose

        pool = HostPool(hosts, ssh)
        try:
            return [
                await diagnose(
                    pool,
                    decl,
                    user=decl.user or getpass.getuser(),
                    python=str(decl.extra.get("kernel_python") or sys.executable),
                    timeout=ssh.command_timeout,
                )
                for decl in hosts
            ]
        finally:
            await pool.close()

    def _about(self) -> dict[str, str]:
        return {
            "gpuhive": __version__,
            "python": platform.python_version(),
            "system": platform.platform(),
            "at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }

    def _json(self, reports: list[Any]) -> dict[str, Any]:
        hosts = [r.as_json() for r in reports]
        checks = [c for h in hosts for c in h.pop("checks")]
        statuses = [c["status"] for c in checks]
        counts = {s: statuses.count(s) for s in ("ok", "warn", "fail")}
        return {**self._about(), "hosts": hosts, "checks": checks, "summary": counts}

    def _text(self, reports: list[Any]) -> str:
        about = self._about()
        lines = [
            f"gpuhive doctor: jupyter-gpuhive {about['gpuhive']}, Python {about['python']}, "
            f"{about['system']}, {about['at']}"
        ]
        checks = [c for r in reports for c in r.checks]
        host_w = max((len(c.host) for c in checks), default=4)
        name_w = max((len(c.name) for c in checks), default=4)
        for report in reports:
            lines.append(f"{report.host}: {report.where}")
            for c in report.checks:
                fix = f" -> {c.fix}" if c.fix else ""
                lines.append(
                    f"{MARKS[c.status]} {c.host:<{host_w}} {c.name:<{name_w}} {c.detail}{fix}"
                )
        statuses = [c.status for c in checks]
        lines.append(
            f"{statuses.count('ok')} ok, {statuses.count('warn')} warn, "
            f"{statuses.count('fail')} fail."
        )
        return "\n".join(lines)

    def _save(self, root: Path, reports: list[Any]) -> None:
        """Write the outputs (which hold users' process names) only where nobody else can:
        no link followed, no folder or file of another account used (files.py)."""
        from ..files import UnsafePath, write_file

        try:
            for report in reports:
                folder = root / report.host
                for output in report.outputs:
                    write_file(folder / output.file, output.text, 0o600)
                about = {**self._about(), **report.as_json()}
                write_file(folder / "doctor.json", json.dumps(about, indent=2) + "\n", 0o600)
        except UnsafePath as error:
            fail(f"Nothing more saved. {error}")
        print(
            f"Saved the raw outputs in {root}/HOST/ (doctor.json says which command "
            "wrote each file).",
            file=sys.stderr,
        )
