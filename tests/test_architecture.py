"""The import graph of jupyter_gpuhive: no cycles among its modules, imports only downwards.

The graph is built with `ast` from every module of the package: imports at module level,
in functions and under TYPE_CHECKING alike, relative ones resolved. An edge counts where a
module names another directly; a package's `__init__` is a module of its own.

The layers, bottom to top (a package may import only what LAYERS lists for it; from monitor
up to cli each may also import model and errors):

    errors, _version                      nothing
    files                                 errors (writing only where nobody else can)
    model                                 errors (pure values shared by store and domain)
    sim                                   nothing (copied onto simulated hosts as it is)
    store, hosts                          model, errors, files
    privacy                               model
    monitor                               hosts, store
    bookings                              store, privacy
    jobs                                  bookings, monitor, hosts, store, privacy
    integrations                          jobs, store, privacy
    protection                            integrations, monitor, hosts, store, privacy
    kernels                               bookings, jobs, protection, hosts, store
    hive_settings                         every service above (their settings, for the Hive)
    hive                                  every service above (the composition root)
    server                                hive and the services but store (never notebook, widgets)
    notebook                              model, hosts.guidance (the kernel side)
    widgets                               notebook, model, hosts.guidance
    cli                                   server, hive, the services, sim
    jupyter_gpuhive, auth, hub, client    the published entry points and re-exports
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

import jupyter_gpuhive

PACKAGE = "jupyter_gpuhive"
ROOT = Path(jupyter_gpuhive.__file__).resolve().parent

# What each top-level package (or module) may import besides itself; an entry names a
# package, or one module of it ("hosts.guidance"). The module docstring draws the layers.
SERVICES = {
    "bookings", "jobs", "monitor", "protection", "integrations", "hosts", "store", "kernels",
}  # fmt: skip
LAYERS: dict[str, set[str]] = {
    "_version": set(),
    "libwarnings": set(),
    "errors": set(),
    "files": {"errors"},
    "model": {"errors"},
    "sim": set(),
    "store": {"errors", "model", "files"},
    "hosts": {"errors", "model", "files"},
    "privacy": {"model"},
    "monitor": {"errors", "model", "hosts", "store"},
    "bookings": {"errors", "model", "privacy", "store"},
    "jobs": {"errors", "model", "privacy", "store", "hosts", "monitor", "bookings"},
    "integrations": {"errors", "model", "privacy", "store", "jobs"},
    "protection": {"errors", "model", "privacy", "store", "hosts", "monitor", "integrations"},
    "kernels": {"errors", "model", "store", "hosts", "bookings", "jobs", "protection"},
    "hive": {"errors", "model", "privacy", "hive_settings", *SERVICES},
    "hive_settings": {"model", "privacy", *SERVICES},
    # the server reaches the store only through the services (it names no table, no row)
    "server": {"_version", "errors", "files", "model", "privacy", "hive", *(SERVICES - {"store"})},
    "notebook": {"model", "hosts.guidance"},
    "widgets": {"model", "notebook", "hosts.guidance"},
    "cli": {"_version", "errors", "files", "model", "hive", "server", "sim", *SERVICES},
    PACKAGE: {"_version", "libwarnings", "notebook", "server"},
    "auth": {"server"},
    "hub": {"server"},
    "client": {"notebook"},
}


@dataclass(frozen=True)
class Import:
    """One import of one module by another, where it is written."""

    source: str
    target: str
    path: Path
    line: int

    def __str__(self) -> str:
        where = self.path.relative_to(ROOT.parent) if self.path.is_relative_to(ROOT) else self.path
        return f"{where}:{self.line}: {self.source} imports {self.target}"


def modules() -> dict[str, tuple[Path, bool]]:
    """Every module of the package by dotted name: (file, whether it is a package)."""
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = [PACKAGE, *path.relative_to(ROOT).with_suffix("").parts]
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        found[".".join(parts)] = (path, is_package)
    return found


def imports(known: dict[str, tuple[Path, bool]]) -> list[Import]:
    """Every import of a module of the package by another one."""
    edges = []
    for name, (path, is_package) in known.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    here = name.split(".") if is_package else name.split(".")[:-1]
                    here = here[: len(here) - (node.level - 1)]
                    base = ".".join([*here, *([node.module] if node.module else [])])
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                    for alias in node.names
                ]
            for target in targets:
                while target and target not in known:  # `import a.b.c` of a non-module
                    target = target.rpartition(".")[0]
                if target and target != name:
                    edges.append(Import(name, target, path, node.lineno))
    return list(dict.fromkeys(edges))  # one per module named on a line


def top(module: str) -> str:
    """The top-level package (or module) a module belongs to."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def allowed(source: str, target: str) -> bool:
    """Whether LAYERS lets `source` import `target` (within one package: always)."""
    if top(source) == top(target):
        return True
    inner = target.removeprefix(PACKAGE + ".")
    return any(inner == entry or inner.startswith(entry + ".") for entry in LAYERS[top(source)])


