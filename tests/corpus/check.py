"""`make test-corpus`: every vendor's parsers over every file of ../shared/smi-corpus.

Run: ``.venv/bin/python -m tests.corpus.check [CORPUS]``. A vendor registers its readers with
`reader(vendor, pattern, lacks)`: a glob over the corpus' relative paths and a function from
a file's text to a `Reading` (its GPUs, processes, failure state and a few facts). Each file
is read by the first reader whose pattern matches, and checked: nothing raises; every GPU has
its UUID, name and memory (but what its format does not print: `lacks`); every process has a
PID; and the reading matches the file's expectations, written by hand in
``tests/corpus/expected_<vendor>.json`` ({file name: {key: value}}; `compare` says the keys).
A file no reader takes, or without expectations, is a mismatch. Without the corpus (a user's
clone) it says so and passes.
"""

from __future__ import annotations

import fnmatch
import importlib
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CORPUS = (ROOT / ".." / "shared" / "smi-corpus").resolve()
HERE = Path(__file__).resolve().parent
META = frozenset({"INDEX.md", "SHA256SUMS", "manifest.jsonl"})  # about the corpus, not data
VENDOR_MODULES = ("tests.corpus.nvidia", "tests.corpus.amd")  # each registers its readers


@dataclass
class GpuSeen:
    """One GPU a file shows (None where the file does not print it)."""

    uuid: str | None
    name: str | None
    memory_mib: int | None


@dataclass
class Reading:
    """What a vendor's parsers read in one corpus file."""

    gpus: list[GpuSeen] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)
    state: str | None = None  # the host or GPU state a failure output maps to
    facts: dict[str, Any] = field(default_factory=dict)  # anything else worth checking


Read = Callable[[str, str], Reading]  # (file name, text) -> reading


@dataclass(frozen=True)
class Reader:
    """A vendor's reader of the corpus files matching `pattern`."""

    vendor: str
    pattern: str
    read: Read
    lacks: frozenset[str] = frozenset()  # of uuid, name, memory: not in this format


READERS: list[Reader] = []


def reader(vendor: str, pattern: str, lacks: tuple[str, ...] = ()) -> Callable[[Read], Read]:
    """Register `read` for the corpus files matching `pattern` (e.g. 'nvidia/q-x.*.xml')."""

    def add(read: Read) -> Read:
        READERS.append(Reader(vendor, pattern, read, frozenset(lacks)))
        return read

    return add


def _load_vendors() -> None:
    for name in VENDOR_MODULES:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as error:
            if error.name != name:
                raise


def expectations() -> dict[str, dict[str, Any]]:
    """Every vendor's expectations, by corpus path ('nvidia/…')."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(HERE.glob("expected_*.json")):
        found.update(json.loads(path.read_text()))
    return found


def compare(reading: Reading, expected: dict[str, Any], lacks: frozenset[str]) -> list[str]:
    """How `reading` differs from `expected` and from what every file must show."""
    wrong = []
    for n, gpu in enumerate(reading.gpus):
        for what in ("uuid", "name", "memory"):
            value = gpu.memory_mib if what == "memory" else getattr(gpu, what)
            if what not in lacks and value is None:
                wrong.append(f"GPU {n} has no {what}")
    got: dict[str, Any] = {
        "gpus": len(reading.gpus),
        "uuids": [
            (g.uuid or "")[: len(u)]
            for g, u in zip(reading.gpus, expected.get("uuids", []), strict=False)
        ],
        "names": [g.name for g in reading.gpus],
        "memory": [g.memory_mib for g in reading.gpus],
        "pids": sorted(reading.pids),
        "state": reading.state,
    }
    for key, want in expected.items():
        if key == "facts":
            for fact, value in want.items():
                if reading.facts.get(fact) != value:
                    wrong.append(f"{fact}: {reading.facts.get(fact)!r}, expected {value!r}")
        elif key == "pids":
            if got["pids"] != sorted(want):
                wrong.append(f"pids: {got['pids']}, expected {sorted(want)}")
        elif key not in got:
            wrong.append(f"unknown expectation {key!r}")
        elif got[key] != want:
            wrong.append(f"{key}: {got[key]!r}, expected {want!r}")
    if "state" not in expected and reading.state is not None:
        wrong.append(f"state {reading.state!r}, expected none")
    return wrong


def check_file(path: Path, name: str, expected: dict[str, Any] | None) -> list[str]:
    """The mismatches of one corpus file (empty when it reads as expected)."""
    found = [r for r in READERS if fnmatch.fnmatch(name, r.pattern)]
    if not found:
        return ["no vendor reads this file"]
    if expected is None:
        return ["no expectations written for this file"]
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        reading = found[0].read(name, text)
    except Exception as error:  # a parser raising is what this check finds
        return [f"{found[0].read.__name__} raised {type(error).__name__}: {error}"]
    return compare(reading, expected, found[0].lacks)


def run_corpus(corpus: Path) -> tuple[int, list[str]]:
    """(data files read, 'file: mismatch' lines) over the whole corpus."""
    _load_vendors()
    expected = expectations()
    files = sorted(
        p for p in corpus.rglob("*") if p.is_file() and p.relative_to(corpus).as_posix() not in META
    )
    mismatches = []
    for path in files:
        name = path.relative_to(corpus).as_posix()
        mismatches += [f"{name}: {wrong}" for wrong in check_file(path, name, expected.get(name))]
    return len(files), mismatches


def main(argv: list[str]) -> int:
    """Check the corpus (default ../shared/smi-corpus); exit 1 on any mismatch."""
    corpus = Path(argv[0]).resolve() if argv else CORPUS
    if not corpus.is_dir():
        print(f"test-corpus: {corpus} is absent (only CI has ../shared); nothing to check")
        return 0
    read, mismatches = run_corpus(corpus)
    for line in mismatches:
        print(line)
    print(f"test-corpus: {read} files read, {len(mismatches)} mismatches")
    return 1 if mismatches else 0


if __name__ == "__main__":
    # As `python -m`, this file is `__main__`: the vendors' modules register their readers
    # with `tests.corpus.check`, so that module runs the check.
    sys.exit(importlib.import_module("tests.corpus.check").main(sys.argv[1:]))
