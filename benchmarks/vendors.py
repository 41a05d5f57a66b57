"""GPU vendors and driver generations (issue #43): the corpus check and old-driver hosts.

Run: ``.venv/bin/python benchmarks/vendors.py [--smoke]``. Each figure is one function
registered in `FIGURES` with `@figure("name")` (a vendor's part adds its own the same way,
e.g. the AMD figures); every one is measured and printed, and the last line printed is one
JSON object with them all:

- ``corpus_files_read``: the files of ``../shared/smi-corpus`` every vendor's parsers read
  (its data files, the index, manifest and checksums apart); 0 when the corpus is absent (said
  on a line before);
- ``corpus_mismatches``: files whose reading differs from tests/corpus/'s expectations (0);
- ``old_driver_hosts_blinded``: of a 418-style and a 470-style stand-in host monitored
  through the real sampler, those whose GPUs came back unread (0), each with the fields its
  driver does not report shown as not reported;
- ``amd_sweep_cost_ratio``: an AMD stand-in host's median probe time over an NVIDIA one's with
  the same GPUs and the same processes, probed in turn in the same run (at most 1.2;
  tests/support/amd_hosts.py);
- ``amd_misattributed``: real processes of several users on an AMD stand-in host, intruders on
  booked GPUs among them, whose owner or GPU the sweep got wrong, plus intruders protection
  missed (0).

A vendor's figures live in their own functions here (or in a module this one imports), each
under `@figure`; `figures()` measures whatever is registered.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

Figure = Callable[[bool], Any]  # smoke -> the figure's value
FIGURES: dict[str, Figure] = {}


def figure(name: str) -> Callable[[Figure], Figure]:
    """Register a figure of this benchmark under `name`."""

    def add(measure: Figure) -> Figure:
        FIGURES[name] = measure
        return measure

    return add


@functools.cache
def _corpus() -> tuple[int, list[str]]:
    """(files read, mismatches) of every vendor's parsers over the corpus."""
    from tests.corpus.check import CORPUS, run_corpus

    if not CORPUS.is_dir():
        print(f"corpus: {CORPUS} is absent; nothing read")
        return 0, []
    read, mismatches = run_corpus(CORPUS)
    for line in mismatches:
        print(f"corpus mismatch: {line}")
    print(f"corpus: {read} files read, {len(mismatches)} mismatches")
    return read, mismatches


@figure("corpus_files_read")
def corpus_files_read(smoke: bool) -> int:
    """The corpus files every vendor's parsers read."""
    return _corpus()[0]


@figure("corpus_mismatches")
def corpus_mismatches(smoke: bool) -> int:
    """Corpus files whose reading differs from the expectations written for them."""
    return len(_corpus()[1])


@figure("old_driver_hosts_blinded")
def old_driver_hosts_blinded(smoke: bool) -> int:
    """418- and 470-style stand-in hosts whose GPUs the real sampler could not read."""
    from tests.support.old_drivers import blinded_hosts

    return blinded_hosts()


@figure("amd_sweep_cost_ratio")
def amd_sweep_cost_ratio(smoke: bool) -> float:
    """An AMD host's probe time over an NVIDIA host's, same GPUs and processes (<= 1.2)."""
    from tests.support.amd_hosts import sweep_cost_ratio

    return sweep_cost_ratio(smoke)


@figure("amd_misattributed")
def amd_misattributed(smoke: bool) -> int:
    """AMD GPU processes whose owner or GPU was wrong, intruders included (0)."""
    from tests.support.amd_hosts import misattributed

    return misattributed(smoke)


def figures(smoke: bool) -> dict[str, Any]:
    """Every registered figure, measured."""
    return {name: measure(smoke) for name, measure in FIGURES.items()}


def main() -> None:
    """Measure and print every figure; the last line is one JSON object."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="a fast run (same figures)")
    args = parser.parse_args()
    print(json.dumps(figures(args.smoke)))


if __name__ == "__main__":
    main()
