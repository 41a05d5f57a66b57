"""Layer rules on the package's shape (part of tests/test_architecture.py's rules, kept in
a file of their own): no module over MAX_LINES, and the domain never imports tornado or
jupyter_server. Each rule with a test that shows it can fail."""

from __future__ import annotations

import ast
from pathlib import Path

import jupyter_gpuhive

ROOT = Path(jupyter_gpuhive.__file__).resolve().parent
MAX_LINES = 450

# Modules still over MAX_LINES, each being split along its seams (issue #42): this list only
# shrinks. A module leaves it once split; a new one never joins (split it instead).
OVER_TODAY: set[str] = set()  # empty since cli/main.py and store/reservations.py were split

# The domain: every package below server/ (docs/architecture.md). The server, the command
# line above it and the kernel side (notebook/, widgets/) are not.
NOT_DOMAIN = {"server", "cli", "notebook", "widgets"}
FRONT_ENDS = {"tornado", "jupyter_server"}

# Domain modules that still import tornado, each with why (docs/architecture.md says so):
# none since webhooks leave through integrations/transport.py's seam (tornado's side is in
# server/http_transport.py). This list only shrinks.
FRONT_END_IMPORTS_TODAY: dict[str, str] = {}


def too_long(root: Path, limit: int = MAX_LINES) -> dict[str, int]:
    """Modules under `root` over `limit` lines, with their lengths."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        lines = len(path.read_text().splitlines())
        if lines > limit:
            found[path.relative_to(root).as_posix()] = lines
    return found


def test_no_module_is_over_the_limit() -> None:
    found = too_long(ROOT)
    new = {name: n for name, n in found.items() if name not in OVER_TODAY}
    assert not new, f"modules over {MAX_LINES} lines (split them along their seams): {new}"
    fixed = OVER_TODAY - set(found)
    assert not fixed, f"now under {MAX_LINES} lines: take them out of OVER_TODAY: {fixed}"


def test_the_size_check_sees_a_long_module(tmp_path: Path) -> None:
    (tmp_path / "short.py").write_text("x = 1\n" * MAX_LINES)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    assert too_long(tmp_path) == {"pkg/long.py": MAX_LINES + 1}


def front_end_imports(root: Path) -> dict[str, list[str]]:
    """Domain modules under `root` importing tornado or jupyter_server (anywhere in them):
    module -> 'line: name'."""
    found: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        name = path.relative_to(root).as_posix()
        if name.split("/")[0] in NOT_DOMAIN:
            continue
        for node in ast.walk(ast.parse(path.read_text(), name)):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for imported in names:
                if imported.split(".")[0] in FRONT_ENDS:
                    found.setdefault(name, []).append(f"{node.lineno}: {imported}")
    return found


def test_the_domain_never_imports_tornado_or_jupyter_server() -> None:
    found = front_end_imports(ROOT)
    new = {name: where for name, where in found.items() if name not in FRONT_END_IMPORTS_TODAY}
    assert not new, f"the domain imports a front end (move that code to server/): {new}"
    fixed = set(FRONT_END_IMPORTS_TODAY) - set(found)
    assert not fixed, f"no longer import one: take them out of FRONT_END_IMPORTS_TODAY: {fixed}"


def test_the_front_end_check_sees_an_import(tmp_path: Path) -> None:
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "specs.py").write_text(
        "def handler():\n    from jupyter_server import CallContext\n    return CallContext\n"
    )
    (tmp_path / "hosts").mkdir()
    (tmp_path / "hosts" / "web.py").write_text("import tornado.web\n")
    (tmp_path / "server").mkdir()
    (tmp_path / "server" / "app.py").write_text("from tornado import web\n")  # allowed there
    assert front_end_imports(tmp_path) == {
        "hosts/web.py": ["1: tornado.web"],
        "kernels/specs.py": ["2: jupyter_server"],
    }
