"""Whole-GPU and MIG slice bookings racing on SQLite and PostgreSQL (issue #17).

Run: `.venv/bin/python benchmarks/mig_race.py [--quick | --smoke]` (`--smoke`: 3 bookings per
thread). Eight threads, each with its own
Store, book random mixes of whole GPUs, single slices and sets of slices on one host of two
GPUs split into seven 1g.10gb slices each; half of them skip the clash pre-check, so only the
database's rule can refuse them (see tests/support/mig_race.py). The last line is one
JSON object; `slice_double_bookings` (target 0) is the figure benchmarks/finder.py also reports.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.mig_race import race
from tests.support.postgres import running_postgres


def main() -> None:
    """Race on both databases and print what happened."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10 bookings per thread, not 40")
    parser.add_argument(
        "--smoke", action="store_true", help="tiny sizes: that it runs (make bench-smoke)"
    )
    args = parser.parse_args()
    rounds = 3 if args.smoke else 10 if args.quick else 40
    with tempfile.TemporaryDirectory(prefix="gpuhive-migrace-") as folder, running_postgres() as pg:
        results = [
            race(f"sqlite:///{Path(folder) / 'race.sqlite'}", rounds=rounds),
            race(pg.new_database(), rounds=rounds),
        ]
    for result in results:
        print(json.dumps(asdict(result)))
    final = {
        "slice_double_bookings": sum(r.double_bookings for r in results),
        "attempts": sum(r.attempts for r in results),
        "booked": sum(r.booked for r in results),
        "refused": sum(r.refused for r in results),
        "errors": sum(r.errors for r in results),
        "quick": args.quick,
    }
    print(json.dumps(final))


if __name__ == "__main__":
    main()