def cycles(edges: list[Import]) -> list[list[Import]]:
    """One cycle of imports through each strongly connected set of modules."""
    graph: dict[str, dict[str, Import]] = defaultdict(dict)
    for edge in edges:
        graph[edge.source].setdefault(edge.target, edge)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_loop(graph, component) for component in components]


def _loop(graph: dict[str, dict[str, Import]], component: list[str]) -> list[Import]:
    """A shortest path of imports from the component's first module back to itself."""
    start, members = component[0], set(component)
    paths: dict[str, list[Import]] = {start: []}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for nxt, edge in graph[node].items():
            if nxt == start:
                return [*paths[node], edge]
            if nxt in members and nxt not in paths:
                paths[nxt] = [*paths[node], edge]
                queue.append(nxt)
    raise AssertionError(f"no cycle through {component}")  # a component always has one


def test_no_import_cycles() -> None:
    found = cycles(imports(modules()))
    report = "\n\n".join("\n".join(f"  {edge}" for edge in loop) for loop in found)
    if found:
        pytest.fail(f"{len(found)} import cycle(s); break each at one of its imports:\n{report}")


def test_imports_follow_the_layers() -> None:
    known = modules()
    unknown = sorted({top(name) for name in known} - set(LAYERS))
    if unknown:
        pytest.fail(f"place these packages in LAYERS (tests/test_architecture.py): {unknown}")
    wrong = [str(edge) for edge in imports(known) if not allowed(edge.source, edge.target)]
    report = "\n".join(f"  {line}" for line in wrong)
    if wrong:
        pytest.fail(f"{len(wrong)} import(s) against the layers (see LAYERS):\n{report}")


def test_tables_are_defined_in_the_schema_only() -> None:
    """Every table is declared in store/schema/ (migrations aside); repositories only use them."""
    schema = (f"{PACKAGE}.store.schema", f"{PACKAGE}.store.migrations")
    found = []
    for name, (path, _) in modules().items():
        if name.startswith(schema):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and _called(node) in ("Table", "MetaData"):
                found.append(f"  {path.relative_to(ROOT.parent)}:{node.lineno}")
    if found:
        pytest.fail("tables belong in store/schema/, declared here:\n" + "\n".join(found))


def _called(call: ast.Call) -> str:
    """The name a call calls: `Table` for both `Table(...)` and `sa.Table(...)`."""
    func = call.func
    return func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")


def test_the_layers_themselves_have_no_cycle() -> None:
    """LAYERS is a layering: following its entries never leads back to where it started."""
    edges = [
        Import(f"{PACKAGE}.{name}", f"{PACKAGE}.{entry.partition('.')[0]}", ROOT, 0)
        for name, entries in LAYERS.items()
        if name != PACKAGE
        for entry in entries
    ]
    assert not cycles(edges)


def test_the_checks_see_a_back_edge_and_a_cycle(tmp_path: Path) -> None:
    """The graph sees function-level and relative imports, and names the file and line."""
    fake = {
        f"{PACKAGE}.store.a": tmp_path / "a.py",
        f"{PACKAGE}.jobs.b": tmp_path / "b.py",
    }
    fake[f"{PACKAGE}.store.a"].write_text("def f():\n    from ..jobs import b\n")
    fake[f"{PACKAGE}.jobs.b"].write_text("from ..store.a import f\n")
    edges = imports({name: (path, False) for name, path in fake.items()})
    assert [(e.source, e.target, e.line) for e in edges] == [
        (f"{PACKAGE}.store.a", f"{PACKAGE}.jobs.b", 2),
        (f"{PACKAGE}.jobs.b", f"{PACKAGE}.store.a", 1),
    ]
    assert not allowed(f"{PACKAGE}.store.a", f"{PACKAGE}.jobs.b")
    assert allowed(f"{PACKAGE}.jobs.b", f"{PACKAGE}.store.a")
    assert not allowed(f"{PACKAGE}.notebook.x", f"{PACKAGE}.hosts.pool")
    assert allowed(f"{PACKAGE}.notebook.x", f"{PACKAGE}.hosts.guidance")
    [loop] = cycles(edges)
    assert {(edge.path.name, edge.line) for edge in loop} == {("a.py", 2), ("b.py", 1)}


