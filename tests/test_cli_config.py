"""The CLI sees the demo's cluster (#48 item 8): the commands `make demo` prints run as real
subprocesses with `--config PATH`, list the demo's hosts, and make a simulated GPU fail and
recover; `--config` is documented, and `sim --help` names commands that exist."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_gpuhive.cli.demo import cli_hint, demo_hosts, write_config
from jupyter_gpuhive.sim.inventory import load_config

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the demo's hosts run as root here")


def cli(home: Path, command: str) -> subprocess.CompletedProcess[str]:
    """`jupyter gpuhive …` as a person types it, in an empty Jupyter config dir."""
    argv = shlex.split(command)
    assert argv[:2] == ["jupyter", "gpuhive"], command
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(home / "cfg"),
           "JUPYTER_DATA_DIR": str(home / "data")}  # fmt: skip
    return subprocess.run([sys.executable, "-m", "jupyter_gpuhive.cli.main", *argv[2:]],
                          env=env, capture_output=True, text=True, timeout=120, check=False)  # fmt: skip


def test_the_demos_printed_commands_see_its_hosts_and_fail_a_gpu(tmp_path: Path) -> None:
    hosts = demo_hosts(tmp_path / "demo")
    config = write_config(tmp_path / "demo", hosts)
    commands = dict(
        (c.split(" --config")[0], c) for c in re.findall(r"`(jupyter gpuhive [^`]+)`", cli_hint(config))
    )  # fmt: skip
    assert set(commands) >= {"jupyter gpuhive hosts", "jupyter gpuhive sim fail gpu2:1",
                             "jupyter gpuhive sim recover gpu2:1"}  # fmt: skip

    listed = cli(tmp_path, commands["jupyter gpuhive hosts"])
    assert listed.returncode == 0, listed.stderr
    assert {"gpu1", "gpu2", "gpu3"} <= set(re.findall(r"^(gpu\d)\s", listed.stdout, re.M))
    assert "No GPU hosts" not in listed.stdout

    failed = cli(tmp_path, commands["jupyter gpuhive sim fail gpu2:1"])
    assert failed.returncode == 0, failed.stderr
    assert "gpu2:1 now fails its health check" in failed.stdout
    gpu2 = hosts[1].config_path
    assert [g.fault for g in load_config(gpu2).gpus] == [None, "ecc", None, None]
    healed = cli(tmp_path, commands["jupyter gpuhive sim recover gpu2:1"])
    assert healed.returncode == 0, healed.stderr
    assert [g.fault for g in load_config(gpu2).gpus] == [None] * 4

    for bad, words in ((f"sim fail gpu9:1 --config {config}", "no host 'gpu9'"),
                       (f"sim fail gpu2:x --config {config}", "host:index"),
                       (f"sim fail gpu2:7 --config {config}", "no GPU 7"),
                       (f"hosts --config {tmp_path / 'missing.py'}", "no such file")):  # fmt: skip
        done = cli(tmp_path, f"jupyter gpuhive {bad}")
        assert done.returncode == 1 and words in done.stderr, (bad, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_config_is_documented_and_help_names_real_commands(tmp_path: Path) -> None:
    for command in ("hosts", "hosts add", "doctor", "sim up", "sim fail"):
        shown = cli(tmp_path, f"jupyter gpuhive {command} --help")
        assert "--config=" in shown.stdout and "config file to read" in shown.stdout, command
        assert "Unrecognized alias" not in shown.stderr, command
    shown = cli(tmp_path, "jupyter gpuhive sim --help").stdout
    assert "jupyter-gpuhive-sim" not in shown and "jupyter gpuhive sim CMD" in shown
    assert "fail" in shown and "recover" in shown
