"""The CLI starts without the server: `--help` of every command, and the commands that need
no store (`hosts add`, `trust`, `key`), import neither Jupyter Server nor tornado nor
SQLAlchemy (issue #28, item 9: each import of `cli.main` cost 2.5 s). Imports, not timing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_gpuhive.cli.main import GpuHiveCLI
from tests.test_docs_reference import cli_commands

HEAVY = ("jupyter_server", "tornado", "sqlalchemy", "alembic", "pydantic")
PROBE = """
import json, sys
report = sys.argv[1]
sys.argv = ["jupyter-gpuhive", *sys.argv[2:]]
from jupyter_gpuhive.cli.main import main
try:
    main()
except SystemExit:
    pass
with open(report, "w") as out:
    json.dump(sorted({m.split(".")[0] for m in sys.modules}), out)
"""


def imported(tmp_path: Path, *args: str) -> set[str]:
    """The top-level packages imported by one CLI run (in a fresh interpreter)."""
    report = tmp_path / "modules.json"
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
           "JUPYTER_DATA_DIR": str(tmp_path / "data")}  # fmt: skip
    subprocess.run([sys.executable, "-c", PROBE, str(report), *args], env=env,
                   capture_output=True, stdin=subprocess.DEVNULL, timeout=60, check=False)  # fmt: skip
    return set(json.loads(report.read_text()))


def test_importing_the_cli_imports_no_server(tmp_path: Path) -> None:
    assert not imported(tmp_path, "--version") & {*HEAVY, "asyncssh"}


@pytest.mark.parametrize(
    "path", [path for path, _ in cli_commands(GpuHiveCLI)], ids=lambda p: " ".join(p) or "root"
)
def test_help_imports_no_server(tmp_path: Path, path: tuple[str, ...]) -> None:
    found = imported(tmp_path, *path, "--help")
    assert not found & {*HEAVY, "asyncssh"}, sorted(found & {*HEAVY, "asyncssh"})


@pytest.mark.parametrize(
    "args",
    [
        ("hosts", "add", "gpu9", "gpu9.example.org", "--user", "monitor"),
        ("trust", "gpu9"),  # it does not resolve: the attempt, then one sentence
        ("key",),
    ],
)
def test_light_commands_import_no_server(tmp_path: Path, args: tuple[str, ...]) -> None:
    if args[0] != "hosts":
        imported(tmp_path, "hosts", "add", "gpu9", "no-such-host.invalid")
    assert not imported(tmp_path, *args) & set(HEAVY)


def test_every_help_has_examples() -> None:
    for path, app in cli_commands(GpuHiveCLI):
        examples = app.examples if isinstance(app.examples, str) else ""  # else: the trait
        assert "jupyter gpuhive" in examples, " ".join(path) or "root"
