"""`make test-dates`: the date- and time-sensitive tests, with the clock faked to chosen instants.

Each instant runs in its own pytest process under Debian's libfaketime (LD_PRELOAD), with FAKETIME
set to the offset that puts the wall clock there; the clock then runs on. Every process the tests
start inherits that environment and sees the same clock: the Jupyter servers, PostgreSQL (through
runuser), shells. The monotonic clock is left alone (FAKETIME_DONT_FAKE_MONOTONIC=1 and
FAKETIME_FORCE_MONOTONIC_FIX=0), so timeouts, asyncio and threads keep working at full speed;
tests/faketime/sitecustomize.py mends time.sleep() for that setting.
All processes run in the site's time zone (TZ), so local-time code meets its DST changes too;
so does PostgreSQL's session zone, and the API tests run on it at the DST changes and today (on
SQLite alone at the other instants, to keep the run short).

The instants are computed, never written down: the real now; 26 hours before (most tests book
from soon(), a day and an hour ahead), one hour before and one hour after each DST change of the
site zone in the coming year; the next 31 December 23:59, the next 29 February noon and the next
Sunday 23:30 (local times).

    python -m tests.dates [--list] [--only TEXT] [--at ISO-INSTANT] [--jobs N] [-- PYTEST-ARGS]
"""

from __future__ import annotations

import argparse
import calendar
import glob
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone, tzinfo
from pathlib import Path
from zoneinfo import ZoneInfo

UTC = timezone.utc
SITE_ZONE = "Europe/Warsaw"  # the site_timezone of tests/conftest.py's hive_config
ROOT = Path(__file__).resolve().parents[1]
PRELOAD_DIR = ROOT / "tests" / "faketime"  # sitecustomize.py for the Python processes

# The date- and time-sensitive tests: reservations, access rules, overview, calendar (widget and
# iCal feed), local times, queue estimates, usage, digests. A test that builds its times from the
# clock belongs here.
MODULES = [
    "tests/test_dates.py",  # first: does the faked clock reach PostgreSQL and child processes?
    "tests/test_access.py",
    "tests/test_model.py",
    "tests/test_local_times.py",
    "tests/api/test_api_reservations.py",
    "tests/api/test_api_rules.py",
    "tests/api/test_api_overview.py",
    "tests/widgets/test_calendar_model.py",
    "tests/widgets/test_overview.py",
    "tests/jobs/test_jobs_queue_pass.py",
    "tests/jobs/test_jobs_queue.py::test_a_reservation_stops_the_job_gracefully_and_puts_it_back",
    "tests/api/test_privacy.py::test_usage_of_others_is_shown_only_in_aggregate",  # usage
    "tests/protection/test_protection_store.py",
    "tests/integrations/test_digests.py",  # today, tomorrow, yesterday's usage in the site zone
    "tests/integrations/test_subscriptions.py",  # free slots before a deadline
    "tests/finder/test_search_api.py",  # the earliest slot: rule windows and spans in local time
]
# Tests of those modules whose answers no instant can change (16 servers per database and
# instant): bad input and a body that is not JSON (the one deadline they give is in 2000).
NOT_DATES = [
    "tests/finder/test_search_api.py::test_bad_input",
    "tests/finder/test_search_api.py::test_not_json_and_anonymous",
]

