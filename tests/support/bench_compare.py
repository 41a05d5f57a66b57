"""What benchmarks/against.py compares: a commit's files, the figures of a run, their ratios
(shared with its test: tests never import a benchmark)."""

from __future__ import annotations

import json
import statistics
import subprocess
import tarfile
from io import BytesIO
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def export(rev: str, into: Path) -> str:
    """Write commit `rev`'s files into `into`; its full commit id."""
    commit = subprocess.run(
        ["git", "rev-parse", "--verify", f"{rev}^{{commit}}"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    archive = subprocess.run(
        ["git", "archive", "--format=tar", commit], cwd=ROOT, capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        if hasattr(tarfile, "data_filter"):  # Python 3.11.4 and later
            tar.extractall(into, filter="data")
        else:  # Debian 12's 3.11.2: the archive is this repository's own commit
            tar.extractall(into)
    return commit


def flatten(value: Any, prefix: str = "") -> dict[str, float]:
    """Every number in a JSON value, by its dotted path (booleans are no figures)."""
    if isinstance(value, bool):
        return {}
    if isinstance(value, int | float):
        return {prefix: float(value)}
    if isinstance(value, dict):
        found: dict[str, float] = {}
        for key, inner in value.items():
            found.update(flatten(inner, f"{prefix}.{key}" if prefix else str(key)))
        return found
    return {}


def last_json(output: str) -> dict[str, Any] | None:
    """The JSON object on the last non-empty line of `output`, if it is one."""
    lines = [line for line in output.splitlines() if line.strip()]
    try:
        found = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        return None
    return found if isinstance(found, dict) else None


def ratios(old: list[dict[str, float]], new: list[dict[str, float]]) -> dict[str, float]:
    """new / old per figure both sides measured, the median over the rounds (0/0 is 1)."""
    found = {}
    for key in sorted(set.intersection(*(set(r) for r in old + new))):
        each = []
        for before, after in zip(old, new, strict=True):
            a, b = after[key], before[key]
            each.append(1.0 if a == b else (a / b if b else float("inf")))
        found[key] = round(statistics.median(each), 3)
    return found
