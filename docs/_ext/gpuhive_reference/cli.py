"""The CLI reference, from `jupyter gpuhive … --help` of every command and subcommand."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from typing import Any

from .text import label, one_line


def root() -> Any:
    """The `jupyter gpuhive` application class."""
    from jupyter_gpuhive.cli.main import GpuHiveCLI

    return GpuHiveCLI


def commands(app: Any = None, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """(subcommand path, application class) of the root and every subcommand, depth first."""
    app = app or root()
    yield path, app
    table = getattr(app, "subcommands", None)  # the base class has a trait, not a dict
    for name, (sub, _help) in (table if isinstance(table, dict) else {}).items():
        if isinstance(sub, str):  # traitlets allows an import string
            from traitlets.utils.importstring import import_item

            sub = import_item(sub)
        yield from commands(sub, (*path, name))


def help_text(path: tuple[str, ...]) -> str:
    """What `jupyter gpuhive PATH --help` prints, run in this process."""
    app_cls = root()
    out = io.StringIO()
    app_cls.clear_instance()
    app = app_cls.instance()
    try:
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            app.initialize([*path, "--help"])
    finally:
        for _path, cls in commands():
            cls.clear_instance()
    return out.getvalue().rstrip()


def command_label(path: tuple[str, ...]) -> str:
    """The Sphinx label of one command, e.g. cli-hosts-add (cli for the root)."""
    return label("cli", *path)


def cli_page() -> str:
    """The CLI reference as MyST Markdown."""
    out = [
        "# Command line",
        "",
        "`jupyter gpuhive` (also installed as `jupyter-gpuhive`). Generated at build time: the "
        "text under each heading is exactly what the command prints with `--help`. Every "
        "command reads the same configuration files as the server (`jupyter_server_config.py` "
        "and `jupyter_gpuhive_config.py` in the Jupyter config path), so it sees the hosts, "
        "store and keys the server uses.",
        "",
        "| command | what |",
        "| --- | --- |",
    ]
    entries = list(commands())
    for path, cls in entries:
        words = " ".join(("jupyter gpuhive", *path))
        doc = (cls.__doc__ or "").strip().splitlines()[0]
        out.append(f"| [`{words}`](#{command_label(path)}) | {one_line(doc)} |")
    out.append("")
    for path, _cls in entries:
        words = " ".join(("jupyter gpuhive", *path))
        out += [
            f"({command_label(path)})=",
            f"## `{words}`",
            "",
            "```text",
            f"$ {words} --help",
            help_text(path),
            "```",
            "",
        ]
    return "\n".join(out)