def _imported_top_levels(path: Path) -> set[str]:
    """The top-level names a Python file imports (absolute imports only)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


# The database libraries: only the store speaks SQL (the domain asks repositories, by name).
DATABASE_LIBRARIES = {"sqlalchemy", "alembic", "psycopg", "sqlite3"}


def database_imports(known: dict[str, tuple[Path, bool]]) -> list[str]:
    """`file: library` for each module outside store/ that imports a database library."""
    return [
        f"  {path.relative_to(ROOT.parent) if path.is_relative_to(ROOT) else path}: {library}"
        for name, (path, _) in known.items()
        if top(name) != "store"
        for library in sorted(_imported_top_levels(path) & DATABASE_LIBRARIES)
    ]


def test_only_the_store_speaks_sql() -> None:
    """No module outside store/ imports sqlalchemy (nor alembic, psycopg, sqlite3)."""
    found = database_imports(modules())
    if found:
        pytest.fail(
            "SQL belongs in store/ (a repository method); imported here:\n" + "\n".join(found)
        )


def test_the_sql_check_sees_an_import(tmp_path: Path) -> None:
    probe, fine = tmp_path / "probe.py", tmp_path / "fine.py"
    probe.write_text("def f():\n    from sqlalchemy import select\n")
    fine.write_text("from sqlalchemy import select\n")
    found = database_imports(
        {f"{PACKAGE}.jobs.probe": (probe, False), f"{PACKAGE}.store.fine": (fine, False)}
    )
    assert found == [f"  {probe}: sqlalchemy"]


TRANSACTIONS = {"read", "write", "writer", "begin", "connect"}


def transactions(path: Path) -> list[int]:
    """Lines of `path` that open a transaction on a store's database (`….db.read()`, …)."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Attribute)
        and node.attr in TRANSACTIONS
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "db"
    ]


def test_only_the_store_opens_transactions() -> None:
    """Domain code calls repository methods; it never opens a transaction or holds a connection."""
    found = [
        f"  {path.relative_to(ROOT.parent)}:{line}"
        for name, (path, _) in modules().items()
        if top(name) != "store"
        for line in transactions(path)
    ]
    if found:
        pytest.fail("transactions belong in store/ repositories; opened here:\n" + "\n".join(found))


def test_the_transaction_check_sees_one(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "def f(self):\n"
        "    with self.store.db.read() as conn:\n"
        "        pass\n"
        "    self.store.db.write(lambda conn: None)\n"
        "    self.store.limits.read()\n"
        "    print(self.store.db.dialect)\n"
    )
    assert sorted(transactions(probe)) == [2, 4]


def repository_classes() -> set[str]:
    """Classes of store/ built over a `Database` (the repositories `Store` holds), and those
    that inherit from one."""
    found, bases = set(), {}
    for name, (path, _) in modules().items():
        if top(name) != "store":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                bases[node.name] = {ast.unparse(b) for b in node.bases}
                init = next((f for f in node.body if isinstance(f, ast.FunctionDef)
                             and f.name == "__init__"), None)  # fmt: skip
                args = init.args.args if init else []
                if any(ast.unparse(a.annotation or ast.Constant("")) == "Database" for a in args):
                    found.add(node.name)
    while more := {c for c, b in bases.items() if c not in found and b & found}:
        found |= more
    return found


def repositories_built(path: Path, repositories: set[str]) -> list[int]:
    """Lines of `path` that build a repository imported from the store (under any alias)."""
    tree = ast.parse(path.read_text(), str(path))
    local = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and "store" in (node.module or "").split(".")
        for alias in node.names
        if alias.name in repositories
    }
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in local
    ]


def test_only_the_store_builds_repositories() -> None:
    """Repositories are built once, by `Store`; services take them from it."""
    repositories = repository_classes()
    assert {"Reservations", "LimitStore", "Integrations", "Digests"} <= repositories
    found = [
        f"  {path.relative_to(ROOT.parent)}:{line}"
        for name, (path, _) in modules().items()
        if top(name) != "store"
        for line in repositories_built(path, repositories)
    ]
    if found:
        pytest.fail(
            "build repositories in Store (store/__init__.py); built here:\n" + "\n".join(found)
        )


