"""The threat model's trust-boundary table names tests that exist, and each of them plays the
hostile user for real: a row without its hostile test is a boundary nobody holds, and a test
that only edits text proves nothing about what a real user's process or file can do (#41).

"Plays a user" is read statically: the test function, a fixture it takes (from its file or a
conftest.py above it, or re-exported by one), or a function it calls (in its file or a tests/
module it imports, `module.function` too), directly or through each other, starts a process
or makes a file as a second UNIX user (`PLAYERS`: ensure_user, hostile_process,
start_gpu_process, runuser, ...); the test bed's own accounts (`NOT_A_USER`: PostgreSQL's)
are no hostile user. A test about something no user can be (`EXEMPT`) says why there, and an
exemption that no longer applies fails the check."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path
from typing import cast

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "explanation" / "threat-model.md"
REF = re.compile(r"`((?:tests/[\w/]+\.py|…)(?:::\w+)?)")
# Calls (by name) and words that make a process or a file belong to another UNIX user.
PLAYERS = frozenset(
    {"ensure_user", "hostile_process", "start_gpu_process", "add_user", "start_process",
     "runuser", "setpriv", "setuid", "setresuid", "chown", "demote"}
)  # fmt: skip
# Modules whose accounts are the test bed's own, not a hostile user: not followed.
NOT_A_USER = frozenset(
    {"tests/support/postgres.py"}  # the database server runs as its `postgres` account
)
# Rows whose test no real user can make more real, and why.
EXEMPT: dict[str, str] = {
    "tests/api/test_api_hostile_input.py": "request bodies: the hostile user is an HTTP client",
    "tests/integrations/test_webhook_address_forms.py": "a URL a user types; no process of hers",
    "tests/integrations/test_outbound_privacy.py::"
    "test_site_webhooks_and_feeds_leave_private_descriptions_out": "what leaves the service",
    "tests/hub/test_team_public.py::test_a_feed_made_through_a_users_server_has_the_hubs_public_url": "a header the caller sends",
    "tests/hub/test_team.py::test_bobs_forged_server_config_gives_him_nothing": "the hostile "
    "party is a Hub user (her token, her server's config), not a UNIX account",
    "tests/hub/test_team.py::test_bobs_own_client_mode_server_cannot_claim_alice": "a Hub user's "
    "token and the identity her own server claims",
    "tests/kernels/test_provisioner_config.py::test_a_bad_provisioner_config_is_a_json_422": "a kernelspec's values through the REST API",
    "tests/hosts/test_probe.py::test_hostile_nvidia_smi_output_never_runs_as_code": "the hostile "
    "party is the host's nvidia-smi (its PATH), not a user's process",
    "tests/jobs/test_jobs_containers.py::test_hostile_values_stay_single_words_in_bash": "the "
    "owner's request values quoted into bash",
    "tests/jobs/test_jobs_containers.py::test_a_bad_containers_entry_is_refused_with_the_"
    "configuration": "the site's own configuration",
    "tests/jobs/test_jobs_containers.py::test_env_file_is_verbatim_and_refuses_line_breaks": "the "
    "owner's request values written to her own env file",
}


def boundary_rows() -> list[str]:
    """The rows of the table under '## Trust boundaries' (header and rule left out)."""
    section = PAGE.read_text(encoding="utf-8").split("## Trust boundaries", 1)[1]
    section = section.split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    return rows[2:]


def names_in(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.name.startswith("test_")
    }


def references(rows: list[str]) -> list[tuple[str, str | None]]:
    """(file, test or None) for each test the rows name; '…::name' means the file named last."""
    found: list[tuple[str, str | None]] = []
    last: str | None = None
    for row in rows:
        cell = row.rstrip(" |").rsplit(" | ", 1)[-1]
        refs = REF.findall(cell)
        assert refs, f"a trust boundary without a test: {row[:80]}"
        for ref in refs:
            file, _, name = ref.partition("::")
            if file == "…":
                assert last, f"'…' with no file named before it: {row[:80]}"
                file = last
            last = file
            found.append((file, name or None))
    return found


def test_every_boundary_names_a_test_that_exists() -> None:
    rows = boundary_rows()
    assert len(rows) >= 15
    for file, name in references(rows):
        path = ROOT / file
        assert path.is_file(), f"the threat model names a missing test file: {file}"
        if name:
            assert name in names_in(path), f"the threat model names a missing test: {file}::{name}"


def test_the_check_sees_a_row_without_a_test_and_a_missing_test() -> None:
    good = "| a | b | c | `tests/test_threat_model.py::names_in` |"
    assert references([good]) == [("tests/test_threat_model.py", "names_in")]
    missing = "| a | b | c | `tests/test_threat_model.py::test_nothing_like_it` |"
    ((file, name),) = references([missing])
    assert name not in names_in(ROOT / file)
    try:
        references(["| a | b | c | nothing |"])
    except AssertionError:
        pass
    else:
        raise AssertionError("a row without a test passed")


# --- does the named test play a second user? ----------------------------------------------


@functools.cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


@functools.cache
def _functions(path: Path) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    """Every function of a module by name (methods too: tests call their rigs' methods)."""
    return {
        node.name: node
        for node in ast.walk(_tree(path))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }


@functools.cache
def _imported(path: Path) -> dict[str, tuple[Path, str]]:
    """Names a module takes from other tests/ modules: each with its file and its name there
    ('' for a module itself: `from tests.jobs import test_jobs_queue`), and module-level
    aliases of a module's function (`bed = test_jobs_queue.bed`)."""
    found: dict[str, tuple[Path, str]] = {}
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "tests":
            folder = ROOT / str(node.module).replace(".", "/")
            for alias in node.names:
                name = alias.asname or alias.name
                if (folder / f"{alias.name}.py").is_file():
                    found[name] = (folder / f"{alias.name}.py", "")
                elif folder.with_suffix(".py").is_file():
                    found[name] = (folder.with_suffix(".py"), alias.name)
    for node in _tree(path).body:
        if (
            isinstance(node, ast.Assign)
            and [type(t) for t in node.targets] == [ast.Name]
            and isinstance(node.value, ast.Attribute)
            and isinstance(node.value.value, ast.Name)
            and found.get(node.value.value.id, (path, "x"))[1] == ""
        ):
            module = found[node.value.value.id][0]
            found[cast(ast.Name, node.targets[0]).id] = (module, node.value.attr)
    return found


def _lookup(path: Path, name: str) -> tuple[Path, ast.FunctionDef | ast.AsyncFunctionDef] | None:
    """The function `name` means in `path`: its own, or the one it imports or aliases."""
    for _ in range(8):  # re-exports chain through a few modules at most
        if path.relative_to(ROOT).as_posix() in NOT_A_USER:
            return None
        found = _functions(path).get(name)
        if found is not None:
            return path, found
        path, name = _imported(path).get(name, (path, ""))
        if not name:
            return None
    return None


def _fixture_files(path: Path) -> list[Path]:
    """The test file, then the conftest.py files from its folder up to tests/."""
    files = [path]
    folder = path.parent
    while folder.is_relative_to(ROOT / "tests"):
        if (folder / "conftest.py").is_file():
            files.append(folder / "conftest.py")
        folder = folder.parent
    return files


def _words(node: ast.AST) -> set[str]:
    """The names a function calls or mentions (and its string constants' first word, a
    program's path as its name: '/usr/sbin/runuser' is runuser)."""
    words: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            words.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            words.add(sub.attr)
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str) and sub.value:
            words.add(Path(sub.value.split()[0]).name if sub.value.split() else sub.value)
    return words


