"""Layer rules that see more than imports: what server/ reaches through the composition root.

tests/test_architecture.py holds the import rules: server/ imports no module of store/. The
code could still go around them, so two more rules, both read with `ast`:

- server/ never reads the Hive's `store`, nor a repository a service holds (an attribute a
  service sets from the store, such as `integrations.rows`): it calls the services' methods;
- server/ never uses a name that a module it may import (hive.py, a service) took from
  store/: a store type re-exported through the composition root is still the store's.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.test_architecture import PACKAGE, ROOT, SERVICES, modules, repository_classes, top


def _chain(node: ast.expr) -> list[str]:
    """The names of an attribute chain, outermost last: `self.hive.store` → self, hive, store."""
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        names.append(node.id)
    return names[::-1]


def repository_attributes(known: dict[str, tuple[Path, bool]], repositories: set[str]) -> set[str]:
    """Attributes through which a service hands out a store repository: `store` itself and
    every public `self.x` a service sets from the store (`self.rows = store.integrations`) or
    from a parameter typed as a repository (`rows: Digests`)."""
    found = {"store"}
    for name, (path, _) in known.items():
        if top(name) not in SERVICES - {"store"}:
            continue
        for function in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            arguments = function.args.args + function.args.kwonlyargs
            typed = {
                a.arg
                for a in arguments
                if a.annotation is not None
                and ast.unparse(a.annotation).split(".")[-1] in repositories | {"Store"}
            }
            for node in ast.walk(function):
                if not isinstance(node, ast.Assign):
                    continue
                names = _chain(node.value)
                from_store = "store" in names or (names[:1] and names[0] in typed)
                for target in node.targets:
                    if (
                        from_store
                        and isinstance(target, ast.Attribute)
                        and _chain(target)[:1] == ["self"]
                        and not target.attr.startswith("_")
                    ):
                        found.add(target.attr)
    return found


def store_reads(known: dict[str, tuple[Path, bool]], attributes: set[str]) -> list[str]:
    """'file:line: chain' for each read in server/ of one of `attributes` (a repository)."""
    found: list[tuple[str, int, str]] = []
    for name, (path, _) in known.items():
        if top(name) != "server":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Attribute) or node.attr not in attributes:
                continue
            # the Hive's own services share names with repositories (hive.jobs, store.jobs)
            if node.attr != "store" and _chain(node.value)[-1:] == ["hive"]:
                continue
            where = path.relative_to(ROOT.parent) if path.is_relative_to(ROOT) else path
            found.append((str(where), node.lineno, ast.unparse(node)))
    return [f"  {where}:{line}: {chain}" for where, line, chain in sorted(found)]


def test_the_server_reads_no_store_through_the_hive() -> None:
    """server/ asks the services; it never takes `hive.store` or a service's repository."""
    known = modules()
    attributes = repository_attributes(known, repository_classes())
    assert {"store", "rows"} <= attributes
    found = store_reads(known, attributes)
    assert not found, (
        "server/ reaches the store through the composition root (call a service's method "
        "instead):\n" + "\n".join(found)
    )


def test_the_store_read_check_sees_one(tmp_path: Path) -> None:
    service, handler, fine = tmp_path / "s.py", tmp_path / "h.py", tmp_path / "f.py"
    service.write_text(
        "class Digests:\n"
        "    def __init__(self, store, rows: Digests, clock) -> None:\n"
        "        self.rows = rows\n"
        "        self.repo = store.limits\n"
        "        self.clock = clock\n"
        "        self._mine = store.users\n"
    )
    handler.write_text(
        "async def get(self):\n"
        "    await self.hive.run(self.hive.store.preemption.shown, [])\n"
        "    digests = self.hive.integrations.digests\n"
        "    return digests.rows.get('alice'), digests.clock(), self.hive.repo.find()\n"
    )
    fine.write_text("def f(self):\n    return self.hive.store\n")
    known = {
        f"{PACKAGE}.integrations.s": (service, False),
        f"{PACKAGE}.server.api.h": (handler, False),
        f"{PACKAGE}.cli.f": (fine, False),
    }
    attributes = repository_attributes(known, {"Digests"})
    assert attributes == {"store", "rows", "repo"}
    assert store_reads(known, attributes) == [
        f"  {handler}:2: self.hive.store",
        f"  {handler}:4: digests.rows",
    ]


