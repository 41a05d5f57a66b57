"""Benchmarks of this tree against an earlier commit, in one run (issue #42's 'within noise').

Run: `.venv/bin/python benchmarks/against.py [--rev REV] [--size quick|smoke|full]
[--rounds N] [NAME ...]` (default: REV is HEAD~1, size quick, one round, and the benchmarks
sweep, kernels, containers, finder and fairshare; root where they need it). `--smoke` is
`--rev HEAD --size smoke finder`: that it runs (`make bench-smoke`).

The commit's files are exported with `git archive` into a temporary folder (the repository's
worktrees are not touched) and each named benchmark runs there and here, alternately (old,
new, then new, old in the next round), with the same interpreter and venv: the commit's
package is found first on its PYTHONPATH. Each run's last line is its JSON figures; every
number in it (nested objects flattened to `a.b`) is compared as new / old, the median over
the rounds. A benchmark that fails on either side is named in `failed` with its last lines.

The last line printed is one JSON object: {"against": REV as a commit id, "size",
"rounds", "ratios": {"NAME.FIGURE": new/old}, "failed": {NAME: why}}. Ratios of figures
that are times are noisy on a shared 2-core machine: read them with the load printed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.bench_compare import export, flatten, last_json, ratios  # noqa: E402

DEFAULT = ("sweep", "kernels", "containers", "finder", "fairshare")
SIZES = {"quick": ["--quick"], "smoke": ["--smoke"], "full": []}
TIMEOUT_S = 1800


def run_one(tree: Path, name: str, size: str) -> tuple[dict[str, float] | None, str]:
    """One benchmark in `tree`: its figures (None: it failed) and its output's tail."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [sys.executable, str(tree / "benchmarks" / f"{name}.py"), *SIZES[size]]
    try:
        done = subprocess.run(
            command, cwd=tree, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        return None, f"no answer within {TIMEOUT_S} s"
    tail = "\n".join((done.stdout + done.stderr).splitlines()[-8:])
    figures = last_json(done.stdout)
    if done.returncode != 0 or figures is None:
        return None, f"exit {done.returncode}: {tail}"
    return flatten(figures), tail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help=f"benchmarks (default: {' '.join(DEFAULT)})")
    parser.add_argument("--rev", default="HEAD~1", help="the commit to compare with")
    parser.add_argument("--size", choices=sorted(SIZES), default="quick")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each side, alternating")
    parser.add_argument("--smoke", action="store_true", help="HEAD, smoke size, the finder")
    args = parser.parse_args(argv)
    if args.smoke:
        args.rev, args.size, args.names = "HEAD", "smoke", ["finder"]
    names = args.names or list(DEFAULT)
    unknown = [n for n in names if not (ROOT / "benchmarks" / f"{n}.py").is_file()]
    if unknown:
        parser.error(f"no such benchmark: {', '.join(unknown)}")
    result: dict[str, Any] = {"size": args.size, "rounds": args.rounds, "ratios": {}}
    failed: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="gpuhive-against-") as folder:
        old_tree = Path(folder)
        result["against"] = export(args.rev, old_tree)
        for name in names:
            sides: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
            for round_ in range(args.rounds):
                order = [("old", old_tree), ("new", ROOT)]
                for side, tree in order if round_ % 2 == 0 else order[::-1]:
                    started = time.monotonic()
                    figures, tail = run_one(tree, name, args.size)
                    load = os.getloadavg()[0]
                    took = time.monotonic() - started
                    print(f"{name} {side}: {took:.0f} s, load {load:.1f}", flush=True)
                    if figures is None:
                        failed[name] = f"{side}: {tail}"
                        break
                    sides[side].append(figures)
                if name in failed:
                    break
            if name not in failed:
                shown = ratios(sides["old"], sides["new"])
                for key, value in shown.items():
                    print(f"  {name}.{key}: {value}")
                result["ratios"].update({f"{name}.{k}": v for k, v in shown.items()})
    result["failed"] = failed
    print(json.dumps(result, sort_keys=True))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