LIBFAKETIME = (
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/*/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
)


@dataclass(frozen=True)
class Instant:
    """A moment to start the clock at, and why it is interesting."""

    at: datetime
    why: str
    postgresql: bool = False  # API tests on PostgreSQL too (else SQLite only, to save time)

    def describe(self, zone: tzinfo) -> str:
        """'Sun 2027-03-28 01:00 CET (00:00 UTC): one hour before …'."""
        local = self.at.astimezone(zone)
        databases = "SQLite + PostgreSQL" if self.postgresql else "SQLite"
        return (
            f"{local:%a %Y-%m-%d %H:%M %Z} ({self.at.astimezone(UTC):%H:%M} UTC): {self.why}"
            f" [{databases}]"
        )


def libfaketime() -> str:
    """Path of Debian's libfaketime.so.1 (package libfaketime, pulled in by faketime)."""
    for pattern in LIBFAKETIME:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    raise RuntimeError("libfaketime was not found; run 'make sysdeps' (installs faketime).")


def offset_changes(zone: tzinfo, start: datetime, end: datetime) -> list[datetime]:
    """Instants in [start, end) at which the zone's UTC offset changes (to the second)."""
    found = []
    step = timedelta(hours=6)
    a = start.astimezone(UTC)
    while a < end:
        b = min(a + step, end)
        if a.astimezone(zone).utcoffset() != b.astimezone(zone).utcoffset():
            lo, hi = a, b
            while hi - lo > timedelta(seconds=1):
                mid = lo + (hi - lo) / 2
                if mid.astimezone(zone).utcoffset() == lo.astimezone(zone).utcoffset():
                    lo = mid
                else:
                    hi = mid
            found.append(hi.replace(microsecond=0))
        a = b
    return found


def _local(day: date, hour: int, minute: int, zone: tzinfo) -> datetime:
    return datetime(day.year, day.month, day.day, hour, minute, tzinfo=zone).astimezone(UTC)


def instants(now: datetime, zone: tzinfo) -> list[Instant]:
    """The real now, then the interesting instants of the coming year, in time order."""
    found: list[Instant] = []
    for change in offset_changes(zone, now, now + timedelta(days=366)):
        before = change - timedelta(seconds=1)
        gained = change.astimezone(zone).utcoffset() > before.astimezone(zone).utcoffset()  # type: ignore[operator]
        kind = "summer time begins" if gained else "summer time ends"
        hour = timedelta(hours=1)
        # soon() is a whole hour a day and an hour ahead: from here, its bookings span the change.
        found.append(Instant(change - 26 * hour, f"26 hours before {kind}"))
        # PostgreSQL's session zone is the site's here (TZ): its offsets change at these two.
        found.append(Instant(change - hour, f"one hour before {kind}", postgresql=True))
        found.append(Instant(change + hour, f"one hour after {kind}", postgresql=True))
    today = now.astimezone(zone).date()
    eve = _local(date(today.year, 12, 31), 23, 59, zone)
    if eve <= now:
        eve = _local(date(today.year + 1, 12, 31), 23, 59, zone)
    found.append(Instant(eve, "23:59 on 31 December"))
    year = today.year
    while not calendar.isleap(year) or _local(date(year, 2, 29), 12, 0, zone) <= now:
        year += 1
    found.append(Instant(_local(date(year, 2, 29), 12, 0, zone), "29 February"))
    sunday = today + timedelta(days=(6 - today.weekday()) % 7)
    if _local(sunday, 23, 30, zone) <= now:
        sunday += timedelta(days=7)
    found.append(Instant(_local(sunday, 23, 30, zone), "a Sunday 23:30"))
    today_now = Instant(now.replace(microsecond=0), "today (the real clock)", postgresql=True)
    return [today_now, *sorted(found, key=lambda i: i.at)]


def real_now() -> datetime:
    """The real time, also inside a faked run (FAKETIME is then our offset from it)."""
    now = datetime.now(UTC)
    faked = os.environ.get("FAKETIME", "")
    if "libfaketime" in os.environ.get("LD_PRELOAD", "") and re.fullmatch(r"[+-]\d+", faked):
        now -= timedelta(seconds=int(faked))
    return now


def faked_env(at: datetime, zone_name: str = SITE_ZONE) -> dict[str, str]:
    """The environment that starts a process (and its children) with the clock at `at`."""
    env = dict(os.environ)
    offset = round((at - real_now()).total_seconds())
    preload = [p for p in env.get("LD_PRELOAD", "").split() if "libfaketime" not in p]
    env["LD_PRELOAD"] = " ".join([libfaketime(), *preload])
    env["FAKETIME"] = f"{offset:+d}"
    env["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"  # timeouts, asyncio and the GIL keep real time
    # libfaketime's "monotonic fix" (on by default with glibc) bends pthread_cond_timedwait() on
    # monotonic conditions, which CPython's GIL waits on: every hand-over to a thread (a server's
    # database calls) then takes up to 15 ms of spinning. Off, the conditions keep real time.
    env["FAKETIME_FORCE_MONOTONIC_FIX"] = "0"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PRELOAD_DIR), env.get("PYTHONPATH")]))
    env["TZ"] = zone_name
    return env


def clock_under(env: dict[str, str]) -> datetime:
    """What a C program (date) started with `env` reads from the clock."""
    out = subprocess.run(["date", "-u", "+%s"], env=env, capture_output=True, text=True, check=True)
    return datetime.fromtimestamp(int(out.stdout), UTC)


def run(instant: Instant, zone: tzinfo, pytest_args: list[str], log: Path) -> bool:
    """One pytest process at `instant`, its output in `log`; True if it passed."""
    env = faked_env(instant.at, str(zone))
    env["GPUHIVE_TEST_DATABASES"] = "sqlite,postgresql" if instant.postgresql else "sqlite"
    seen = clock_under(env)
    if abs(seen - instant.at) > timedelta(minutes=1):
        log.write_text(f"libfaketime did not take effect: 'date' says {seen:%Y-%m-%d %H:%M} UTC\n")
        return False
    skipped = [arg for test in NOT_DATES for arg in ("--deselect", test)]
    command = [sys.executable, "-m", "pytest", "-q", *MODULES, *skipped, *pytest_args]
    with log.open("w") as out:
        done = subprocess.run(command, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    return done.returncode == 0


def main(argv: list[str] | None = None) -> int:
    """Run the date-sensitive modules at every instant; non-zero if any instant failed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="print the instants and the modules")
    parser.add_argument("--only", default="", help="only instants whose description has TEXT")
    parser.add_argument("--at", help="one instant of your own, ISO 8601 with an offset")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="instants run at once (default: 2, one per core on 1 core)")  # fmt: skip
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = parser.parse_args(argv)
    zone = ZoneInfo(SITE_ZONE)
    if args.at:
        chosen = [Instant(datetime.fromisoformat(args.at).astimezone(UTC), "--at", True)]
    else:
        chosen = [i for i in instants(real_now(), zone) if args.only in i.describe(zone)]
    print(f"test-dates: {len(chosen)} instants (site zone {zone}), {args.jobs} at a time:")
    print("\n".join(f"  {i.describe(zone)}" for i in chosen))
    print("modules:", " ".join(MODULES))
    print("but:", " ".join(NOT_DATES), flush=True)
    if args.list or not chosen:
        return 0 if args.list else 1
    logs = Path(tempfile.mkdtemp(prefix="gpuhive-test-dates-"))

    def one(n: int, instant: Instant) -> tuple[Instant, bool, float]:
        t0 = time.monotonic()
        ok = run(instant, zone, args.pytest_args, logs / f"{n}.log")
        took = time.monotonic() - t0
        text = (logs / f"{n}.log").read_text(errors="replace")
        last = text.strip().splitlines()[-1:] or ["(no output)"]
        with lock:
            verdict = "passed" if ok else "FAILED"
            print(f"\n==> {verdict} in {took:.0f} s at {instant.describe(zone)}: {last[0]}")
            if not ok:
                print(text, flush=True)
        return instant, ok, took

    lock = threading.Lock()
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        results = list(pool.map(lambda pair: one(*pair), enumerate(chosen, 1)))
    print("\ntest-dates summary:")
    for instant, ok, took in results:
        print(f"  {'passed' if ok else 'FAILED'}  {took:4.0f} s  {instant.describe(zone)}")
    failed = sum(not ok for _, ok, _ in results)
    print(f"{len(results) - failed} of {len(results)} instants passed (logs in {logs}).")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
