"""Benchmark smoke run (`make bench-smoke`): every benchmark at its `--smoke` size, two at a time.

Run: `.venv/bin/python -m tests.support.bench_smoke [--timeout S] [--jobs N] [--only NAME ...]
[DIR]`. Every `DIR/*.py` (default `benchmarks/`) except the fixtures other benchmarks import
(`FIXTURES`) runs as `python NAME.py --smoke` in its own process group, from the repository
root, with a per-benchmark timeout; `--jobs` of them at once (default 2: a smoke run only
proves that a benchmark runs to its end and measures every figure, its figures are not
read, so two sharing the cores distort nothing that counts; each one keeps its own
databases, ports, hosts and dockerd). The slowest start first (`SLOWEST`), so that the run
ends about when its longest benchmark does. A benchmark fails on a non-zero exit (a crash included), a
timeout, a last line that is not one JSON object, or a null anywhere in that object (a figure
it could not measure). One line per benchmark (name, seconds, ok or why), the tail of a failed
one's output, and as the last line one JSON object: {"benchmarks", "failed", "seconds",
"per_benchmark_s", "failures"}. Exit status 1 when any failed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
# modules of benchmarks/ that other benchmarks import (or run) and are no benchmark themselves
FIXTURES = frozenset(
    {
        "__init__",
        "container_attribution",
        "preemption_live",
        "sweep_api",
        "sweep_baseline",
        "sweep_fixture",
        "sweep_sshd",
        "tenancy_budgets",
    }
)
TIMEOUT_S = 180.0  # a hang's bound: the slowest takes ~70 s alone, more beside another
JOBS = 2
# The order to start in only (measured smoke runs: replicas 72 s, shares 71 s,
# overload_memory 34 s, containers and fairshare 27 s each); the others follow by name.
SLOWEST = ("replicas", "shares", "overload_memory", "containers", "fairshare")


def benchmarks(folder: Path) -> list[Path]:
    """The benchmark scripts of `folder`, by name."""
    return sorted(p for p in folder.glob("*.py") if p.stem not in FIXTURES)


def start_order(scripts: list[Path]) -> list[Path]:
    """`scripts`, the known slowest first (`SLOWEST`), then the others by name."""
    rank = {name: n for n, name in enumerate(SLOWEST)}
    return sorted(scripts, key=lambda p: (rank.get(p.stem, len(rank)), p.stem))


def null_at(value: Any, path: str = "") -> str | None:
    """Where the first null (or NaN) in a JSON value is (a dotted path), or None."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return path or "(the object)"  # NaN too: json.dumps writes what it could not measure
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        found = null_at(item, f"{path}.{key}" if path else str(key))
        if found:
            return found
    return None


def verdict(returncode: int, output: str) -> str | None:
    """Why a finished benchmark failed, or None when it passed."""
    if returncode != 0:
        return f"exit status {returncode}"
    lines = output.strip().splitlines()
    if not lines:
        return "no output"
    try:
        last = json.loads(lines[-1])
    except ValueError:
        return f"last line is not JSON: {lines[-1][:120]!r}"
    if not isinstance(last, dict):
        return f"last line is not one JSON object: {lines[-1][:120]!r}"
    where = null_at(last)
    return f"null figure: {where}" if where else None


def run_one(script: Path, timeout: float) -> tuple[float, str | None, str]:
    """Run one benchmark at its smoke size: (seconds, why it failed or None, its output)."""
    began = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, str(script), "--smoke"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its servers and hosts go with it on a timeout
    )
    try:
        output, _ = process.communicate(timeout=timeout)
        why = verdict(process.returncode, output)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        why = f"timed out after {timeout:.0f} s"
    return time.monotonic() - began, why, output or ""


def main(argv: list[str] | None = None) -> int:
    """Run every benchmark at its smoke size; 1 when any failed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", type=Path, default=ROOT / "benchmarks")
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds per benchmark")
    parser.add_argument("--only", nargs="+", default=None, help="these benchmarks (names)")
    parser.add_argument("--jobs", type=int, default=JOBS, help="benchmarks run at once")
    args = parser.parse_args(argv)
    scripts = [p for p in benchmarks(args.folder) if args.only is None or p.stem in args.only]
    began = time.monotonic()
    seconds: dict[str, float] = {}
    failures: dict[str, str] = {}

    def one(script: Path) -> None:
        took, why, output = run_one(script, args.timeout)
        seconds[script.stem] = round(took, 1)
        report = f"{script.stem:<14} {took:6.1f} s  {'ok' if why is None else why}\n"
        if why is not None:
            failures[script.stem] = why
            tail = output.strip().splitlines()[-15:]
            report += "".join(f"    | {line}\n" for line in tail)
        with printing:  # the lines of two benchmarks never interleave
            print(report, end="", flush=True)

    printing = threading.Lock()

    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        list(pool.map(one, start_order(scripts)))
    summary = {
        "benchmarks": len(scripts),
        "failed": len(failures),
        "seconds": round(time.monotonic() - began, 1),
        "per_benchmark_s": dict(sorted(seconds.items())),
        "failures": dict(sorted(failures.items())),
    }
    print(json.dumps(summary), flush=True)
    return 1 if failures or not scripts else 0


if __name__ == "__main__":
    sys.exit(main())