def plays_a_user(path: Path, name: str | None) -> bool:
    """Whether test `name` of `path` (the whole file when None) starts a process or makes a
    file as a second UNIX user, itself or through its fixtures and helpers."""
    if name is None:
        return any(plays_a_user(path, test) for test in names_in(path))
    fixtures = _fixture_files(path)  # where a parameter's fixture is looked up
    todo: list[tuple[list[Path], str]] = [([path], name)]
    seen: set[tuple[Path, str]] = set()
    while todo:
        files, function = todo.pop()
        hit = next(filter(None, (_lookup(file, function) for file in files)), None)
        if hit is None or (hit[0], function) in seen:
            continue
        file, found = hit
        seen.add((file, function))
        words = _words(found)
        if words & PLAYERS:
            return True
        imports = _imported(file)
        modules = {n: f for n, (f, there) in imports.items() if not there}
        arguments = (*found.args.posonlyargs, *found.args.args, *found.args.kwonlyargs)
        todo += [(fixtures, a.arg) for a in arguments]
        todo += [([file], w) for w in words if w not in modules]
        todo += [  # `kernel_python._has(...)`: a function of an imported tests/ module
            ([modules[sub.value.id]], sub.attr)
            for sub in ast.walk(found)
            if isinstance(sub, ast.Attribute)
            and isinstance(sub.value, ast.Name)
            and sub.value.id in modules
        ]
    return False


