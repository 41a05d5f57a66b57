"""`jupyter gpuhive`: write a commented config file; list, add and remove hosts; keys, trust.

Starts fast: this module imports traitlets, jupyter_core and the settings' traits only; each
command imports the store, SSH or the server when it runs (tests/test_cli_imports.py checks).
Errors a person can fix end in one sentence on stderr and status 1 (`common.run`).
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from jupyter_core.paths import jupyter_config_dir
from traitlets import Bool, Unicode

from ..hosts.guidance import setup_text
from .base import _Base
from .common import fail, run, unreachable
from .hosts import HostsApp

CONFIG_NAME = "jupyter_gpuhive_config.py"


class InitApp(_Base):
    """Write a commented configuration file with every gpuhive setting."""

    name = "jupyter-gpuhive-init"
    description = __doc__
    examples = """
jupyter gpuhive init
jupyter gpuhive init --output ./jupyter_gpuhive_config.py --force
"""
    output = Unicode(
        "", help=f"Where to write (default: {CONFIG_NAME} in the Jupyter config dir)."
    ).tag(config=True)
    force = Bool(False, help="Overwrite an existing file.").tag(config=True)
    aliases = {"output": "InitApp.output"}
    flags = {"force": ({"InitApp": {"force": True}}, "Overwrite an existing file.")}

    def start(self) -> None:
        target = Path(self.output or Path(jupyter_config_dir()) / CONFIG_NAME).expanduser()
        if target.exists() and not self.force:
            self.log.error("%s exists; use --force to overwrite it.", target)
            sys.exit(1)
        from ..hosts.secretfiles import write_secret
        from ..server.app import GpuHiveApp as ServerApp  # every setting, the server's too

        text = "# Configuration of jupyter-gpuhive (every setting, commented out).\n"
        text += "c = get_config()  # noqa\n\n"
        text += ServerApp.class_config_section()
        # 0600 from the start: it will hold the database URL and SMTP passwords.
        if not write_secret(target, text.encode(), replace=self.force):
            self.log.error("%s exists; use --force to overwrite it.", target)
            sys.exit(1)
        print(f"Wrote {target}")


class KeyApp(_Base):
    """Print the public key users add to ~/.ssh/authorized_keys on the GPU hosts."""

    name = "jupyter-gpuhive-key"
    description = __doc__
    examples = """
jupyter gpuhive key
jupyter gpuhive key | ssh monitor@gpu1.example.org 'cat >> ~/.ssh/authorized_keys'
"""

    def start(self) -> None:
        from ..hosts.ssh import ensure_client_key

        path = Path(self.gpuhive().ssh_key).expanduser()
        key = ensure_client_key(path)
        print(key.export_public_key("openssh").decode().strip())
        print(f"# private key: {path}", file=sys.stderr)
        print(
            "# Add the line above to ~/.ssh/authorized_keys of the monitoring account on every"
            " host (and of every user whose jobs gpuhive should launch).",
            file=sys.stderr,
        )


class TestApp(_Base):
    """Probe every configured host once and print a table of what was found."""

    name = "jupyter-gpuhive-test"
    description = __doc__
    examples = """
jupyter gpuhive test
"""

    def start(self) -> None:
        asyncio.run(self._test())

    async def _test(self) -> None:
        from ..hosts.pool import HostPool
        from ..monitor.sampler import Sampler

        settings = self.gpuhive().settings_for_hive()
        if not settings.hosts:
            print(setup_text())
            sys.exit(1)
        pool = HostPool(settings.hosts, settings.ssh)
        sampler = Sampler(pool, timeout=settings.ssh.command_timeout)
        started = time.perf_counter()
        sweep = await sampler.sweep()
        elapsed = time.perf_counter() - started
        await pool.close()
        rows = [("HOST", "STATE", "GPUS", "PROCESSES", "PROBLEM")]
        for decl in settings.hosts:
            sample = sweep.samples.get(decl.name)
            if sample is None:
                rows.append((decl.name, "down", "-", "-", sweep.failures.get(decl.name, "?")))
                continue
            owners = sorted({p.user or "?" for p in sample.processes})
            procs = f"{len(sample.processes)} ({', '.join(owners)})" if owners else "0"
            rows.append((decl.name, "up", str(len(sample.gpus)), procs, sample.gpu_error or ""))
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        for row in rows:
            print("  ".join(v.ljust(w) for v, w in zip(row[:4], widths, strict=True)), row[4])
        print(f"\nOne sweep over {len(settings.hosts)} hosts took {elapsed:.2f} s.")
        if sweep.failures:
            sys.exit(2)


class TrustApp(_Base):
    """Show a host's SSH host key and, when confirmed, add it to gpuhive's known_hosts."""

    name = "jupyter-gpuhive-trust"
    description = __doc__
    examples = """
