"""Layer rules of the host backend seam (issue #42, item 1), each with a test that shows it
can fail: outside `hosts/backends/` no code compares a transport with a name (it asks the
host's backend what it can do), only the SSH stack of `hosts/` imports asyncssh (kernels
reuse the pool's connections), and only the screen runner (`hosts/runners/screen.py`) names
GNU screen's commands (the launcher, sync, stop and doctor ask the host's task runner)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import jupyter_gpuhive

ROOT = Path(jupyter_gpuhive.__file__).resolve().parent
BACKENDS = "hosts/backends/"
# The one SSH stack: settings and connecting, key checks, loops, and the SSH backend.
SSH_STACK = {
    "hosts/ssh.py",
    "hosts/keycheck.py",
    "hosts/loops.py",
    "hosts/backends/ssh.py",
    "hosts/backends/sshchannels.py",
}

# The task runner that drives GNU screen; no other module builds or reads its command lines.
SCREEN_RUNNER = "hosts/runners/screen.py"
# `screen -dmS`, `screen -ls`, `screen -S NAME -X quit`, `screen -x`, `screen -v`...
SCREEN_WORDS = re.compile(r"\bscreen\s+-|-dmS\b|-DmS\b|\s-X\s+quit\b")


def _names_transport(node: ast.expr) -> bool:
    """`x.transport`, `transport`, `x["transport"]`, `x.get("transport", ...)`."""
    if isinstance(node, ast.Attribute):
        return node.attr == "transport"
    if isinstance(node, ast.Name):
        return node.id == "transport"
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "transport"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        first = node.args[0] if node.args else None
        return (
            node.func.attr == "get"
            and isinstance(first, ast.Constant)
            and (first.value == "transport")
        )
    return False


def _is_text(node: ast.expr) -> bool:
    """A string, or a tuple, list or set of strings."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return bool(node.elts) and all(_is_text(e) for e in node.elts)
    return False


def transport_comparisons(root: Path) -> list[str]:
    """'module:line' of every comparison of a transport with a name, outside the backends."""
    found = []
    for path in sorted(root.rglob("*.py")):
        name = path.relative_to(root).as_posix()
        if name.startswith(BACKENDS):
            continue
        for node in ast.walk(ast.parse(path.read_text(), name)):
            if isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                if any(map(_names_transport, sides)) and any(map(_is_text, sides)):
                    found.append(f"{name}:{node.lineno}")
    return found


def asyncssh_imports(root: Path) -> list[str]:
    """'module:line' of every import of asyncssh outside the SSH stack."""
    found = []
    for path in sorted(root.rglob("*.py")):
        name = path.relative_to(root).as_posix()
        if name in SSH_STACK:
            continue
        for node in ast.walk(ast.parse(path.read_text(), name)):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            if any(n.split(".")[0] == "asyncssh" for n in names):
                found.append(f"{name}:{node.lineno}")
    return found


def test_no_code_compares_transport_names() -> None:
    found = transport_comparisons(ROOT)
    assert not found, f"ask the host's backend (hosts/backends) instead: {found}"


def test_the_transport_check_sees_a_comparison(tmp_path: Path) -> None:
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "a.py").write_text(
        "def f(decl, host, spec):\n"
        "    if decl.transport == 'local':\n"
        "        return 1\n"
        "    if host.get('transport') != 'ssh':\n"
        "        return 2\n"
        "    return spec['transport'] in ('ssh', 'local')\n"
    )
    (tmp_path / "jobs" / "b.py").write_text(  # making a spec, asking a backend: fine
        "def g(backend, decl):\n"
        "    spec = {'transport': 'local'}\n"
        "    return backend.runs_here and decl.transport == backend.name, spec\n"
    )
    (tmp_path / "hosts" / "backends").mkdir(parents=True)
    (tmp_path / "hosts" / "backends" / "x.py").write_text("ok = 'ssh' == 'ssh'\n")
    assert transport_comparisons(tmp_path) == ["jobs/a.py:2", "jobs/a.py:4", "jobs/a.py:6"]


def test_only_the_ssh_stack_imports_asyncssh() -> None:
    found = asyncssh_imports(ROOT)
    assert not found, f"reach hosts through the pool and its backends instead: {found}"


def test_the_asyncssh_check_sees_an_import(tmp_path: Path) -> None:
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "remote.py").write_text(
        "def f():\n    import asyncssh.connection\n    return asyncssh\n"
    )
    (tmp_path / "hosts").mkdir()
    (tmp_path / "hosts" / "pool.py").write_text("from asyncssh import connect\n")
    (tmp_path / "hosts" / "ssh.py").write_text("import asyncssh\n")  # the stack itself
    assert asyncssh_imports(tmp_path) == ["hosts/pool.py:1", "kernels/remote.py:2"]


def _screen_text(node: ast.AST) -> bool:
    """A string with a screen command in it, or an argv list or tuple starting with `screen`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return bool(SCREEN_WORDS.search(node.value))
    if isinstance(node, ast.List | ast.Tuple) and node.elts:
        first = node.elts[0]
        return isinstance(first, ast.Constant) and first.value == "screen"
    return False


def screen_commands(root: Path) -> list[str]:
    """'module:line' of every screen command line (or argv) outside the screen runner."""
    found = []
    for path in sorted(root.rglob("*.py")):
        name = path.relative_to(root).as_posix()
        if name == SCREEN_RUNNER:
            continue
        for node in ast.walk(ast.parse(path.read_text(), name)):
            if _screen_text(node):
                found.append(f"{name}:{node.lineno}")  # type: ignore[attr-defined]
    return sorted(set(found))


def test_only_the_screen_runner_names_screen_commands() -> None:
    found = screen_commands(ROOT)
    assert not found, f"ask the host's task runner (hosts/runners) instead: {found}"


def test_the_screen_check_sees_a_command(tmp_path: Path) -> None:
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "launcher.py").write_text(
        "def f(name, body):\n"
        "    line = f'screen -dmS {name} bash -c {body}'\n"
        "    hint = ['screen', '-x', name]\n"
        "    return line, hint, 'screen -ls'\n"
    )
    (tmp_path / "cli").mkdir()
    (tmp_path / "cli" / "doctor.py").write_text(
        "FIND = 'command -v screen || exit 127; screen -v'\n"
        "QUIT = 'kill it; s -S x -X quit'\n"
        "OK = 'GNU screen is not installed'  # words about screen: fine\n"
    )
    (tmp_path / "hosts" / "runners").mkdir(parents=True)
    (tmp_path / "hosts" / "runners" / "screen.py").write_text("LIST = 'screen -ls'\n")
    assert screen_commands(tmp_path) == [
        "cli/doctor.py:1",
        "cli/doctor.py:2",
        "jobs/launcher.py:2",
        "jobs/launcher.py:3",
        "jobs/launcher.py:4",
    ]