def test_every_boundary_test_plays_a_second_user() -> None:
    silent = [
        f"{file}::{name}" if name else file
        for file, name in references(boundary_rows())
        if (f"{file}::{name}" if name else file) not in EXEMPT
        and not plays_a_user(ROOT / file, name)
    ]
    assert not silent, (
        "these trust-boundary tests start no process and write no file as a second user "
        f"(play the user for real, or add a reasoned EXEMPT entry): {silent}"
    )


def test_every_exemption_is_a_rows_test_that_plays_no_user() -> None:
    named = {f"{file}::{name}" if name else file for file, name in references(boundary_rows())}
    stale = [key for key in EXEMPT if key not in named]
    assert not stale, f"EXEMPT names tests that no trust-boundary row names: {stale}"
    playing = [key for key in EXEMPT if plays_a_user(ROOT / key.split("::")[0],
                                                     key.partition("::")[2] or None)]  # fmt: skip
    assert not playing, f"these EXEMPT tests do play a user: drop their entries: {playing}"


SAMPLE_RIG = """\
import pytest
from jupyter_gpuhive.sim.users import ensure_user
@pytest.fixture
def mallory():
    return ensure_user('mallory')
def player():
    return ensure_user('trudy')
def plain():
    return 'gh-eve'
"""
SAMPLE = """\
import pytest
from jupyter_gpuhive.sim.users import ensure_user
from tests.{pkg} import rig
bed = rig.mallory
@pytest.fixture
def eve():
    return ensure_user('eve')
def helper():
    return ensure_user('mallory')
def test_strings():
    assert 'docker' in '/docker/x'
def test_names_only():
    assert rig.plain() != 'gh-mallory'
def test_database_only(postgres):
    assert postgres
def test_fixture(eve):
    assert eve
def test_helper():
    assert helper()
def test_module_function():
    assert rig.player()
def test_aliased_fixture(bed):
    assert bed
def test_fixture_a_conftest_reexports(mallory):
    assert mallory
def test_program_by_path():
    assert ['/usr/sbin/runuser', '-u', 'eve']
"""


def test_the_check_tells_a_test_that_plays_a_user_from_one_that_edits_text(
    tmp_path: Path,
) -> None:
    folder = ROOT / "tests" / f"_threat_check_{tmp_path.name}"
    folder.mkdir()
    try:
        (folder / "rig.py").write_text(SAMPLE_RIG, encoding="utf-8")
        (folder / "conftest.py").write_text(
            f"from tests.{folder.name}.rig import mallory\n", encoding="utf-8"
        )
        sample = folder / "test_sample.py"
        sample.write_text(SAMPLE.format(pkg=folder.name), encoding="utf-8")
        for silent in ("test_strings", "test_names_only", "test_database_only"):
            assert not plays_a_user(sample, silent), silent
        for playing in ("test_fixture", "test_helper", "test_module_function",
                        "test_aliased_fixture", "test_fixture_a_conftest_reexports",
                        "test_program_by_path"):  # fmt: skip
            assert plays_a_user(sample, playing), playing
    finally:
        for path in folder.iterdir():
            path.unlink()
        folder.rmdir()