def test_the_repository_check_sees_one(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from ..store.integrations import Integrations as Rows\n"
        "from ..store import Store\n"
        "def f(db):\n"
        "    Store('sqlite://')\n"
        "    return Rows(db)\n"
    )
    assert repositories_built(probe, {"Integrations"}) == [5]


def test_the_server_does_not_reach_the_store() -> None:
    """server/ imports no module of store/: it asks the services (ID_MAX lives in model)."""
    assert not allowed(f"{PACKAGE}.server.api.base", f"{PACKAGE}.store.schema")
    assert not allowed(f"{PACKAGE}.server.app", f"{PACKAGE}.store")
    assert allowed(f"{PACKAGE}.server.api.base", f"{PACKAGE}.model")
    wrong = [
        str(edge)
        for edge in imports(modules())
        if top(edge.source) == "server" and top(edge.target) == "store"
    ]
    assert wrong == [], "server/ imports store/:\n" + "\n".join(wrong)


HIVE_MAX_LINES = 150


def package_summaries() -> dict[str, str]:
    """Each top-level package's docstring, its first line."""
    found = {}
    for path in sorted(ROOT.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(path.read_text(), str(path))) or ""
        found[path.parent.name] = doc.splitlines()[0] if doc else ""
    return found


def test_every_package_says_what_it_is_for() -> None:
    """A package's docstring opens with one sentence of what it is for, not its own name."""
    vague = {
        name: line
        for name, line in package_summaries().items()
        if len(line) < 40 or line.rstrip(".").lower() == name or len(line) > 100
    }
    assert vague == {}, f"say in one line (40-100 characters) what each is for: {vague}"


def test_the_composition_root_stays_plain() -> None:
    """hive.py builds, wires, starts and stops the services; what they do lives with them."""
    lines = len((ROOT / "hive.py").read_text().splitlines())
    assert lines <= HIVE_MAX_LINES, (
        f"hive.py has {lines} lines (at most {HIVE_MAX_LINES}): move wiring logic into the "
        "services or a small factory beside them (monitor/scrape.py, kernels.lifecycle.end_policy)"
    )


def test_tests_never_import_a_benchmark() -> None:
    """Fixtures that tests and benchmarks share live in tests/support; a test never depends on
    a benchmark (a benchmark's change must not break or silently weaken a test)."""
    tests = Path(__file__).resolve().parent
    offenders = sorted(
        str(path.relative_to(tests))
        for path in tests.rglob("*.py")
        if "benchmarks" in _imported_top_levels(path)
    )
    assert offenders == [], f"tests importing benchmarks/: {offenders}"


