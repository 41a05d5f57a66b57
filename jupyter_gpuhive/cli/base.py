"""The base of every `jupyter gpuhive` command: quiet logs, and the server's configuration
(its config files, or the one `--config PATH` names, as `make demo` prints)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from jupyter_core.application import JupyterApp
from traitlets import default
from traitlets.config import Application

from .._version import __version__
from .common import GpuHiveApp

CONFIG_ALIAS = {
    "config": (
        "JupyterApp.config_file",
        "The server's config file to read (e.g. the one `make demo` prints); default: the "
        "jupyter_server_config.py and jupyter_gpuhive_config.py of the Jupyter config path.",
    )
}


class _Base(JupyterApp):
    version = __version__
    classes = [GpuHiveApp]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.aliases = {**cls.aliases, **CONFIG_ALIAS}  # with its own aliases, --config too

    @default("subcommand_description")
    def _spoken(self) -> str:
        """How to run a subcommand, as people type it (there is no `jupyter-gpuhive-sim`)."""
        command = self.name.replace("-", " ", 2)  # jupyter-gpuhive-sim -> jupyter gpuhive sim
        return f"Run one as `{command} CMD [options]`; `{command} CMD --help` tells more."

    @default("log_format")
    def _plain_log(self) -> str:
        return "%(message)s"  # a bad option is one sentence, not "[App] CRITICAL | …"

    @default("log_level")
    def _quiet(self) -> int:
        return logging.WARNING  # the settings' info lines are for the server's log

    def gpuhive(self) -> GpuHiveApp:
        """A GpuHiveApp configured as the server would configure it: the config files of
        the Jupyter config path, then the file `--config PATH` names (it wins)."""
        for name in ("jupyter_server_config", "jupyter_gpuhive_config"):
            Application.load_config_file(self, name, path=self.config_file_paths)
        if self.config_file:
            path = Path(self.config_file).expanduser()
            if not path.is_file():
                from ..errors import Invalid

                raise Invalid(f"--config {self.config_file}: there is no such file.")
            Application.load_config_file(self, path.name, path=str(path.parent))
        return GpuHiveApp(config=self.config, parent=self)  # logs as this command