jupyter gpuhive trust gpu1
jupyter gpuhive trust gpu1 --yes
"""
    yes = Bool(False, help="Trust without asking.").tag(config=True)
    flags = {"yes": ({"TrustApp": {"yes": True}}, "Trust without asking.")}

    def start(self) -> None:
        from ..hosts.backends import backend_of
        from ..hosts.config import parse_hosts
        from ..hosts.ssh import fetch_host_key, known_hosts_line

        app = self.gpuhive()
        hosts = {h.name: h for h in parse_hosts(app.all_host_specs())}
        if len(self.extra_args) != 1 or self.extra_args[0] not in hosts:
            print(f"Usage: jupyter gpuhive trust HOST   (hosts: {', '.join(sorted(hosts))})")
            sys.exit(1)
        decl = hosts[self.extra_args[0]]
        if not backend_of(decl).uses_ssh_keys:
            fail(f"{decl.name} is not reached over SSH: there is no SSH host key to trust.")
        try:
            key = asyncio.run(fetch_host_key(decl, timeout=app.ssh_connect_timeout))
        except Exception as error:  # DNS, refused, timeout, an SSH error: one sentence
            fail(unreachable(decl.name, decl.address, decl.port, error))
        print(f"{decl.name} ({decl.address}:{decl.port}) offers {key.get_algorithm()} key")
        print(f"  fingerprint {key.get_fingerprint('sha256')}")
        print("Compare it with `ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub` on that host.")
        answer = "y" if self.yes else _ask("Trust this key? [y/N] ")
        if answer is None:
            fail("Not trusted: there was no answer (no terminal); --yes trusts without asking.")
        if answer != "y":
            fail("Not trusted.")
        from ..files import UnsafePath, append_file

        target = Path(app.known_hosts[0]).expanduser()
        try:
            append_file(target, known_hosts_line(decl, key) + "\n")
        except UnsafePath as error:
            fail(f"Not added. {error}")
        print(f"Added to {target}.")


def _ask(question: str) -> str | None:
    """The answer typed, lower case (None: nobody can answer, stdin is closed)."""
    try:
        return input(question).strip().lower()
    except EOFError:
        print()
        return None


class MigrateApp(_Base):
    """Copy a gpuhive store into another database (personal SQLite → team PostgreSQL)."""

    name = "jupyter-gpuhive-migrate"
    description = __doc__
    examples = """
jupyter gpuhive migrate --to postgresql+psycopg://gpuhive@db.example.org/gpuhive
jupyter gpuhive migrate --from sqlite:///old/gpuhive.sqlite --to sqlite:///new/gpuhive.sqlite
"""
    source = Unicode("", help="URL of the store to copy (default: this user's store).").tag(
        config=True
    )
    target = Unicode("", help="URL of the new store, e.g. postgresql+psycopg://…/gpuhive.").tag(
        config=True
    )
    aliases = {"from": "MigrateApp.source", "to": "MigrateApp.target"}

    def start(self) -> None:
        from .migrate import MigrationError, migrate

        if not self.target:
            print("Usage: jupyter gpuhive migrate [--from URL] --to URL")
            sys.exit(1)
        try:
            copied = migrate(self.source or self.gpuhive().resolved_db_url(), self.target)
        except MigrationError as error:
            print(f"Not migrated: {error}", file=sys.stderr)
            sys.exit(1)
        print(f"Copied {sum(copied.values())} rows in {len(copied)} tables.")


class ReportApp(_Base):
    """Print the accounting report: GPU-hours reserved, used and used by queued jobs, and
    energy (kWh), per user, group and host, with the check that they add up to the site."""

    name = "jupyter-gpuhive-report"
    description = __doc__
    examples = """