def test_the_benchmark_import_check_sees_one(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from benchmarks.queue_replay import main\n")
    assert "benchmarks" in _imported_top_levels(probe)


# One writer of reservation state: only bookings/ (the service whose events follow every
# change) and store/ itself reach the store's reservation-writing methods or its change record.
RESERVATION_WRITERS = {"create", "modify", "set_flags"}
ONE_WRITER = {"store", "bookings"}


def _is_store(node: ast.expr) -> bool:
    """`store` or `….store` (a Store, by the name every service gives it)."""
    return (isinstance(node, ast.Name) and node.id == "store") or (
        isinstance(node, ast.Attribute) and node.attr == "store"
    )


def reservation_writes(path: Path) -> list[int]:
    """Lines of `path` that call or pass `store.reservations.<writer>`, or import `Changes` or
    `Reservations` from the store."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and node.attr in RESERVATION_WRITERS:
            repo = node.value
            if (
                isinstance(repo, ast.Attribute)
                and repo.attr == "reservations"
                and _is_store(repo.value)
            ):
                lines.append(node.lineno)
        elif (
            isinstance(node, ast.ImportFrom)
            and "store" in (node.module or "").split(".")
            and any(alias.name in ("Changes", "Reservations") for alias in node.names)
        ):
            lines.append(node.lineno)
    return lines


def outside_the_writer(check: Callable[[Path], list[int]]) -> list[str]:
    """'  path:line' of each line `check` finds outside store/ and bookings/."""
    return [
        f"  {path.relative_to(ROOT.parent)}:{line}"
        for name, (path, _) in modules().items()
        if top(name) not in ONE_WRITER
        for line in check(path)
    ]


def test_only_bookings_writes_reservations() -> None:
    """Every change to a reservation goes through the bookings service (so its events follow)."""
    found = outside_the_writer(reservation_writes)
    if found:
        pytest.fail(
            "only bookings/ writes reservations (Bookings.update/cancel/end/reflag); "
            "the store's reservation writers are reached here:\n" + "\n".join(found)
        )


def test_the_writer_check_sees_a_call_a_reference_and_an_import(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from ..store import Changes\n"
        "async def f(self, store, rid):\n"
        "    await self._run(self.store.reservations.modify, rid, lambda old: None)\n"
        "    store.reservations.create('a', 't', '', 0, 1, [1])\n"
        "    self.store.reservations.set_flags({})\n"
        "    self.store.reservations.get(rid)\n"
        "    self.bookings.reservations.create(None, None)\n"
    )
    assert sorted(reservation_writes(probe)) == [1, 3, 4, 5]


def _imported_modules(path: Path) -> set[str]:
    """The dotted names a Python file imports absolutely (`from a.b import c`: a.b, a.b.c)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


# One way out for messages (issue #32): e-mail leaves through integrations/mail.py, a
# message's HTTP through the courier's Sender (integrations/delivery.py), over the one HTTP
# transport seam (integrations/transport.py) whose implementation is the server's
# (server/http_transport.py, handed to the Hive when it is wired). The other HTTP
# clients are not messages: client mode forwarding API calls to the team's service (the API's
# own transport, to a URL the admin set) and the kernel side's REST client.
OUTBOUND = {
    "smtp": ({"smtplib", "aiosmtplib"}, {"integrations.mail"}),
    "http": (
        {"tornado.httpclient", "tornado.simple_httpclient", "tornado.curl_httpclient",
         "urllib.request", "http.client", "httpx", "aiohttp", "requests", "urllib3", "pycurl"},
        {"server.http_transport", "server.api.proxy", "server.service_link", "notebook.client"},
    ),
}  # fmt: skip


def outbound_imports(known: dict[str, tuple[Path, bool]]) -> list[str]:
    """`file: library` for each module outside the seams that imports an SMTP or HTTP client."""
    found = []
    for name, (path, _) in known.items():
        inside = name.removeprefix(f"{PACKAGE}.")
        imported = _imported_modules(path)
        for kind, (libraries, seams) in OUTBOUND.items():
            if inside in seams:
                continue
            hits = {
                lib for lib in libraries for i in imported if i == lib or i.startswith(lib + ".")
            }
            shown = path.relative_to(ROOT.parent) if path.is_relative_to(ROOT) else path
            found += [f"  {shown}: {lib} ({kind})" for lib in sorted(hits)]
    return found


def test_only_the_seams_send_mail_and_http() -> None:
    """Only integrations/mail.py speaks SMTP; only the courier's Sender posts messages."""
    found = outbound_imports(modules())
    if found:
        pytest.fail(
            "Messages leave through one seam: e-mail through integrations/mail.py (send, "
            "deliver), HTTP through integrations/delivery.py (Sender) over the transport "
            "seam (integrations/transport.py, server/http_transport.py); imported here:\n"
            + "\n".join(found)
        )


def test_the_outbound_check_sees_smtp_and_http(tmp_path: Path) -> None:
    mailer, poster, fine = tmp_path / "m.py", tmp_path / "p.py", tmp_path / "fine.py"
    mailer.write_text("import smtplib\n")
    poster.write_text("def f():\n    from tornado.httpclient import AsyncHTTPClient\n")
    fine.write_text("import smtplib\nimport urllib.parse\n")
    found = outbound_imports(
        {
            f"{PACKAGE}.protection.handlers.m": (mailer, False),
            f"{PACKAGE}.protection.handlers.p": (poster, False),
            f"{PACKAGE}.integrations.mail": (fine, False),
        }
    )
    assert found == [f"  {mailer}: smtplib (smtp)", f"  {poster}: tornado.httpclient (http)"]


# --- one type per concept ------------------------------------------------------------------

# Names two classes may share, and why; every other class name is defined once. sim/ is left
# out (copied onto simulated hosts as it is, it imports nothing of the package), so are
# private classes (`_Name`, module-local) and Protocols (a layer's view of the class of the
# same name that it may not import).
SHARED_NAMES = {
    "GpuHiveApp": "the traitlets section c.GpuHiveApp: the CLI reads it as the server does",
    "Jobs": "store.jobs's repository and the jobs service, reached as store.jobs / hive.jobs",
    "Integrations": "store.integrations's repository and the service, likewise",
    "DigestSetting": "an OpenAPI body's name (public) and the stored setting",
    "ReservationList": "an OpenAPI reply's name (public) and the magics' rendering of it",
    "Window": "an OpenAPI query's name (public) and an access rule's time window",
    "HealthHandler": "two Tornado routes named for their path: the server's and the Hub's",
    "WebhookHandler": "the webhooks route and protection's 'webhook' violation handler",
    "Shown": "the API's privacy view and the widgets' display mixin: unrelated",
    "Held": "a held kernel token and a held reservation in the limits: unrelated",
    "Slot": "the finder's answer and the queue plan's kept room: unrelated",
}


def class_names(root: Path) -> dict[str, list[str]]:
    """Every public, non-Protocol class of the package by name: where each is defined."""
    found: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        if path.relative_to(root).parts[0] == "sim":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ClassDef) or node.name.startswith("_"):
                continue
            if any(ast.unparse(base).endswith("Protocol") for base in node.bases):
                continue
            found.setdefault(node.name, []).append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_no_two_classes_share_a_name() -> None:
    names = class_names(ROOT)
    shared = {name: where for name, where in names.items() if len(where) > 1}
    unexplained = {name: where for name, where in shared.items() if name not in SHARED_NAMES}
    assert not unexplained, f"one class per name (or say why in SHARED_NAMES): {unexplained}"
    stale = sorted(set(SHARED_NAMES) - set(shared))
    assert not stale, f"SHARED_NAMES lists names that are no longer shared: {stale}"


