"""`jupyter gpuhive hosts`: list the GPU hosts gpuhive knows; add or remove them in the
hosts file (the host inventory's commands of the command line, `cli.main`).

Imports as `cli.main` does: traitlets and the settings' traits only; each command imports the
store or the server when it runs (tests/test_cli_imports.py).
"""

from __future__ import annotations

import sys
from typing import Any

from traitlets import Int, Unicode

from ..hosts.guidance import setup_text
from .base import _Base
from .common import GpuHiveApp


class HostsListApp(_Base):
    """List the GPU hosts and GPUs gpuhive knows (configured and stored)."""

    name = "jupyter-gpuhive-hosts-list"
    description = __doc__
    examples = """
jupyter gpuhive hosts list
"""

    def start(self) -> None:
        from ..hive import Hive

        app = self.gpuhive()
        settings = app.settings_for_hive()
        configured = {h.name for h in settings.hosts}
        hive = Hive(settings, publish=lambda _event: None).open()
        try:
            rows: list[tuple[Any, ...]] = []
            for host in hive.store.inventory.hosts():
                where = f"{host.user + '@' if host.user else ''}{host.address}:{host.port}"
                gone = "" if host.name in configured else "no longer configured"
                rows.append((host.name, host.transport, where, len(host.gpus), gone))
                for gpu in host.gpus:
                    memory = f"{gpu.memory_mib} MiB" if gpu.memory_mib else ""
                    rows.append(("", "", f"  {gpu.ref}", gpu.model or "?", f"{gpu.uuid} {memory}"))
        finally:
            hive.close()
        if not rows:
            print(setup_text())
            return
        header = ("HOST", "TRANSPORT", "ADDRESS / GPU", "GPUS / MODEL", "UUID / NOTE")
        widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
        for row in [header, *rows]:
            print("  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
        print(f"\nHosts file: {app.hosts_file_path()}")


class HostsAddApp(_Base):
    """Add a GPU host to the hosts file: NAME ADDRESS [--user U] [--port P] [--transport T]."""

    name = "jupyter-gpuhive-hosts-add"
    description = __doc__
    examples = """
jupyter gpuhive hosts add gpu1 gpu1.example.org --user monitor
jupyter gpuhive hosts add gpu2 10.0.0.12 --user monitor --port 2222
jupyter gpuhive hosts add workstation --transport local
"""
    user = Unicode("", help="The account gpuhive logs in as (default: the server's user).").tag(
        config=True
    )
    port = Int(22, help="The SSH port.").tag(config=True)
    transport = Unicode(
        "ssh", help="ssh, local (this machine), or a host backend the site installed."
    ).tag(config=True)
    aliases = {
        "user": "HostsAddApp.user",
        "port": "HostsAddApp.port",
        "transport": "HostsAddApp.transport",
    }

    def start(self) -> None:
        from ..errors import Invalid
        from ..hosts.backends import DEFAULT, backend_class
        from ..hosts.config import parse_host
        from ..hosts.file import add_host
        from .localhost import keep_local_host

        try:
            backend = backend_class(self.transport)
        except Invalid as error:
            print(f"Not added: {error.message}", file=sys.stderr)
            sys.exit(1)
        if len(self.extra_args) not in (1, 2) or (
            len(self.extra_args) == 1 and backend.needs_address
        ):
            print(
                "Usage: jupyter gpuhive hosts add NAME ADDRESS [--user U] [--port P]\n"
                "       jupyter gpuhive hosts add NAME --transport local"
            )
            sys.exit(1)
        spec: dict[str, Any] = {"name": self.extra_args[0]}
        if len(self.extra_args) == 2:
            spec["address"] = self.extra_args[1]
        if self.port != 22:
            spec["port"] = self.port
        if self.user:
            spec["user"] = self.user
        if backend is not backend_class(DEFAULT):
            spec["transport"] = self.transport
        app = self.gpuhive()
        path = app.hosts_file_path()
        try:
            parse_host(spec)
            if spec["name"] in {str(h.get("name")) for h in app.hosts if isinstance(h, dict)}:
                raise Invalid(f"{spec['name']!r} is already in c.GpuHiveApp.hosts.")
            kept = keep_local_host(app, path, spec["name"])
            add_host(path, spec)
        except Invalid as error:
            print(f"Not added: {error.message}", file=sys.stderr)
            sys.exit(1)
        if kept:
            print(kept)
        print(f"Added {spec['name']} to {path}.")
        if backend.uses_ssh_keys:
            print(
                f"Next: add the key from `jupyter gpuhive key` to ~/.ssh/authorized_keys on "
                f"{spec['name']}, then `jupyter gpuhive trust {spec['name']}`."
            )
        print(reload_note(app))


class HostsRemoveApp(_Base):
    """Remove a GPU host from the hosts file (its reservations and history stay)."""

    name = "jupyter-gpuhive-hosts-remove"
    description = __doc__
    examples = """
jupyter gpuhive hosts remove gpu1
"""

    def start(self) -> None:
        from ..errors import Invalid
        from ..hosts.file import remove_host

        if len(self.extra_args) != 1:
            print("Usage: jupyter gpuhive hosts remove NAME")
            sys.exit(1)
        app = self.gpuhive()
        path = app.hosts_file_path()
        try:
            remove_host(path, self.extra_args[0])
        except Invalid as error:
            print(f"Not removed: {error.message}", file=sys.stderr)
            sys.exit(1)
        print(f"Removed {self.extra_args[0]} from {path}; its reservations and history stay.")
        print(reload_note(app))


def reload_note(app: GpuHiveApp) -> str:
    """What a change of the hosts file needs to be used: nothing, or a restart."""
    if app.hosts_file_reload:
        return (
            "A running gpuhive server uses the change within one poll interval "
            f"({app.poll_interval:g} s); no restart needed."
        )
    return "Restart the Jupyter server to use the change (c.GpuHiveApp.hosts_file_reload is off)."


class HostsApp(HostsListApp):
    """List the GPU hosts (`hosts`, `hosts list`); add or remove them in the hosts file."""

    name = "jupyter-gpuhive-hosts"
    description = __doc__
    examples = """
jupyter gpuhive hosts
jupyter gpuhive hosts add gpu1 gpu1.example.org --user monitor
jupyter gpuhive hosts remove gpu1
"""
    subcommands = {
        "list": (HostsListApp, HostsListApp.__doc__),
        "add": (HostsAddApp, HostsAddApp.__doc__),
        "remove": (HostsRemoveApp, HostsRemoveApp.__doc__),
    }

    def start(self) -> None:
        if self.subapp is not None:
            self.subapp.start()
            return
        super().start()