def _imports_from(path: Path, here: list[str]) -> list[tuple[ast.ImportFrom, str]]:
    """Each `from … import` of `path` with the module it names (relative ones resolved
    from `here`, the package the file is in)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = here[: len(here) - (node.level - 1)]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            found.append((node, base))
    return found


def _store_names(known: dict[str, tuple[Path, bool]]) -> dict[str, set[str]]:
    """For each module outside store/: the names it binds by importing them from store/,
    directly or through another module that re-exports them."""
    imported: dict[str, dict[str, tuple[str, str]]] = {}  # module → name → (module, name)
    for name, (path, is_package) in known.items():
        here = name.split(".") if is_package else name.split(".")[:-1]
        bound: dict[str, tuple[str, str]] = {}
        for node, base in _imports_from(path, here):
            for alias in node.names:
                bound[alias.asname or alias.name] = (base, alias.name)
        imported[name] = bound

    def from_store(module: str, binding: str, seen: frozenset[str] = frozenset()) -> bool:
        if top(module) == "store" and module.startswith(PACKAGE + "."):
            return True
        if module in seen or module not in imported:
            return False
        source = imported[module].get(binding)
        return source is not None and from_store(*source, seen | {module})

    return {
        module: {b for b, source in bound.items() if from_store(*source)}
        for module, bound in imported.items()
        if top(module) != "store"
    }


def store_names_used(known: dict[str, tuple[Path, bool]]) -> list[str]:
    """'file: name (from module)' for each store name server/ imports through another module."""
    names = _store_names(known)
    found = []
    for name, (path, is_package) in known.items():
        if top(name) != "server":
            continue
        here = name.split(".") if is_package else name.split(".")[:-1]
        for node, base in _imports_from(path, here):
            for alias in node.names:
                if alias.name in names.get(base, set()):
                    where = path.relative_to(ROOT.parent) if path.is_relative_to(ROOT) else path
                    found.append(f"  {where}:{node.lineno}: {alias.name} (from {base})")
    return found


def test_the_server_uses_no_store_type_through_a_reexport() -> None:
    """A store type re-exported by hive.py (or a service) is still the store's: server/ does
    not use it (request state lives in model/errand.py, key bookkeeping with a service)."""
    found = store_names_used(modules())
    assert not found, "server/ uses names of store/ through a re-export:\n" + "\n".join(found)


def test_the_reexport_check_sees_one(tmp_path: Path) -> None:
    files = {
        f"{PACKAGE}.store.errand": "class Errand:\n    pass\n",
        f"{PACKAGE}.model": "class Identity:\n    pass\n",
        f"{PACKAGE}.hive": "from .store.errand import Errand as Task\nfrom .model import Identity\n",
        f"{PACKAGE}.jobs.service": "from ..hive import Task\n",
        f"{PACKAGE}.server.api.base": (
            "from ...hive import Identity, Task\nfrom ...jobs.service import Task as T\n"
        ),
    }
    known = {}
    for name, text in files.items():
        path = tmp_path / f"{name.replace('.', '_')}.py"
        path.write_text(text)
        known[name] = (path, name == f"{PACKAGE}.model")
    base = tmp_path / f"{PACKAGE}_server_api_base.py"
    assert store_names_used(known) == [
        f"  {base}:1: Task (from {PACKAGE}.hive)",
        f"  {base}:2: Task (from {PACKAGE}.jobs.service)",
    ]
