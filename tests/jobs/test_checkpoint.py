"""The checkpoint helper and the templates' `resume` option, on real processes and signals.

The job scripts run with the system's own Python (no jupyter_gpuhive on it), from the command
and environment the template renders: the helper reaches them only the way it reaches a host.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_gpuhive.jobs import TemplateError, get_template
from jupyter_gpuhive.jobs.checkpoint import Checkpoint, first_process, signal_number
from jupyter_gpuhive.jobs.resume import EVERY_ENV, SOURCE_ENV

HOST_PYTHON = "/usr/bin/python3"
STEPS = 120

# Sums i*i over STEPS steps, one step every 10 ms, printing each step it finishes.
SUM_JOB = f"""
import sys, time
from gpuhive_checkpoint import Checkpoint
ckpt = Checkpoint()
state = ckpt.resume({{"step": 0, "total": 0}})
print("start", state["step"], ckpt.restarts, ckpt.writer, flush=True)
while state["step"] < {STEPS}:
    state["total"] += state["step"] ** 2
    state["step"] += 1
    print("step", state["step"], flush=True)
    time.sleep(0.01)
    ckpt.step(state)
print("total", state["total"], "saves", ckpt.saves, flush=True)
"""


def _base_env(tmp_path: Path) -> dict[str, str]:
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8"}


def _start(command: str, env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["bash", "-c", command],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # a process group of its own, as a task in screen has
    )


def _read_until(process: subprocess.Popen[str], wanted: str, lines: list[str]) -> None:
    assert process.stdout is not None
    for line in process.stdout:
        lines.append(line.rstrip("\n"))
        if line.startswith(wanted):
            return
    raise AssertionError(f"the job ended before {wanted!r}: {lines}")


def _finish(process: subprocess.Popen[str], lines: list[str]) -> int:
    out, _ = process.communicate(timeout=60)
    lines.extend(out.splitlines())
    return process.returncode


def _rendered(template: str, command: str, hosts, **options):  # type: ignore[no-untyped-def]
    tasks = get_template(template).render(
        "ckpt", command, hosts(1), options={"resume": True, **options}
    )
    assert len(tasks) == 1
    return tasks[0]


def test_signal_mid_run_saves_then_restart_resumes_with_the_right_total(tmp_path, hosts):
    script = tmp_path / "job.py"
    script.write_text(SUM_JOB)
    # The host's Python knows nothing of gpuhive: the helper must arrive with the task.
    probe = subprocess.run(
        [HOST_PYTHON, "-I", "-c", "import jupyter_gpuhive"], capture_output=True, check=False
    )
    assert probe.returncode != 0
    task = _rendered(
        "tensorflow", f"{HOST_PYTHON} {script}", hosts, checkpoint_every=1000, chief=True
    )
    checkpoints = tmp_path / "ckpt"
    env = {
        **_base_env(tmp_path),
        **task.env,
        "GPUHIVE_CHECKPOINT_DIR": str(checkpoints),
        "GPUHIVE_PREEMPT_SIGNAL": "SIGUSR1",
        "GPUHIVE_GRACE_S": "5",
        "GPUHIVE_RESTARTS": "0",
    }
    first = _start(task.command, env, tmp_path)
    lines: list[str] = []
    _read_until(first, "step 30", lines)
    os.killpg(first.pid, signal.SIGUSR1)  # the whole process group, as the reclaim does
    status = _finish(first, lines)
    assert status == 128 + signal.SIGUSR1, lines
    last_step = max(int(line.split()[1]) for line in lines if line.startswith("step"))
    assert 30 <= last_step < STEPS
    with open(checkpoints / "checkpoint", "rb") as stream:
        saved = pickle.load(stream)
    # Saved at the first step boundary after the signal: no finished step is lost.
    assert saved["step"] == last_step
    assert (checkpoints / ".gpuhive" / "gpuhive_checkpoint.py").is_file()

    second = _start(task.command, {**env, "GPUHIVE_RESTARTS": "1"}, tmp_path)
    rest: list[str] = []
    assert _finish(second, rest) == 0, rest
    assert rest[0] == f"start {last_step} 1 True"
    assert rest[-1] == f"total {sum(i * i for i in range(STEPS))} saves 0"
    assert sum(1 for line in rest if line.startswith("step")) == STEPS - last_step


TORCH_JOB = """
import sys, torch
from gpuhive_checkpoint import Checkpoint

