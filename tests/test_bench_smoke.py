"""The benchmark smoke runner (tests/support/bench_smoke.py) against tiny fake benchmarks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support import bench_smoke

ROOT = Path(__file__).resolve().parents[1]

FAKES = {
    "good": 'import json, sys\nassert sys.argv[1:] == ["--smoke"]\nprint("working")\n'
    'print(json.dumps({"ms": 1.5, "nested": {"n": 2}}))\n',
    "crash": 'print("starting")\nraise RuntimeError("device_id must be the physical GPU")\n',
    "null": 'import json\nprint(json.dumps({"ms": 1.5, "baseline_s": None}))\n',
    "deepnull": 'import json\nprint(json.dumps({"ms": 1.5, "api": {"p99_ms": None}}))\n',
    "nan": 'import json\nprint(json.dumps({"ms": float("nan")}))\n',
    "notjson": 'print("all done")\n',
    "notobject": "print('[1, 2]')\n",
    "exits": 'import json, sys\nprint(json.dumps({"ms": 1}))\nsys.exit(3)\n',
    "hangs": "import time\ntime.sleep(60)\n",
}


def run_runner(folder: Path, *names: str) -> tuple[int, list[str]]:
    """Run the runner as `make bench-smoke` does, on `folder`; (exit status, output lines)."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.bench_smoke", str(folder), "--timeout", "5",
         "--only", *names],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    return done.returncode, done.stdout.strip().splitlines()


def test_the_runner_fails_on_a_crash_a_null_figure_and_a_bad_last_line(tmp_path: Path) -> None:
    for name, text in FAKES.items():
        (tmp_path / f"{name}.py").write_text(text)
    (tmp_path / "sweep_sshd.py").write_text("raise SystemExit(1)\n")  # a fixture: never run
    status, lines = run_runner(tmp_path, *FAKES, "sweep_sshd")
    assert status == 1, lines
    summary = json.loads(lines[-1])
    assert summary["benchmarks"] == len(FAKES) and summary["failed"] == len(FAKES) - 1, summary
    why = summary["failures"]
    assert "good" not in why and "sweep_sshd" not in why
    assert why["crash"] == "exit status 1"
    assert why["null"] == "null figure: baseline_s"
    assert why["deepnull"] == "null figure: api.p99_ms"
    assert why["nan"] == "null figure: ms"
    assert why["notjson"].startswith("last line is not JSON")
    assert why["notobject"].startswith("last line is not one JSON object")
    assert why["exits"] == "exit status 3"
    assert why["hangs"] == "timed out after 5 s"
    assert set(summary["per_benchmark_s"]) == set(FAKES)
    shown = {line.split()[0]: line for line in lines[:-1] if not line.startswith("    |")}
    assert shown["good"].endswith(" ok") and "null figure" in shown["null"]
    assert any("device_id must be the physical GPU" in line for line in lines)  # the tail shown


def test_the_runner_passes_when_every_benchmark_does(tmp_path: Path) -> None:
    (tmp_path / "good.py").write_text(FAKES["good"])
    status, lines = run_runner(tmp_path, "good")
    assert status == 0, lines
    assert json.loads(lines[-1])["failed"] == 0


def test_every_benchmark_has_a_smoke_size_and_the_fixtures_exist() -> None:
    folder = ROOT / "benchmarks"
    assert all((folder / f"{name}.py").exists() for name in bench_smoke.FIXTURES)
    found = bench_smoke.benchmarks(folder)
    assert len(found) >= 13
    # its own --smoke, or the kernel benchmarks' shared options (benchmarks.kernels.arguments)
    shared = "from benchmarks.kernels import"
    missing = [
        p.name
        for p in found
        if '"--smoke"' not in p.read_text()
        and not (shared in p.read_text() and "arguments(" in p.read_text())
    ]
    assert missing == []
