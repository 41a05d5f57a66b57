"""Schemathesis against a real server: the OpenAPI document and the server agree, and no 500.

`make test-schemathesis` runs this: a Jupyter server with gpuhive in its own process (SQLite,
the simulated local hosts of tests/conftest.py), a little data so that ids exist, then
`schemathesis run --checks all` with a fixed seed against the served document (generated from
the route table and the request/response models: server/api/openapi.py), once as a user and
once as an admin, at the same time. Exits non-zero when any check fails. About four minutes
on a 2-core machine (56 operations, ~5,300 test cases).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from tests.conftest import HOSTS, TOKENS, USERS, iso, soon
from tests.support.server import Client, JupyterServer

SEED = 20261124
EXAMPLES = 6  # per operation, mode and phase
SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")
# Schema-valid requests may still break a rule of the site (a GPU that does not exist, a
# start in the past): those are 422, never 400. Everything else is schemathesis' default.
CONFIG = """
[checks.positive_data_acceptance]
expected-statuses = ["2xx", "401", "403", "404", "409", "422", "5xx"]

# The users of this run have no account on the simulated hosts, so a host cannot read their
# job logs: the documented 503. (A client's bad offset or tail is a 422 before any shell.)
[[operations]]
include-name = "GET /jobs/{id}/log"
checks.not_a_server_error.expected-statuses = ["2xx", "3xx", "4xx", "503"]
"""


def seed_data(port: int) -> None:
    """A reservation, a rule and a job, so that some generated ids hit real things."""
    alice, boss = Client(port, TOKENS["alice"]), Client(port, TOKENS["boss"])
    start = soon(days=3)
    for call, method, path, body in (
        (boss, "POST", "rules", {"name": "everyone", "users": ["*"]}),
        (alice, "POST", "reservations",
         {"title": "seed", "gpus": ["gpu1:0"], "start": iso(start), "duration": "1h"}),
        (alice, "POST", "jobs", {"name": "seed", "gpus": ["gpu2:0"], "command": "true"}),
        (boss, "POST", "reservations",
         {"title": "seed", "gpus": ["gpu2:1"], "start": iso(start + timedelta(hours=2)),
          "duration": "2h"}),
    ):  # fmt: skip
        status, reply, _ = call.call(method, path, body)
        if status != 201:
            raise SystemExit(f"seeding {method} {path} failed: {status} {reply}")


def start(url: str, user: str, examples: int, root: Path) -> subprocess.Popen[str]:
    """Start one schemathesis run as `user` in root/USER; its events go to root/USER.ndjson."""
    workdir = root / user
    workdir.mkdir()
    config = workdir / "schemathesis.toml"
    config.write_text(CONFIG)
    return subprocess.Popen(
        [
            str(SCHEMATHESIS), "--no-color", "--config-file", str(config),
            "run", f"{url}openapi.json",
            "--header", f"Authorization: token {TOKENS[user]}",
            "--checks", "all",
            "--seed", str(SEED),
            "--max-examples", str(examples),
            "--generation-database", "none",
            "--workers", "1",
            "--request-timeout", "20",
            "--report", "ndjson", "--report-ndjson-path", str(root / f"{user}.ndjson"),
        ],
        cwd=workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip


def count(report: Path) -> tuple[int, int]:
    """(test cases run, failed checks) from a schemathesis NDJSON event stream."""
    cases = failures = 0
    if not report.exists():  # schemathesis stopped before testing anything
        return 0, 0
    for line in report.read_text().splitlines():
        finished = json.loads(line).get("ScenarioFinished")
        if finished:
            recorder = finished.get("recorder", {})
            cases += len(recorder.get("cases", {}))
            for checks in recorder.get("checks", {}).values():
                failures += sum(1 for c in checks if c.get("status") == "failure")
    return cases, failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--examples", type=int, default=EXAMPLES)
    parser.add_argument("--verbose", action="store_true", help="print schemathesis' full output")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="gpuhive-schemathesis-"))
    config = {
        "db_url": f"sqlite:///{root / 'hive.sqlite'}",
        "hosts": HOSTS,
        "admin_groups": ["admins"],
        "site_timezone": "Europe/Warsaw",
        "min_reservation": "10m",
        "max_reservation": "3d",
        "booking_horizon": "30d",
        # Webhook URLs schemathesis makes up may only point here (traffic stays on loopback).
        "webhook_allowed_hosts": ["127.0.0.1"],
        "webhook_allow_private": True,
        "webhook_max_attempts": 1,
    }
    server = JupyterServer(config, USERS)
    started = time.monotonic()
    total_cases = total_failures = 0
    ok = True
    try:
        seed_data(server.port)
        url = f"http://127.0.0.1:{server.port}/gpuhive/api/"
        runs = {user: start(url, user, args.examples, root) for user in ("alice", "boss")}
        for user, process in runs.items():
            output, _ = process.communicate()
            cases, failures = count(root / f"{user}.ndjson")
            total_cases += cases
            total_failures += failures
            print(f"schemathesis as {user}: {cases} test cases, {failures} failed checks, "
                  f"exit {process.returncode}")  # fmt: skip
            if process.returncode != 0 or args.verbose:
                print(output[-30000:])
            ok = ok and process.returncode == 0
    finally:
        server.stop()
        log = (server.dir / "server.log").read_text(errors="replace")
        errors = [line for line in log.splitlines() if "Traceback" in line or " 500 " in line]
        if errors:
            print(f"server log: {len(errors)} error lines, see {server.dir / 'server.log'}")
    print(f"schemathesis: {total_cases} test cases, {total_failures} failed checks in "
          f"{time.monotonic() - started:.0f}s")  # fmt: skip
    if ok:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(server.dir, ignore_errors=True)
    else:
        print(f"reports in {root}, server log in {server.dir}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