jupyter gpuhive report
jupyter gpuhive report --month 2026-11
jupyter gpuhive report --month 2026-01 --until 2026-12 --csv > usage-2026.csv
"""
    month = Unicode("", help="The month, e.g. 2026-11 (default: this month).").tag(config=True)
    until = Unicode("", help="The last month of a longer report (at most 24).").tag(config=True)
    csv = Bool(False, help="Print CSV instead of tables.").tag(config=True)
    aliases = {"month": "ReportApp.month", "until": "ReportApp.until"}
    flags = {"csv": ({"ReportApp": {"csv": True}}, "Print CSV instead of tables.")}

    def start(self) -> None:
        from datetime import datetime

        from ..bookings.accounting import months_between, parse_month, to_csv, to_text
        from ..errors import Invalid
        from ..hive import Hive

        settings = self.gpuhive().settings_for_hive()
        hive = Hive(settings, publish=lambda _event: None).open()
        try:
            today = datetime.now(settings.policy.zone).date().replace(day=1)
            first = parse_month(self.month) if self.month else today
            months = months_between(first, parse_month(self.until) if self.until else first)
            data = hive.fairshare.compute_report(months)
        except Invalid as error:
            print(f"No report: {error.message}", file=sys.stderr)
            sys.exit(1)
        finally:
            hive.close()
        print(to_csv(data) if self.csv else to_text(data), end="")


class GpuHiveCLI(_Base):
    """jupyter-gpuhive: GPU reservations, monitoring and jobs for shared GPU servers."""

    name = "jupyter-gpuhive"
    description = __doc__
    examples = """
jupyter gpuhive hosts add gpu1 gpu1.example.org --user monitor
jupyter gpuhive key
jupyter gpuhive trust gpu1
jupyter gpuhive test
jupyter gpuhive hosts add --help
"""
    subcommands = {
        "init": (InitApp, InitApp.__doc__),
        "hosts": (HostsApp, HostsApp.__doc__),
        "key": (KeyApp, KeyApp.__doc__),
        "test": (TestApp, TestApp.__doc__),
        "trust": (TrustApp, TrustApp.__doc__),
        "migrate": (MigrateApp, MigrateApp.__doc__),
        "report": (ReportApp, ReportApp.__doc__),
        "sim": (
            "jupyter_gpuhive.cli.sim.SimApp",
            "Simulated GPU hosts: sim up, sim down, sim fail, sim recover.",
        ),
        "doctor": (
            "jupyter_gpuhive.cli.doctor.DoctorApp",
            "Check hosts as gpuhive uses them: driver, GPU tool formats, SSH, screen, kernels.",
        ),
    }

    def start(self) -> None:
        if self.subapp is None and self.extra_args and self.extra_args[0] in self.subcommands:
            fail(f"Give options after the command: jupyter gpuhive {self.extra_args[0]} …", 2)
        if self.subapp is None and self.extra_args:
            fail(
                f"Unknown command {self.extra_args[0]!r}; the commands are "
                f"{', '.join(sorted(self.subcommands))} (jupyter gpuhive --help).",
                2,
            )
        if self.subapp is None:
            self.print_help()
            print("\nSubcommands: " + ", ".join(sorted(self.subcommands)))
            sys.exit(0 if "--help" in sys.argv or "-h" in sys.argv else 1)
        self.subapp.start()


def main() -> None:
    """`jupyter gpuhive …`: a known error ends in one sentence on stderr, status 1."""
    run(GpuHiveCLI.launch_instance)


if __name__ == "__main__":
    main()
