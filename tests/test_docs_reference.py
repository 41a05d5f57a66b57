"""The generated reference (docs/reference/*.md) against the live objects.

The pages are written by the docs' own Sphinx extension (docs/_ext/gpuhive_reference), as
`make docs` writes them. Each test finds the live objects on its own — every configurable
class of the package, the route table and its handlers' methods, the magics a kernel really
registers, the CLI's subcommands — and fails when one of them is missing from the pages.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell
from traitlets import HasTraits
from traitlets.utils.importstring import import_item

import jupyter_gpuhive
from jupyter_gpuhive.cli.main import GpuHiveCLI
from jupyter_gpuhive.server.api import ENDPOINTS

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "docs" / "_ext"))

from gpuhive_reference import write_pages  # noqa: E402

HTTP_METHODS = ("get", "post", "put", "patch", "delete")


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Every generated page, written by the extension into a fresh folder."""
    folder = tmp_path_factory.mktemp("reference")
    return {name: path.read_text() for name, path in write_pages(folder).items()}


def section(page: str, heading: str) -> str:
    """The text from the heading line that starts with `heading` to the next heading."""
    lines = page.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith(heading)]
    assert len(starts) == 1, f"{len(starts)} headings {heading!r} in the page"
    rest = lines[starts[0] + 1 :]
    end = next((i for i, line in enumerate(rest) if re.match(r"#{1,3} ", line)), len(rest))
    return "\n".join(rest[:end])


def package_configurables() -> list[type[HasTraits]]:
    """Every class of the package with config traits, outside the CLI (its own page).

    A class whose settings a subclass carries counts as that subclass (GpuHiveSettings is
    configured and documented as GpuHiveApp)."""
    every = []
    for info in pkgutil.walk_packages(jupyter_gpuhive.__path__, "jupyter_gpuhive."):
        if ".labextension" in info.name or info.name.startswith("jupyter_gpuhive.cli"):
            continue
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and issubclass(cls, HasTraits):
                every.append(cls)
    found = [c for c in every if c.class_own_traits(config=True)]
    return [next((s for s in every if s is not c and issubclass(s, c)), c) for c in found]


def test_every_configuration_trait_is_in_the_reference(pages: dict[str, str]) -> None:
    page = pages["configuration.md"]
    classes = package_configurables()
    assert {c.__name__ for c in classes} >= {"GpuHiveApp", "GpuHiveService"}
    missing = []
    for cls in classes:
        part = section(page, f"## `{cls.__name__}`")
        for name, trait in cls.class_traits(config=True).items():
            own = f"```{{confval}} {cls.__name__}.{name}\n"
            inherited = f"| `{name}` |"
            if own not in part + "\n" and inherited not in part:
                missing.append(f"{cls.__name__}.{name}")
            elif own in part + "\n" and (trait.help or "").strip():
                body = part.split(own, 1)[1].split("```", 1)[0]
                shown = trait.help.strip().replace("<", "&lt;")  # written as an entity
                assert shown in body, f"{cls.__name__}.{name}: help text differs"
    assert not missing, f"settings missing from the configuration reference: {missing}"


def test_every_route_and_method_is_in_the_reference(pages: dict[str, str]) -> None:
    page = pages["rest-api.md"]
    expected = []
    for path, logic in ENDPOINTS:
        own = [k for k in logic.__mro__ if k.__module__.startswith("jupyter_gpuhive")]
        expected += [f"{m.upper()} {path}" for m in HTTP_METHODS if any(m in vars(k) for k in own)]
    assert len(expected) > 40
    missing = [op for op in expected if f"### `{op}`" not in page]
    assert not missing, f"operations missing from the REST API reference: {missing}"
    documented = re.findall(r"^### `(\w+ \S+)`$", page, re.MULTILINE)
    assert sorted(documented) == sorted(expected), "the reference lists routes the server lacks"


