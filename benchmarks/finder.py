"""Earliest-slot finder benchmark (issue #17).

Run: `.venv/bin/python benchmarks/finder.py [--quick | --smoke]` (`--smoke`: 6 hosts, 500
reservations, 3 runs, 50 random cases, a race of 3 bookings per thread; that it runs).

- `search_ms`: a store (SQLite) with 1,000 GPUs on 125 hosts of 8 (A100 80 GB; NVSwitch, NVLink
  pairs and PCIe-only hosts, a third each), 200 of them split into 7 MIG slices each (1,400
  slices), 50,000 reservations over the next 30 days (whole GPUs on the unsplit ones, slices on
  the split ones, 2-16 h each), weekly access rules (everyone on weekdays 07:00-22:00, the
  requester's group always on half the hosts) and a fair-share limit on the requester; the
  request: 4 NVLink-connected GPUs for 8 h within 30 days. The search runs as the API runs
  it (`SlotSearch.search`: its bulk read, the rules, the limits, the sweep); the figure is
  the median wall-clock time of 15 runs after one warm-up (`--quick`: 9). The line before the
  JSON also gives the median CPU time of the process and the load average: on a shared,
  busy machine the wall-clock time is mostly waiting for a core.
- `brute_force_mismatches`: 1,000 random cases (with and without slices, random topology,
  bookings, allowed spans and requests; tests/support/finder_cases.py) where the finder's
  answers (the whole list: starts, units, costs, order) differ from an enumeration of its
  documented contract on a 15-minute grid (`brute_force_all`).
- `slice_double_bookings`: whole-GPU and slice bookings racing on SQLite and PostgreSQL
  (tests/support/mig_race.py), double bookings found afterwards.

The last line printed is one JSON object with exactly these three figures.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from datetime import time as clock
from pathlib import Path
from zoneinfo import ZoneInfo

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import insert, update

from jupyter_gpuhive.bookings.finder import SlotSearch
from jupyter_gpuhive.bookings.quotas import LimitService
from jupyter_gpuhive.bookings.reservations import Policy
from jupyter_gpuhive.hosts.vendors.nvidia_topology import parse_topology
from jupyter_gpuhive.model import GpuDecl, HostDecl, Identity, SliceDecl
from jupyter_gpuhive.model.finder import Want, find
from jupyter_gpuhive.model.limits import Limits, LimitTable
from jupyter_gpuhive.model.rules import Rule, Window
from jupyter_gpuhive.sim.topology import layout, topo_matrix
from jupyter_gpuhive.store import Store
from jupyter_gpuhive.store.schema import reservation_gpus, reservation_stats, reservations
from tests.support.finder_cases import brute_force_all, random_case
from tests.support.mig_race import slice_double_bookings

HOSTS, PER_HOST, SPLIT_HOSTS, SLICES = 125, 8, 25, 7  # 25 x 8 = 200 GPUs split into 7 slices
RESERVATIONS = 50_000
ZONE = ZoneInfo("Europe/Warsaw")
LAYOUTS = ("nvswitch", "nvlink-pairs", "pcie-2numa")
USER = Identity("alice", frozenset({"lab"}))


def build(url: str, rng: random.Random, now: datetime) -> Store:
    """The store of the search case (reservations written in bulk, as rows)."""
    store = Store(url).open()
    decls = []
    for h in range(HOSTS):
        gpus = []
        for i in range(PER_HOST):
            parts = None
            if h < SPLIT_HOSTS:
                parts = tuple(SliceDecl(gi, 0, "1g.10gb", f"MIG-{h}-{i}-{gi}", 9728)
                              for gi in range(1, SLICES + 1))  # fmt: skip
            gpus.append(GpuDecl(i, f"GPU-{h:03d}-{i}", "NVIDIA A100-SXM4-80GB", 81920,
                                slices=parts))  # fmt: skip
        decls.append(HostDecl(f"node{h:03d}", transport="local", gpus=tuple(gpus)))
    store.inventory.sync(decls)
    for h in range(HOSTS):
        layout(PER_HOST, LAYOUTS[h % 3])  # checks the preset
        store.topology.put(f"node{h:03d}", parse_topology(topo_matrix(PER_HOST, LAYOUTS[h % 3])))
    units = [u for u in store.inventory.units() if u.is_slice or u.host >= f"node{SPLIT_HOSTS:03d}"]
    per_unit = RESERVATIONS // len(units) + 1
    rows, links = [], []
    rid = 0
    start0 = now - timedelta(hours=12)
    for unit in units:
        cursor = start0 + timedelta(minutes=15 * rng.randrange(0, 48))
        for _ in range(per_unit):
            if rid >= RESERVATIONS:
                break
            length = timedelta(hours=rng.randint(2, 16))
            rid += 1
            rows.append({"id": rid, "owner": f"user{rid % 50}", "title": "bench", "description": "",
                         "start_at": cursor, "end_at": cursor + length, "created_at": now,
                         "flagged": False})  # fmt: skip
            links.append({"reservation_id": rid, "gpu_id": unit.id, "device_id": unit.device_id,
                          "start_at": cursor, "end_at": cursor + length, "cancelled": False})  # fmt: skip
            cursor += length + timedelta(minutes=15 * rng.randrange(1, 96))

    def work(conn):
        conn.execute(insert(reservations), rows)
        conn.execute(insert(reservation_gpus), links)
        conn.execute(update(reservation_stats).values(longest_seconds=16 * 3600 + 1))

    store.db.write(work)
    weekdays = Window(frozenset(range(5)), clock(7), clock(22))
    store.rules.add(Rule(None, "weekdays", users=frozenset({"*"}), windows=(weekdays,)), "admin")
    half = frozenset(f"node{h:03d}" for h in range(0, HOSTS, 2))
    store.rules.add(Rule(None, "lab", groups=frozenset({"lab"}), hosts=half), "admin")
    return store


def search_ms(runs: int) -> tuple[float, float, dict]:
    """Median wall-clock and CPU milliseconds of the search case, and its first answer."""
    rng = random.Random(17)
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    with tempfile.TemporaryDirectory() as tmp:
        store = build(f"sqlite:///{Path(tmp) / 'finder.sqlite'}", rng, now)
        try:
            policy = Policy(ZONE, max_length=timedelta(days=7), horizon=timedelta(days=90))
            limits = LimitService(store, ZONE, LimitTable(default=Limits(gpus=16,
                                  gpu_hours_week=400)), lambda n: Identity(n))  # fmt: skip
            search = SlotSearch(store, policy, lambda: limits, clock=lambda: now)
            want = Want(4, 8 * 3600, int(now.timestamp()),
                        int((now + timedelta(days=30)).timestamp()), nvlink=True)  # fmt: skip
            search.search(USER, want)  # warm-up: inventory and topology in memory
            times, cpu, answer = [], [], None
            for _ in range(runs):
                began, used = time.perf_counter(), time.process_time()
                _, slots = search.search(USER, want)
                times.append((time.perf_counter() - began) * 1000)
                cpu.append((time.process_time() - used) * 1000)
                answer = slots[0] if slots else None
            first = {"start": answer.start, "gpus": [u.ref for u in answer.units]} if answer else {}
            return statistics.median(times), statistics.median(cpu), first
        finally:
            store.close()


def mismatches(cases: int = 1000) -> int:
    """Random cases where the finder's answers are not the enumerated contract's."""
    bad = 0
    for seed in range(cases):
        want, inputs = random_case(random.Random(seed))
        got = [(s.start, [u.id for u in s.units], s.cost) for s in find(want, inputs)]
        ref = [(s.start, [u.id for u in s.units], s.cost) for s in brute_force_all(want, inputs)]
        bad += got != ref
    return bad


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs, a shorter race")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: that it runs")
    args = parser.parse_args()
    global HOSTS, SPLIT_HOSTS, RESERVATIONS
    if args.smoke:
        HOSTS, SPLIT_HOSTS, RESERVATIONS = 6, 1, 500
    ms, cpu, first = search_ms(3 if args.smoke else 9 if args.quick else 15)
    load = os.getloadavg()[0]
    print(f"search: {ms:.1f} ms wall, {cpu:.1f} ms CPU (medians; load average {load:.1f} on "
          f"{os.cpu_count()} CPUs); first answer {first}", flush=True)  # fmt: skip
    cases = 50 if args.smoke else 1000
    bad = mismatches(cases)
    print(f"brute force: {bad} mismatches in {cases} random cases", flush=True)
    doubles = slice_double_bookings(quick=args.quick, rounds=3 if args.smoke else None)
    print(f"race: {doubles} double bookings", flush=True)
    print(json.dumps({"search_ms": round(ms, 1), "brute_force_mismatches": bad,
                      "slice_double_bookings": doubles}))  # fmt: skip


if __name__ == "__main__":
    main()