def setup():
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    data = torch.randn(64, 8)
    return model, optimizer, data, data @ torch.arange(8.0).unsqueeze(1)

def train(model, optimizer, data, target):
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(data), target).backward()
    optimizer.step()

def weights(model):
    return " ".join(f"{w:.9e}" for w in model.weight.detach().flatten().tolist())

model, optimizer, data, target = setup()
ckpt = Checkpoint(dump=torch.save, load=torch.load)
state = ckpt.resume()
step = 0
if state is not None:
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    step = state["step"]
print("start", step, flush=True)
while step < 60:
    train(model, optimizer, data, target)
    step += 1
    print("step", step, flush=True)
    if step >= 20 and ckpt.restarts == 0:
        import time; time.sleep(0.05)
    ckpt.step({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step})
print("weights", weights(model), flush=True)
model, optimizer, data, target = setup()  # the same 60 steps without a stop, for reference
for _ in range(60):
    train(model, optimizer, data, target)
print("straight", weights(model), flush=True)
"""


def test_pytorch_state_dicts_resume_to_the_same_weights(tmp_path, hosts):
    pytest.importorskip("torch")
    script = tmp_path / "train.py"
    script.write_text(TORCH_JOB)
    task = _rendered("pytorch", f"{sys.executable} {script}", hosts, mode="env", checkpoint_every=7)
    env = {**_base_env(tmp_path), **task.env, "GPUHIVE_CHECKPOINT_DIR": str(tmp_path / "c")}
    first = _start(task.command, env, tmp_path)
    lines: list[str] = []
    _read_until(first, "step 25", lines)
    os.killpg(first.pid, signal.SIGTERM)  # the default preemption signal
    assert _finish(first, lines) == 128 + signal.SIGTERM, lines
    resumed = _start(task.command, {**env, "GPUHIVE_RESTARTS": "1"}, tmp_path)
    rest: list[str] = []
    assert _finish(resumed, rest) == 0, rest
    stopped_at = max(int(line.split()[1]) for line in lines if line.startswith("step"))
    assert rest[0] == f"start {stopped_at}"
    assert rest[-2].startswith("weights ") and rest[-1].startswith("straight ")
    # Bit for bit: the model and the optimizer's momentum buffers both came back.
    assert rest[-2].split()[1:] == rest[-1].split()[1:]


SLOW_SAVE = """
import sys, time
from jupyter_gpuhive.jobs.checkpoint import Checkpoint

def dump(state, stream):
    stream.write(b"garbage that is not a pickle" * 1000)
    stream.flush()
    if state["step"] == 2:
        print("saving", flush=True)
        time.sleep(60)
    import pickle
    stream.seek(0)
    stream.truncate()
    pickle.dump(state, stream)

ckpt = Checkpoint(every=1, dump=dump, directory=sys.argv[1])
state = {"step": 0}
for _ in range(3):
    state["step"] += 1
    ckpt.step(state)
