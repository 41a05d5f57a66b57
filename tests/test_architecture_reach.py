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


# --- request state: handed along the request path, never read from the context ------------


def context_variables(known: dict[str, tuple[Path, bool]]) -> set[tuple[str, str]]:
    """(module, name) of each module-level ContextVar of the package, and of each module-level
    function of that module that reads one (`current`: ERRAND.get())."""
    found: set[tuple[str, str]] = set()
    for name, (path, _) in known.items():
        tree = ast.parse(path.read_text(), str(path))
        variables = set()
        for node in tree.body:
            value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
            if isinstance(value, ast.Call) and _chain(value.func)[-1:] == ["ContextVar"]:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                variables |= {t.id for t in targets if isinstance(t, ast.Name)}
        readers = {
            node.name
            for node in tree.body
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and any(isinstance(n, ast.Name) and n.id in variables for n in ast.walk(node))
        }
        found |= {(name, v) for v in variables | readers}
    return found


def context_reads(known: dict[str, tuple[Path, bool]]) -> list[str]:
    """'file:line: what' for each way a module of store/ could read a ContextVar: importing
    contextvars, or a ContextVar (or a function reading one) of another module."""
    variables = context_variables(known)
    found = []
    for name, (path, is_package) in known.items():
        if top(name) != "store":
            continue
        where = path.relative_to(ROOT.parent) if path.is_relative_to(ROOT) else path
        here = name.split(".") if is_package else name.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found += [
                    f"  {where}:{node.lineno}: import {a.name}"
                    for a in node.names
                    if a.name == "contextvars"
                ]
        for node, base in _imports_from(path, here):
            for alias in node.names:
                if base == "contextvars" or (base, alias.name) in variables:
                    found.append(f"  {where}:{node.lineno}: {alias.name} (from {base})")
    return sorted(found)


def test_the_store_reads_no_request_state_from_the_context() -> None:
    """A write runs a request's errand (its key, the Hub's confirmation, its client's
    patience) only where the request path hands it one: store/ reads no ContextVar."""
    known = modules()
    assert (f"{PACKAGE}.model.errand", "ERRAND") in context_variables(known)
    found = context_reads(known)
    assert not found, "store/ reads request state from the context:\n" + "\n".join(found)


def test_the_context_check_sees_a_variable_a_reader_and_the_module(tmp_path: Path) -> None:
    files = {
        f"{PACKAGE}.model.errand": (
            "from contextvars import ContextVar\n"
            "ERRAND: ContextVar[int | None] = ContextVar('e', default=None)\n"
            "class Errand:\n    pass\n"
            "def current():\n    return ERRAND.get()\n"
            "def plain():\n    return 1\n"
        ),
        f"{PACKAGE}.store.database": (
            "from ..model.errand import Errand, plain\nfrom ..model.errand import current as mine\n"
        ),
        f"{PACKAGE}.store.jobs": "import contextvars\nfrom ..model import errand\n",
        f"{PACKAGE}.store.rules": "from ..model.errand import ERRAND\n",
        f"{PACKAGE}.jobs.service": "from ..model.errand import ERRAND\n",
    }
    known = {}
    for name, text in files.items():
        path = tmp_path / f"{name.replace('.', '_')}.py"
        path.write_text(text)
        known[name] = (path, False)
    errand = f"{PACKAGE}.model.errand"
    assert context_variables(known) == {(errand, "ERRAND"), (errand, "current")}
    assert context_reads(known) == [
        f"  {tmp_path}/{PACKAGE}_store_database.py:2: current (from {errand})",
        f"  {tmp_path}/{PACKAGE}_store_jobs.py:1: import contextvars",
        f"  {tmp_path}/{PACKAGE}_store_rules.py:1: ERRAND (from {errand})",
    ]


def _declared(function: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.Call | None:
    """The @operation(...) a handler method declares, if any."""
    for decorator in function.decorator_list:
        if isinstance(decorator, ast.Call) and _chain(decorator.func)[-1:] == ["operation"]:
            return decorator
    return None


def _keyed(declared: ast.Call) -> bool:
    """Whether an @operation takes an Idempotency-Key (operations.Operation.keyed)."""
    words = {k.arg: k.value for k in declared.keywords}
    status = words.get("status", declared.args[1] if len(declared.args) > 1 else None)
    idempotent = words.get("idempotent")
    if isinstance(idempotent, ast.Constant) and idempotent.value is not None:
        return bool(idempotent.value)
    return isinstance(status, ast.Constant) and status.value == 201


def errands_not_handed(known: dict[str, tuple[Path, bool]]) -> list[str]:
    """'file:line: Class.method' for each handler method of server/ that takes an
    Idempotency-Key, or writes on the Hub's last answer (`confirms_identity_late`), and does
    not hand its request's errand (`self.errand`) on: its key would never be taken (a retry
    makes a twin), or its write would commit before the Hub confirmed."""
    found = []
    for name, (path, _) in known.items():
        if top(name) != "server":
            continue
        where = path.relative_to(ROOT.parent) if path.is_relative_to(ROOT) else path
        for cls in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(cls, ast.ClassDef):
                continue
            late = any(
                isinstance(n, ast.Assign)
                and any(
                    isinstance(t, ast.Name) and t.id == "confirms_identity_late" for t in n.targets
                )
                and isinstance(n.value, ast.Constant)
                and n.value.value is True
                for n in cls.body
            )
            for function in cls.body:
                if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                declared = _declared(function)
                if declared is None:
                    continue
                writes = late and function.name not in ("get", "head")
                if not (_keyed(declared) or writes):
                    continue
                handed = any(
                    isinstance(n, ast.Attribute) and _chain(n) == ["self", "errand"]
                    for n in ast.walk(function)
                )
                if not handed:
                    found.append(f"  {where}:{function.lineno}: {cls.name}.{function.name}")
    return found


def test_keyed_and_late_confirmed_operations_hand_on_their_errand() -> None:
    found = errands_not_handed(modules())
    assert not found, (
        "these operations do not hand their request's errand to their write (pass "
        "self.errand to the service, the service to the store):\n" + "\n".join(found)
    )


def test_the_errand_check_sees_a_keyed_and_a_late_write(tmp_path: Path) -> None:
    handlers = tmp_path / "h.py"
    handlers.write_text(
        "class Made:\n"
        "    @operation('make', 201)\n"
        "    async def post(self):\n"
        "        await self.hive.things.make(self.who)\n"
        "    @operation('make, secret', 201, idempotent=False)\n"
        "    async def put(self):\n"
        "        await self.hive.things.make(self.who)\n"
        "class Late:\n"
        "    confirms_identity_late = True\n"
        "    @operation('read')\n"
        "    async def get(self):\n"
        "        return 1\n"
        "    @operation('edit')\n"
        "    async def patch(self):\n"
        "        await self.hive.things.edit(self.who)\n"
        "    @operation('drop', status=200)\n"
        "    async def delete(self):\n"
        "        await self.hive.things.drop(self.who, self.errand)\n"
        "class Keyed:\n"
        "    @operation('keep', idempotent=True)\n"
        "    async def post(self):\n"
        "        await self.hive.things.keep(self.who, errand=self.errand)\n"
    )
    known = {f"{PACKAGE}.server.api.h": (handlers, False)}
    assert errands_not_handed(known) == [
        f"  {handlers}:3: Made.post",
        f"  {handlers}:14: Late.patch",
    ]
