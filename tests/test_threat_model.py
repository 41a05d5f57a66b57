"""The threat model's trust-boundary table names tests that exist, and each of them plays the
hostile user for real: a row without its hostile test is a boundary nobody holds, and a test
that only edits text proves nothing about what a real user's process or file can do (#41).

"Plays a user" is read statically: the test function, a fixture it takes (from its file or a
conftest.py above it), or a function it calls (in its file or a tests/ module it imports),
directly or through each other, starts a process or makes a file as a second UNIX user
(`PLAYERS`: ensure_user, hostile_process, start_gpu_process, runuser, ...). A test that is
about something no user can be (`EXEMPT`) says why there."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "explanation" / "threat-model.md"
REF = re.compile(r"`((?:tests/[\w/]+\.py|…)(?:::\w+)?)")
# Calls (by name) and words that make a process or a file belong to another UNIX user.
PLAYERS = frozenset(
    {"ensure_user", "hostile_process", "start_gpu_process", "add_user", "start_process",
     "runuser", "setuid", "setresuid", "chown", "demote"}
)  # fmt: skip
# Rows whose test no real user can make more real, and why.
EXEMPT: dict[str, str] = {
    "tests/api/test_api_hostile_input.py": "request bodies: the hostile user is an HTTP client",
    "tests/integrations/test_webhook_address_forms.py": "a URL a user types; no process of hers",
    "tests/integrations/test_outbound_privacy.py::"
    "test_site_webhooks_and_feeds_leave_private_descriptions_out": "what leaves the service",
    "tests/hub/test_team_public.py::test_a_feed_made_through_a_users_server_has_the_hubs_public_url": "a header the caller sends",
    "tests/kernels/test_provisioner_config.py::test_a_bad_provisioner_config_is_a_json_422": "a kernelspec's values through the REST API",
    "tests/api/test_container_jobs_api.py::test_images_mounts_and_engine_flags_are_refused": "a request body",
    "tests/hosts/test_probe.py::test_hostile_nvidia_smi_output_never_runs_as_code": "the hostile "
    "party is the host's nvidia-smi (its PATH), not a user's process",
    "tests/jobs/test_jobs_containers.py::test_hostile_values_stay_single_words_in_bash": "the "
    "owner's request values quoted into bash",
    "tests/jobs/test_jobs_containers.py::test_a_bad_containers_entry_is_refused_with_the_"
    "configuration": "the site's own configuration",
    "tests/jobs/test_jobs_containers.py::test_env_file_is_verbatim_and_refuses_line_breaks": "the "
    "owner's request values written to her own env file",
}
# Rows whose test should play a real user and does not yet (or does in a way this static check
# cannot see): each a known gap, listed here so it is not forgotten (#41).
NOT_YET: dict[str, str] = {
    "tests/hosts/test_probe_names.py::test_unescaped_names_in_nvidia_smi_xml_neither_blind_nor_"
    "move_a_process": "parser level; tests/support/hostile.py can run it as a real process",
    "tests/containers/test_protection.py::test_forged_container_on_a_reserved_gpu_is_a_violation_"
    "and_is_removed": "a container engine stand-in run by root",
    "tests/containers/test_protection.py::test_the_site_may_trust_a_label_for_containers_it_did_"
    "not_start": "a container engine stand-in run by root",
    "tests/jobs/test_preemption.py::test_a_job_that_ignores_its_signal_is_killed_after_the_grace": "its job's account is made where this check does not look",
    "tests/test_kernel_python.py::test_a_package_of_the_callers_path_is_not_found_in_another_"
    "interpreter": "probes as nobody through tests/support/kernel_python.py (an attribute call)",
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


def _functions(path: Path) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    """Every function of a module by name (methods too: tests call their rigs' methods)."""
    return {
        node.name: node
        for node in ast.walk(_tree(path))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }


def _imported(path: Path) -> dict[str, Path]:
    """Names a test module imports from other tests/ modules, with their files."""
    found: dict[str, Path] = {}
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tests."):
            module = ROOT / (str(node.module).replace(".", "/") + ".py")
            if module.is_file():
                found.update({alias.asname or alias.name: module for alias in node.names})
    return found


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
    """The names a function calls or mentions (and its string constants' first word)."""
    words: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            words.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            words.add(sub.attr)
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str) and sub.value:
            words.add(sub.value.split()[0] if sub.value.split() else sub.value)
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
        for file in files:
            found = _functions(file).get(function)
            if found is not None:
                break
        if found is None or (file, function) in seen:
            continue
        seen.add((file, function))
        words = _words(found)
        if words & PLAYERS:
            return True
        imports = _imported(file)
        arguments = (*found.args.posonlyargs, *found.args.args, *found.args.kwonlyargs)
        todo += [(fixtures, a.arg) for a in arguments]
        todo += [([imports[w]] if w in imports else [file], w) for w in words]
    return False


def test_every_boundary_test_plays_a_second_user() -> None:
    silent = [
        f"{file}::{name}" if name else file
        for file, name in references(boundary_rows())
        if (f"{file}::{name}" if name else file) not in {**EXEMPT, **NOT_YET}
        and not plays_a_user(ROOT / file, name)
    ]
    assert not silent, (
        "these trust-boundary tests start no process and write no file as a second user "
        f"(play the user for real, or add a reasoned EXEMPT entry): {silent}"
    )


def test_the_check_tells_a_test_that_plays_a_user_from_one_that_edits_text(
    tmp_path: Path,
) -> None:
    folder = ROOT / "tests" / f"_threat_check_{tmp_path.name}"
    folder.mkdir()
    try:
        sample = folder / "test_sample.py"
        sample.write_text(
            "import pytest\n"
            "from jupyter_gpuhive.sim.users import ensure_user\n"
            "@pytest.fixture\n"
            "def eve():\n    return ensure_user('eve')\n"
            "def helper():\n    return ensure_user('mallory')\n"
            "def test_strings():\n    assert 'docker' in '/docker/x'\n"
            "def test_fixture(eve):\n    assert eve\n"
            "def test_helper():\n    assert helper()\n",
            encoding="utf-8",
        )
        assert not plays_a_user(sample, "test_strings")
        assert plays_a_user(sample, "test_fixture") and plays_a_user(sample, "test_helper")
    finally:
        for path in folder.iterdir():
            path.unlink()
        folder.rmdir()