def test_every_parameter_and_body_field_is_in_the_reference(pages: dict[str, str]) -> None:
    import json

    doc = json.loads(pages["openapi.json"])
    page = pages["rest-api.md"]
    for path, item in doc["paths"].items():
        for method, op in item.items():
            part = section(page, f"### `{method.upper()} {path}`")
            for param in op.get("parameters", []):
                assert f"| `{param['name']}` | {param['in']} |" in part, (method, path, param)
            for status in op["responses"]:
                assert f"\n| {status} |" in part, (method, path, status)
            body = op.get("requestBody", {}).get("content", {}).get("application/json")
            if body and "$ref" in body["schema"]:
                schema = doc["components"]["schemas"][body["schema"]["$ref"].rsplit("/", 1)[1]]
                for field in schema.get("properties", {}):
                    assert f"| `{field}` |" in part, (method, path, field)


def test_every_magic_and_option_is_in_the_reference(
    pages: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    page = pages["magics.md"]
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "jupyter_gpuhive")
    ours = {
        name: fn
        for kind in ("line", "cell")
        for name, fn in shell.magics_manager.magics[kind].items()
        if getattr(fn, "__module__", "").startswith("jupyter_gpuhive")
    }
    assert {"gpureserve", "gpujob", "gpustatus", "gpufeed"} <= set(ours)
    for name, fn in ours.items():
        part = section(page, f"## `%{name}`")
        for action in fn.parser._actions:
            for word in action.option_strings or [action.dest]:
                assert re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", part), (name, word)
        capsys.readouterr()
        shell.run_line_magic(name, "-h")  # what a notebook shows, word for word
        assert capsys.readouterr().out.rstrip() in part, name


def cli_commands(app: type = GpuHiveCLI, path: tuple[str, ...] = ()) -> list[tuple]:
    found = [(path, app)]
    table = app.__dict__.get("subcommands") or {}
    for name, (sub, _) in table.items():
        found += cli_commands(import_item(sub) if isinstance(sub, str) else sub, (*path, name))
    return found


def test_every_cli_command_and_option_is_in_the_reference(pages: dict[str, str]) -> None:
    page = pages["cli.md"]
    commands = cli_commands()
    assert len(commands) >= 9
    for path, app in commands:
        part = section(page, f"## `{' '.join(('jupyter gpuhive', *path))}`")
        for sub in app.__dict__.get("subcommands") or {}:
            assert f"\n{sub}\n" in part, (path, sub)
        for option in [*app.__dict__.get("aliases", {}), *app.__dict__.get("flags", {})]:
            assert f"--{option}" in part, (path, option)


def test_the_cli_page_is_what_the_command_prints(pages: dict[str, str]) -> None:
    """The in-process help equals the real command's output (one subprocess)."""
    real = subprocess.run(
        [sys.executable, "-m", "jupyter_gpuhive.cli.main", "hosts", "add", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    part = section(pages["cli.md"], "## `jupyter gpuhive hosts add`")
    shown = part.split("$ jupyter gpuhive hosts add --help\n", 1)[1].split("\n```", 1)[0]
    assert shown == real.rstrip()


def test_every_widget_entry_point_is_in_the_reference(pages: dict[str, str]) -> None:
    import jupyter_gpuhive.widgets as widgets

    public = [
        name
        for name, fn in inspect.getmembers(widgets, inspect.isfunction)
        if fn.__module__ == widgets.__name__ and not name.startswith("_")
    ]
    assert set(public) == set(widgets.__all__), "a public widget function is not exported"
    for name in public:
        assert inspect.getdoc(getattr(widgets, name)), f"widgets.{name} has no docstring"
        assert f".. autofunction:: jupyter_gpuhive.widgets.{name}\n" in pages["widgets.md"]


def test_every_job_template_and_option_is_in_the_reference(pages: dict[str, str]) -> None:
    from jupyter_gpuhive.jobs.catalog import TEMPLATES

    assert {"plain", "pytorch", "tensorflow", "tf-clusterspec"} <= set(TEMPLATES)
    for name, template in TEMPLATES.items():
        part = section(pages["templates.md"], f"## `{name}`")
        for option in template.options:
            assert f"| `{option}` |" in part, (name, option)