"""


def test_a_kill_during_a_save_keeps_the_previous_checkpoint(tmp_path):
    env = {**_base_env(tmp_path), "PYTHONPATH": str(Path(__file__).parents[2])}
    process = subprocess.Popen(
        [sys.executable, "-c", SLOW_SAVE, str(tmp_path / "c")],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "saving"
    process.kill()
    process.wait(timeout=10)
    leftovers = [p.name for p in (tmp_path / "c").iterdir() if p.name.endswith(".partial")]
    assert len(leftovers) == 1  # the interrupted save, under a temporary name
    ckpt = Checkpoint(directory=str(tmp_path / "c"), writer=True)
    try:
        assert ckpt.resume() == {"step": 1}
        assert ckpt.resumed
        assert sorted(p.name for p in (tmp_path / "c").iterdir()) == ["checkpoint"]
    finally:
        signal.signal(ckpt.signal, signal.SIG_DFL)


def test_environment_and_arguments(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUHIVE_CHECKPOINT_DIR", str(tmp_path))
    monkeypatch.setenv("GPUHIVE_PREEMPT_SIGNAL", "SIGUSR2")
    monkeypatch.setenv("GPUHIVE_RESTARTS", "2")
    monkeypatch.setenv("GPUHIVE_GRACE_S", "30")
    monkeypatch.setenv(EVERY_ENV, "5")
    before = signal.getsignal(signal.SIGUSR2)
    ckpt = Checkpoint()
    try:
        assert (ckpt.directory, ckpt.signal, ckpt.restarts, ckpt.grace_s, ckpt.every) == (
            str(tmp_path),
            signal.SIGUSR2,
            2,
            30.0,
            5,
        )
        assert ckpt.resume("fresh") == "fresh" and not ckpt.resumed
        for step in range(1, 5):
            ckpt.step({"step": step})
        assert ckpt.saves == 0
        ckpt.step({"step": 5})
        assert ckpt.saves == 1
        os.kill(os.getpid(), signal.SIGUSR2)
        assert ckpt.preempted
        with pytest.raises(SystemExit) as stopped:
            ckpt.step({"step": 6})
        assert stopped.value.code == 128 + signal.SIGUSR2
        assert Checkpoint(directory=str(tmp_path)).resume() == {"step": 6}
    finally:
        signal.signal(signal.SIGUSR2, before)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@pytest.mark.parametrize(
    ("kwargs", "env", "message"),
    [
        ({"every": 0}, {}, "every must be at least 1"),
        ({"name": "../x"}, {}, "plain file name"),
        ({"signal_name": "SIGKILL"}, {}, "must be one of SIGTERM"),
        ({}, {"GPUHIVE_PREEMPT_SIGNAL": "HUP"}, "must be one of"),
        ({}, {"GPUHIVE_RESTARTS": "two"}, "GPUHIVE_RESTARTS must be a whole number"),
    ],
)
def test_bad_arguments_and_environment(tmp_path, monkeypatch, kwargs, env, message):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=message):
        Checkpoint(directory=str(tmp_path), **kwargs)


def test_signal_names_and_which_process_writes(monkeypatch):
    assert signal_number("term") == signal.SIGTERM
    assert signal_number("SIGUSR1") == signal.SIGUSR1
    for name in ("RANK", "TF_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    assert first_process()
    monkeypatch.setenv("RANK", "3")
    assert not first_process()
    monkeypatch.delenv("RANK")
    cluster = {"worker": ["a:1", "b:1"]}
    monkeypatch.setenv(
        "TF_CONFIG",
        f'{{"cluster": {cluster}, "task": {{"type": "worker", "index": 0}}}}'.replace("'", '"'),
    )
    assert first_process()
    monkeypatch.setenv(
        "TF_CONFIG",
        '{"cluster": {"chief": ["a:1"], "worker": ["b:1"]}, "task": {"type": "worker", "index": 0}}',
    )
    assert not first_process()


def test_resume_option_is_checked_and_its_env_reserved(hosts):
    pytorch = get_template("pytorch")
    plain = pytorch.render("j", "train.py", hosts(1), options={"mode": "env"})
    assert SOURCE_ENV not in plain[0].env and "gpuhive_checkpoint" not in plain[0].command
    with pytest.raises(TemplateError, match="checkpoint_every must be between 1"):
        pytorch.render("j", "x", hosts(1), options={"resume": True, "checkpoint_every": 0})
    with pytest.raises(
        TemplateError, match="option resume of the tensorflow template must be bool"
    ):
        get_template("tensorflow").render("j", "x", hosts(1), options={"resume": "yes"})
    with pytest.raises(TemplateError, match=f"{EVERY_ENV} is set by the template"):
        pytorch.render("j", "x", hosts(1), env={EVERY_ENV: "3"})
    torchrun = pytorch.render("j", "train.py", hosts(2), options={"resume": True})
    assert torchrun[0].env[EVERY_ENV] == "100"
    assert torchrun[0].command.endswith(
        "exec bash -c 'torchrun --nnodes 1 --nproc-per-node 2 "
        "--node-rank 0 --master-addr 10.0.0.1 --master-port "
        f"{torchrun[0].variables['master_port']} train.py'"
    )