def test_the_class_name_check_sees_a_twin(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("class Booking:\n    pass\nclass _Own:\n    pass\n")
    (tmp_path / "b.py").write_text("class Booking:\n    pass\nclass _Own:\n    pass\n")
    (tmp_path / "c.py").write_text("from typing import Protocol\nclass A(Protocol):\n    pass\n")
    (tmp_path / "d.py").write_text("class A:\n    pass\n")
    assert {k: len(v) for k, v in class_names(tmp_path).items()} == {"Booking": 2, "A": 1}


# State strings: the values of the model's state enums. Outside model/ a state or status is
# compared with the enum's members, never with a string: a Compare with an operand that is an
# attribute or name called `state` or `status` (`job.status`, `status`, `gpu_health.c.state`)
# and another that is a string constant, or a tuple/list/set of them, holding one of these.
def state_strings() -> set[str]:
    """Every value of ReservationStatus, TaskState and KernelState."""
    from jupyter_gpuhive.model import ReservationStatus
    from jupyter_gpuhive.model.jobs import TaskState
    from jupyter_gpuhive.model.kernel import KernelState

    return {str(s) for enum in (ReservationStatus, TaskState, KernelState) for s in enum}


# (file, string) that are other states spelled alike: GPU health's 'failed' (model.health)
# and a webhook delivery's 'pending' (pending, delivered, failed: the store's own column).
STATE_STRING_EXCEPTIONS = {("protection/health.py", "failed"), ("store/webhooks.py", "pending")}


def _strings(node: ast.expr) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return set().union(*(_strings(element) for element in node.elts))
    return set()


def _is_state(node: ast.expr) -> bool:
    name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", None)
    return name in ("state", "status")


def state_string_compares(root: Path, states: set[str]) -> list[str]:
    """'file:line: value' for each state string compared with a state outside model/."""
    found = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if relative.parts[0] in ("model", "sim"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Compare):
                continue
            operands = [node.left, *node.comparators]
            if not any(_is_state(operand) for operand in operands):
                continue
            for value in sorted(set().union(*(_strings(o) for o in operands)) & states):
                if (relative.as_posix(), value) not in STATE_STRING_EXCEPTIONS:
                    found.append(f"{relative}:{node.lineno}: {value!r}")
    return found


def test_state_strings_are_compared_only_in_the_model() -> None:
    assert state_string_compares(ROOT, state_strings()) == []


def test_the_state_check_sees_a_string(tmp_path: Path) -> None:
    (tmp_path / "x.py").write_text(
        "if job.status == 'pending' or 'ended' != r.state or status in ('failed', 'x'):\n"
        "    pass\n"
        "if job.status == TaskState.PENDING or other == 'pending' or c.status == 'fail':\n"
        "    pass\n"
    )
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "y.py").write_text("if self.state == 'ended':\n    pass\n")
    assert sorted(state_string_compares(tmp_path, state_strings())) == [
        "x.py:1: 'ended'",
        "x.py:1: 'failed'",
        "x.py:1: 'pending'",
    ]


