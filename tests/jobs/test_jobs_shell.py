"""Real shells (sh, bash) and real GNU screen run the commands: every value arrives verbatim."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from jupyter_gpuhive.hosts.runners.screen import ScreenRunner, screen_command
from jupyter_gpuhive.jobs import (
    GpuSlot,
    TaskSpec,
    TemplateError,
    get_template,
    session_name,
    shell_command,
    task_script,
)
from jupyter_gpuhive.jobs.commands import env_file, env_path
from tests.support.waiting import wait_for

NASTY = [
    "it's",
    'say "hi"',
    "$(touch pwned-subst)",
    "`touch pwned-backtick`",
    "a; touch pwned-semicolon",
    "x && touch pwned-and",
    "a | touch pwned-pipe",
    "line1\nline2\n",
    "ünïcødé ☃ 日本",
    " two  spaces ",
    "",
    "$HOME ${PATH}",
    "back\\slash\\",
    "{braces} {{x}}",
    "-n",
    "*",
    "~",
    "'\"'\"'",
    "# comment",
    "> redirect",
    "\t tab",
]

PROBE = """\
import json, os, sys
print(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(), "env": dict(os.environ)}))
"""

SHELLS = [s for s in ("sh", "bash", "dash") if shutil.which(s)]


@pytest.fixture
def probe(tmp_path: Path) -> Path:
    """An executable that prints its arguments, working directory and environment as JSON."""
    path = tmp_path / "probe"
    path.write_text(f"#!{sys.executable}\n{PROBE}")
    path.chmod(0o755)
    return path


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A working directory whose name needs quoting."""
    path = tmp_path / "work dir 'q' \"d\" $(x) `y` ; & \n ü"
    path.mkdir()
    return path


def nasty_host(count: int, name: str = "h'ost $(x)", address: str = "127.0.0.1"):
    slots = [GpuSlot(name, address, i, f"GPU-{address}-{i}") for i in range(count)]
    return (name, address, slots)


