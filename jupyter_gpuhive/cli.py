"""`jupyter gpuhive`: write a commented config file, list the inventory."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from jupyter_core.application import JupyterApp
from jupyter_core.paths import jupyter_config_dir
from traitlets import Bool, Unicode
from traitlets.config import Application

from ._version import __version__
from .app import GpuHiveApp

CONFIG_NAME = "jupyter_gpuhive_config.py"


class _Base(JupyterApp):
    version = __version__
    classes = [GpuHiveApp]

    def gpuhive(self) -> GpuHiveApp:
        """A GpuHiveApp configured as the server would configure it."""
        for name in ("jupyter_server_config", "jupyter_gpuhive_config"):
            Application.load_config_file(self, name, path=self.config_file_paths)
        return GpuHiveApp(config=self.config)


class InitApp(_Base):
    """Write a commented configuration file with every gpuhive setting."""

    name = "jupyter-gpuhive-init"
    description = __doc__
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
        target.parent.mkdir(parents=True, exist_ok=True)
        text = "# Configuration of jupyter-gpuhive (every setting, commented out).\n"
        text += "c = get_config()  # noqa\n\n"
        text += GpuHiveApp.class_config_section()
        target.write_text(text)
        print(f"Wrote {target}")


class HostsApp(_Base):
    """List the GPU hosts and GPUs gpuhive knows (configured and stored)."""

    name = "jupyter-gpuhive-hosts"
    description = __doc__

    def start(self) -> None:
        from .hive import Hive

        hive = Hive(self.gpuhive().settings_for_hive()).open()
        try:
            rows: list[tuple[Any, ...]] = []
            for host in hive.store.inventory.hosts():
                where = f"{host.user + '@' if host.user else ''}{host.address}:{host.port}"
                rows.append((host.name, host.transport, where, len(host.gpus), ""))
                for gpu in host.gpus:
                    memory = f"{gpu.memory_mib} MiB" if gpu.memory_mib else ""
                    rows.append(("", "", f"  {gpu.ref}", gpu.model or "?", f"{gpu.uuid} {memory}"))
        finally:
            hive.close()
        if not rows:
            print("No hosts configured. Add c.GpuHiveApp.hosts (see 'jupyter gpuhive init').")
            return
        header = ("HOST", "TRANSPORT", "ADDRESS / GPU", "GPUS / MODEL", "UUID")
        widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
        for row in [header, *rows]:
            print("  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())


class GpuHiveCLI(_Base):
    """jupyter-gpuhive: GPU reservations, monitoring and jobs for shared GPU servers."""

    name = "jupyter-gpuhive"
    description = __doc__
    subcommands = {
        "init": (InitApp, InitApp.__doc__),
        "hosts": (HostsApp, HostsApp.__doc__),
    }

    def start(self) -> None:
        if self.subapp is None:
            self.print_help()
            print("\nSubcommands: " + ", ".join(sorted(self.subcommands)))
            sys.exit(0 if "--help" in sys.argv or "-h" in sys.argv else 1)
        self.subapp.start()


main = GpuHiveCLI.launch_instance

if __name__ == "__main__":
    main()