LENDING_WRITERS = {"set_lending", "choose_lending"}


def _names(node: ast.AST) -> set[str]:
    """The names a node reaches: an attribute's, a name's, an import's."""
    if isinstance(node, ast.Attribute):
        return {node.attr}
    if isinstance(node, ast.Name):
        return {node.id}
    if isinstance(node, ast.ImportFrom):
        return {alias.name for alias in node.names}
    return set()


def lending_writes(path: Path) -> list[int]:
    """Lines of `path` that reach a writer of a reservation's lending choice (a call, a
    reference or an import), or the bookings service's inner ReservationService (whose writes
    skip the events: `….bookings.reservations`)."""
    lines = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        inner = (
            isinstance(node, ast.Attribute)
            and node.attr == "reservations"
            and _names(node.value) == {"bookings"}
        )
        if inner or _names(node) & LENDING_WRITERS:
            lines.add(getattr(node, "lineno", 0))
    return sorted(lines)


def test_only_bookings_changes_a_reservations_lending() -> None:
    """A reservation's lending choice changes only through Bookings (create, update,
    stop_lending): with the reservation, in its transaction, and with its event."""
    found = outside_the_writer(lending_writes)
    if found:
        pytest.fail(
            "only bookings/ changes a reservation's lending (Bookings.stop_lending, "
            "Bookings.update) and books (Bookings.create); reached here:\n" + "\n".join(found)
        )


def test_the_lending_check_sees_a_write_an_import_and_the_inner_service(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from ..store.preemption import choose_lending\n"
        "async def f(self, rid):\n"
        "    await _db(self.store.preemption.set_lending, rid, False, None)\n"
        "    self.store.preemption.lending([rid])\n"
        "    hive.bookings.reservations.create(None, None)\n"
        "    await self.bookings.stop_lending(rid, 'alice', 'asked')\n"
    )
    assert lending_writes(probe) == [1, 3, 5]


UNIT_REF_MARKS = ("(?P<index>", "/mig(?P<")  # the regex of 'host:index/migGI.CI'
THRESHOLDS = {"idle_util", "util_below"}  # what a GPU's utilisation is compared with
# The Prometheus gauge of idle reservations reads utilisation alone (no processes there).
THRESHOLD_EXCEPTIONS = {"monitor/prometheus.py"}


def one_definition_breaches(root: Path) -> list[str]:
    """'path:line' where a unit-reference pattern is written outside model/core.py, or a
    utilisation is compared with the idle threshold outside model/activity.py."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            pattern = (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and any(mark in node.value for mark in UNIT_REF_MARKS)
                and rel != "model/core.py"
            )
            compared = (
                isinstance(node, ast.Compare)
                and {n for part in (node.left, *node.comparators) for n in _names(part)}
                & THRESHOLDS
                and rel not in ("model/activity.py", *THRESHOLD_EXCEPTIONS)
            )
            if pattern or compared:
                found.append(f"{rel}:{getattr(node, 'lineno', 0)}")
    return found


def test_unit_refs_and_busy_gpus_have_one_definition_each() -> None:
    """model.parse_ref reads every 'host:index/migGI.CI'; model.activity.gpu_busy says when a
    GPU is busy: usage, accounting and protection ask it (issue #42 item 6)."""
    found = one_definition_breaches(ROOT)
    assert found == [], (
        "a second unit-reference pattern or busy-GPU rule; use model.parse_ref or "
        f"model.activity.gpu_busy: {found}"
    )


def test_the_one_definition_check_sees_a_pattern_and_a_threshold(tmp_path: Path) -> None:
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "core.py").write_text('R = r"(?P<host>.+):(?P<index>\\d+)"\n')
    (tmp_path / "probe.py").write_text(
        'REF = r"(?P<host>.+):(?P<index>\\d+)(?:/mig(?P<gi>\\d+))?"\n'
        "def busy(util, idle_util):\n"
        "    return util >= idle_util\n"
        "def fine(self):\n"
        "    return self.util_below + 1\n"
    )
    assert one_definition_breaches(tmp_path) == ["probe.py:1", "probe.py:3"]