def run(shell: str, line: str, cwd: Path) -> dict:
    result = subprocess.run(
        [shell, "-c", line], cwd=cwd, capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 0, result.stderr
    assert not list(cwd.glob("pwned*")), "a value was executed by the shell"
    return json.loads(result.stdout)


def variables() -> dict[str, str]:
    return {f"v{i}": value for i, value in enumerate(NASTY)}


def command(probe: Path) -> str:
    fields = " ".join(f"{{v{i}}}" for i in range(len(NASTY)))
    return f"{shlex.quote(str(probe))} {{job}} {{host}} {fields}"


@pytest.mark.parametrize("shell", SHELLS)
def test_plain_values_arrive_verbatim(shell, probe, workdir, tmp_path):
    job = "job 'x' $(touch pwned-job) ; `y` ü\n"
    env = {f"E{i}": value for i, value in enumerate(NASTY)}
    [task] = get_template("plain").render(
        job, command(probe), [nasty_host(2)], variables(), env=env, workdir=str(workdir)
    )
    out = run(shell, shell_command(task), tmp_path)
    assert out["argv"] == [job, "h'ost $(x)", *NASTY]
    assert out["cwd"] == str(workdir)
    for name, value in env.items():
        assert out["env"][name] == value
    assert out["env"]["CUDA_VISIBLE_DEVICES"] == "GPU-127.0.0.1-0,GPU-127.0.0.1-1"
    assert out["env"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert not list(workdir.glob("pwned*"))


def test_inline_python_with_escaped_braces(tmp_path):
    template = (
        f"{shlex.quote(sys.executable)} -c "
        "'import sys,json; print(json.dumps({{\"args\": sys.argv[1:]}}))' {x} {y}"
    )
    for value in NASTY:
        [task] = get_template("plain").render(
            "j", template, [nasty_host(1)], {"x": value, "y": "$(touch pwned)"}
        )
        out = run("bash", shell_command(task), tmp_path)
        assert out == {"args": [value, "$(touch pwned)"]}


def test_pytorch_prefix_and_env_arrive_verbatim(probe, tmp_path):
    address = "10.0.0.1'; touch pwned-addr; '"
    tasks = get_template("pytorch").render(
        "j",
        "train.py {v2} {v7}",
        [nasty_host(2, address=address), nasty_host(1, name="second", address="b")],
        variables(),
        options={"torchrun": str(probe), "master_port": 29511},
    )
    out = run("bash", shell_command(tasks[1]), tmp_path)
    assert out["argv"] == [
        "--nnodes",
        "2",
        "--nproc-per-node",
        "1",
        "--node-rank",
        "1",
        "--master-addr",
        address,
        "--master-port",
        "29511",
        "train.py",
        NASTY[2],
        NASTY[7],
    ]
    assert out["env"]["MASTER_ADDR"] == address
    assert out["env"]["WORLD_SIZE"] == "3"


def test_tf_config_with_odd_address_is_valid_json_in_the_environment(probe, tmp_path):
    address = "x\" y'$(z)"
    tasks = get_template("tensorflow").render(
        "j", shlex.quote(str(probe)), [nasty_host(1, address=address)]
    )
    out = run("sh", shell_command(tasks[0]), tmp_path)
    assert json.loads(out["env"]["TF_CONFIG"]) == {
        "cluster": {"worker": [f"{address}:2222"]},
        "task": {"type": "worker", "index": 0},
    }


def test_nul_bytes_are_refused():
    task = TaskSpec("h", "a", (), "true", {"A": "x\0y"}, {})
    with pytest.raises(TemplateError, match="NUL"):
        shell_command(task)
    with pytest.raises(TemplateError, match="NUL"):
        get_template("plain").render("j\0", "t", [nasty_host(1)])


def test_session_names():
    assert session_name("train-resnet_2.1", 3) == "gpuhive-train-resnet_2.1-3"
    odd = session_name("my job; rm -rf / 'ü'", 0)
    assert odd.startswith("gpuhive-my_job_rm_-rf.")
    assert odd.endswith("-0")
    assert all(c.isascii() and (c.isalnum() or c in "_.-") for c in odd)
    # Different names that sanitize alike still get different sessions.
    assert session_name("a b", 0) != session_name("a_b", 0) != session_name("a/b", 0)
    assert len(session_name("x" * 500, 12)) < 80
    assert session_name("", 1).startswith("gpuhive-job")


def test_screen_command_refuses_unsafe_session_names():
    task = TaskSpec("h", "a", (), "true", {}, {})
    with pytest.raises(TemplateError, match="session name"):
        screen_command("bad name", task_script(task, "/tmp/log", "/tmp/exit"))


# --- real GNU screen -------------------------------------------------------------------------

screen_only = pytest.mark.skipif(shutil.which("screen") is None, reason="GNU screen not installed")


def written(path: Path, timeout: float = 20) -> str:
    """What a task wrote to `path` (its exit file), once it is there."""
    return wait_for(lambda: path.exists() and path.read_text(), timeout, f"{path}", interval=0.05)


def session_pid(name: str) -> int | None:
    listing = subprocess.run(["screen", "-ls"], capture_output=True, text=True, check=False).stdout
    for line in listing.splitlines():
        first = line.strip().split("\t")[0]
        pid, _, rest = first.partition(".")
        if rest == name:
            return int(pid)
    return None


def screened(session: str, task: TaskSpec, log: Path, exit_file: Path, clean: bool = False) -> str:
    """The screen command line, with the task's env file written as the start script would."""
    env = Path(env_path(str(exit_file)))
    env.write_text(env_file(task))
    keep = ScreenRunner.kept_names
    return screen_command(session, task_script(task, str(log), str(exit_file), clean=clean,
                                               keep=keep))  # fmt: skip


@pytest.fixture
def screen_session():
    """A unique screen session name, quit at the end of the test whatever happened."""
    name = session_name(f"test-{os.getpid()}-{uuid.uuid4().hex[:8]}", 0)
    yield name
    subprocess.run(["screen", "-S", name, "-X", "quit"], capture_output=True, check=False)


@screen_only
@pytest.mark.parametrize("clean", [False, True])
def test_screen_values_arrive_verbatim(probe, workdir, tmp_path, screen_session, clean):
    job = "job 'x' $(touch pwned-job) ; `y` ü"
    env = {f"E{i}": value for i, value in enumerate(NASTY)}
    [task] = get_template("plain").render(
        job, command(probe), [nasty_host(1)], variables(), env=env, workdir=str(workdir)
    )
    log = tmp_path / "logs 'l' $(x)" / "task 0.log"
    log.parent.mkdir()
    exit_file = tmp_path / "logs 'l' $(x)" / "task 0.exit"
    line = screened(screen_session, task, log, exit_file, clean)
    assert "E1" not in line  # the environment is in the env file only
    outer = {**os.environ, "OUTER_MARK": "from-the-caller"}
    subprocess.run(["sh", "-c", line], cwd=tmp_path, check=True, timeout=30, env=outer)
    assert written(exit_file).strip() == "0"
    out = json.loads(log.read_text())
    assert out["argv"] == [job, "h'ost $(x)", *NASTY]
    assert out["cwd"] == str(workdir)
    for name, value in env.items():
        assert out["env"][name] == value
    assert out["env"]["STY"].endswith(screen_session)
    assert ("OUTER_MARK" in out["env"]) is not clean  # clean: an empty environment plus ours
    assert not list(tmp_path.rglob("pwned*"))


@screen_only
def test_screen_keeps_a_failing_exit_status_and_stderr(tmp_path, screen_session):
    [task] = get_template("plain").render("j", "echo out; echo err >&2; exit 7", [nasty_host(1)])
    log, exit_file = tmp_path / "log", tmp_path / "exit"
    subprocess.run(["sh", "-c", screened(screen_session, task, log, exit_file)])
    assert written(exit_file).strip() == "7"
    assert log.read_text().splitlines() == ["out", "err"]


@screen_only
def test_screen_sigint_to_the_task_group_still_writes_the_exit_file(tmp_path, screen_session):
    [task] = get_template("plain").render("j", "echo started; exec sleep 60", [nasty_host(1)])
    log, exit_file = tmp_path / "log", tmp_path / "exit"
    subprocess.run(["sh", "-c", screened(screen_session, task, log, exit_file)])
    wait_for(lambda: log.exists() and "started" in log.read_text(), 20, "the task to start", 0.05)
    pid = session_pid(screen_session)
    assert pid is not None
    child = subprocess.run(
        ["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True, check=True
    ).stdout.split()[0]
    pgid = os.getpgid(int(child))
    os.killpg(pgid, signal.SIGINT)
    assert written(exit_file).strip() == str(128 + signal.SIGINT)
    assert log.read_text().strip() == "started"
