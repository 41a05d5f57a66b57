"""Magics benchmark: round trip of %gpureserve and %gpustatus against a local server.

Run: `.venv/bin/python benchmarks/magics.py [--quick | --smoke]` (`--smoke`: 5 calls each). A real Jupyter server with gpuhive
runs in its own process (16 hosts × 4 GPUs declared); the magics run in a real IPython
shell. The floor is one bare `GET me` through the same HiveClient. The last line printed
is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from jupyter_gpuhive.notebook.client import HiveClient
from tests.support.server import JupyterServer, percentile


def ms(values: list[float], pct: float | None = None) -> float:
    value = statistics.median(values) if pct is None else percentile(values, pct)
    return round(value * 1000, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="30 calls each instead of 200")
    parser.add_argument(
        "--smoke", action="store_true", help="tiny sizes: that it runs (make bench-smoke)"
    )
    args = parser.parse_args()
    calls = 5 if args.smoke else 30 if args.quick else 200
    root = Path(tempfile.mkdtemp(prefix="gpuhive-magics-"))
    hosts = [{"name": f"node{i:02d}", "gpu_count": 4} for i in range(16)]
    config = {"db_url": f"sqlite:///{root / 'hive.sqlite'}", "hosts": hosts, "monitor": False,
              "booking_horizon": "400d"}  # fmt: skip
    server = JupyterServer(config, {"tok-bench": {"name": "bench"}})
    try:
        os.environ["GPUHIVE_URL"] = f"http://127.0.0.1:{server.port}/"
        os.environ["GPUHIVE_TOKEN"] = "tok-bench"
        shell = InteractiveShell.instance()
        shell.run_line_magic("load_ext", "jupyter_gpuhive")
        client = HiveClient()
        floor, reserve, status = [], [], []
        base = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0)
        for i in range(calls):
            t0 = time.perf_counter()
            client.me()
            floor.append(time.perf_counter() - t0)
            start = (base + timedelta(days=1, hours=i)).isoformat()
            line = f"node{i % 16:02d}:{i % 4} --start {start} --for 30m --no-pin"
            with capture_output():
                t0 = time.perf_counter()
                shell.run_line_magic("gpureserve", line)
                reserve.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                shell.run_line_magic("gpustatus", "")
                status.append(time.perf_counter() - t0)
    finally:
        server.stop()
    result = {
        "calls": calls,
        "floor_p50_ms": ms(floor),
        "gpureserve_p50_ms": ms(reserve),
        "gpureserve_p95_ms": ms(reserve, 95),
        "gpustatus_p50_ms": ms(status),
        "gpustatus_p95_ms": ms(status, 95),
        "gpureserve_ratio_to_floor": round(
            statistics.median(reserve) / statistics.median(floor), 2
        ),
        "quick": args.quick,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
