"""Job builder and job list: exact requests, errors in words, real jobs on simulated hosts.

The first tests use a recording stand-in for the client (what each action sends); the rest run
against a real server in a subprocess with two simulated local hosts, where jobs really run as
the UNIX user `hivejob1` in GNU screen.
"""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import nbformat
import numpy as np
import pytest
from nbclient import NotebookClient

from jupyter_gpuhive.notebook.client import HiveClient, HiveClientError
from jupyter_gpuhive.sim.cluster import LocalSimHost, ensure_user
from jupyter_gpuhive.widgets import job_builder, jobs
from jupyter_gpuhive.widgets.builder_model import JobBuilderModel
from jupyter_gpuhive.widgets.job_form import FormError, parse_pairs, parse_sweeps
from jupyter_gpuhive.widgets.joblist_model import JobListModel
from jupyter_gpuhive.widgets.jobs_view import JobBuilderView
from jupyter_gpuhive.widgets.overview_model import FREE, MINE, QUEUED, OverviewModel
from tests.conftest import USERS
from tests.support.server import JupyterServer
from tests.support.waiting import wait_for
from tests.widgets.test_examples import EXAMPLES, _text

UTC = timezone.utc
OWNER = "hivejob1"  # a real UNIX user; the gpuhive user of the same name owns the jobs
OWNER_TOKEN = "tok-hivejob1"
SIM_ENV = ("PATH", "GPUHIVE_SIM_HOST", "GPUHIVE_SIM_CONFIG")
NOW = datetime(2030, 3, 4, 10, 30, tzinfo=UTC)

TEMPLATES = [
    {"name": "plain", "description": "Runs the command once per host.", "fields": ["task"],
     "options": {"per_gpu": {"help": "one task per GPU", "default": False, "type": "bool"}},
     "example": "python train.py --lr {lr}"},
    {"name": "pytorch", "description": "PyTorch distributed.", "fields": ["rank"],
     "options": {"mode": {"help": "torchrun or env", "default": "torchrun", "type": "str"},
                 "master_port": {"help": "port", "default": None, "type": "int"}},
     "example": "train.py --lr {lr}"},
]  # fmt: skip


class Recorder:
    """A client stand-in: canned replies by (method, path), every call recorded."""

    def __init__(self, replies: dict[tuple[str, str], Any]) -> None:
        self.replies = replies
        self.calls: list[tuple[str, str, Any, Any]] = []

    def request(self, method: str, path: str, body: Any = None, params: Any = None) -> Any:
        self.calls.append((method, path, body, params))
        reply = self.replies.get((method, path))
        if isinstance(reply, Exception):
            raise reply
        return reply(body) if callable(reply) else reply


def stub_builder(
    extra: dict[tuple[str, str], Any] | None = None,
) -> tuple[JobBuilderModel, Recorder]:
    hosts = [{"name": h, "gpus": [{"id": f"{h}:{i}", "index": i} for i in range(2)]}
             for h in ("gpu2", "gpu1")]  # fmt: skip
    mine = {"id": 7, "owner": "ann", "title": "exp", "gpus": ["gpu2:1"], "status": "active",
            "start": (NOW - timedelta(hours=1)).isoformat(),
            "end": (NOW + timedelta(hours=1)).isoformat(), "cancelled_at": None}  # fmt: skip
    over = {**mine, "id": 6, "end": (NOW - timedelta(minutes=1)).isoformat()}
    job = {"id": 3, "name": "n", "status": "running", "tasks": [
        {"host": "gpu1", "gpu_indices": [0, 1]}]}  # fmt: skip
    client = Recorder({
        ("GET", "me"): {"name": "ann"},
        ("GET", "templates"): {"templates": TEMPLATES},
        ("GET", "hosts"): {"hosts": hosts},
        ("GET", "reservations"): {"reservations": [mine, over]},
        ("POST", "jobs/preview"): {"tasks": [{"index": 0, "host": "gpu1", "gpus": ["gpu1:0"],
                                              "role": "", "env": {"A": "1"}, "command": "c",
                                              "shell": "cd ~ && c"}]},
        ("POST", "jobs"): lambda body: {**job, "status": "pending" if not body["start"] else
                                        "running"},
        **(extra or {}),
    })  # fmt: skip
    model = JobBuilderModel(client, now=lambda: NOW)
    model.load()
    return model, client


# --- plain parsing ---------------------------------------------------------------------


def test_sweeps_and_variables_are_parsed_or_refused_in_words() -> None:
    assert parse_sweeps("lr=0.1, 0.01\n# a comment\nbs=32;seed=1,2,3") == {
        "lr": ["0.1", "0.01"], "bs": ["32"], "seed": ["1", "2", "3"]}  # fmt: skip
    assert parse_sweeps("  ") == {}
    assert parse_pairs("word=it's = fine\n\nn=1") == {"word": "it's = fine", "n": "1"}
    for bad, words in (("lr", "name=value1,value2"), ("lr=0.1,,0.2", "empty value"),
                       ("lr=1\nlr=2", "twice"), ("2x=1", "name=value1")):  # fmt: skip
        with pytest.raises(FormError, match=words):
            parse_sweeps(bad)
    with pytest.raises(FormError, match="name=value"):
        parse_pairs("just text")


def test_builder_sends_exact_bodies_for_preview_and_each_way_to_run() -> None:
    model, client = stub_builder()
    assert model.me == "ann" and list(model.hosts) == ["gpu1", "gpu2"]
    assert [r["id"] for r in model.reservations] == [7]  # the ended one is not offered
    model.choose_template("pytorch")
    assert model.form.command == "train.py --lr {lr}"  # the example fills an empty command
    info = model.template_info()
    assert info["description"] == "PyTorch distributed." and "mode" in info["options"]
    model.pick_gpus(["gpu2:0", "gpu1:1"])
    assert model.form.gpus == ["gpu1:1", "gpu2:0"]  # hosts-list order
    model.edit(name="ddp", variables="epochs=3", sweeps="lr=0.1,0.01",
               options={"mode": "env", "master_port": "29555"}, env="NCCL_DEBUG=INFO",
               walltime="2h")  # fmt: skip
    expected = {
        "name": "ddp", "description": "", "template": "pytorch", "command": "train.py --lr {lr}",
        "gpus": ["gpu1:1", "gpu2:0"], "options": {"mode": "env", "master_port": 29555},
        "variables": {"epochs": "3"}, "sweep": {"lr": ["0.1", "0.01"]},
        "env": {"NCCL_DEBUG": "INFO"}, "walltime": "2h",
    }  # fmt: skip
    tasks = model.preview()
    assert tasks is not None and model.error == "" and "1 task on gpu1" in model.message
    assert client.calls[-1] == ("POST", "jobs/preview", expected, None)
    assert "#   A=1" in model.preview_text() and "cd ~ && c" in model.preview_text()

    job = model.submit()  # run now
    assert job is not None and client.calls[-1][2] == {**expected, "start": True}
    assert model.message == "Job 3 (n) started on gpu1:0, gpu1:1: running."

    start = NOW + timedelta(hours=3)
    model.edit(mode="schedule", start_at=start)
    model.submit()
    assert client.calls[-1][2] == {**expected, "start": False, "start_at": start.isoformat()}
    assert "scheduled" in model.message and "It starts at" in model.message

    model.edit(mode="queue", start_at=None)
    model.submit()
    assert client.calls[-1][2] == {**expected, "queued": True, "start": False}
    assert model.message.startswith("Job 3 (n) queued on") and "pending" in model.message

    # Defaults are not sent; a reservation replaces the GPUs.
    model.edit(options={"mode": "torchrun", "master_port": ""})
    model.choose_reservation(7)
    assert model.form.gpus == []
    body = model.request("preview")[2]
    assert body["reservation"] == 7 and "gpus" not in body and "options" not in body
    assert "gpu2:1" in model.reservation_label(model.reservations[0])
    model.pick_gpus(["gpu1:0"])  # picking GPUs again forgets the reservation
    assert model.request("preview")[2]["gpus"] == ["gpu1:0"]
    assert "reservation" not in model.request("preview")[2]


def test_builder_shows_form_and_server_errors_in_words() -> None:
    refused = HiveClientError("gpu1:0 is reserved by bob until Tue 12:00; queue the job.", 409)
    model, client = stub_builder({("POST", "jobs"): refused})
    model.choose_template("plain")
    calls = len(client.calls)
    assert model.preview() is None  # no GPUs yet: nothing is sent
    assert model.error == "Could not preview the job: Pick GPUs or one of your reservations."
    model.pick_gpus(["gpu1:0"])
    model.edit(sweeps="lr=0.1,,1")
    assert model.preview() is None and "empty value" in model.error
    model.edit(sweeps="lr=1", variables="lr=2")
    assert model.submit() is None and "both a variable and a sweep" in model.error
    model.edit(variables="", mode="schedule")
    assert model.submit() is None and "time the job should start" in model.error
    assert len(client.calls) == calls
    model.edit(mode="now")
    assert model.submit() is None
    assert model.error == ("Could not submit the job. Conflict: gpu1:0 is reserved by bob until "
                           "Tue 12:00; queue the job.")  # fmt: skip
    with pytest.raises(FormError, match="no option 'nope'"):
        model.set_option("nope", 1)
    with pytest.raises(FormError, match="not one of your current"):
        model.choose_reservation(6)
    model.set_option("per_gpu", "maybe")
    assert model.preview() is None and "yes or no" in model.error


def test_overview_paints_running_queued_jobs_from_now_to_their_walltime() -> None:
    origin = datetime(2030, 3, 4, tzinfo=UTC)
    data = {"start": origin.isoformat(), "slot_seconds": 3600, "slots": 48,
            "gpus": [{"id": f"gpu1:{i}", "host": "gpu1", "index": i,
                      "states": "." * 12 + "m" * 2 + "." * 34,
                      "cells": [None] * 12 + [5, 5] + [None] * 34} for i in range(3)],
            "reservations": {"5": {"owner": "me", "title": "t"}}}  # fmt: skip
    started = (NOW - timedelta(minutes=20)).isoformat()  # 10:10, walltime 4 h → until 14:10
    queued = {"id": 9, "name": "sweep", "owner": "ann", "queued": True, "walltime_s": 4 * 3600,
              "tasks": [{"host": "gpu1", "gpu_indices": [1], "started_at": started}]}  # fmt: skip
    open_ended = {**queued, "id": 10, "walltime_s": None,
                  "tasks": [{"host": "gpu1", "gpu_indices": [2], "started_at": started}]}  # fmt: skip
    model = OverviewModel(None, start=origin.date(), days=2, zone="UTC", now=lambda: NOW)
    model.apply(data, jobs=[queued, open_ended])
    row = model.matrix[1]
    assert list(row[9:16]) == [FREE, QUEUED, QUEUED, MINE, MINE, QUEUED, FREE]  # 10:00-15:00
    assert (model.matrix[2, 10:] != FREE).all() and model.matrix[2, 9] == FREE
    assert (model.matrix[0] != QUEUED).all()
    assert model.describe(1, 10).endswith("queued job 9 of ann — sweep")
    assert model.describe(1, 12).endswith("me — t")


# --- against a real server with simulated hosts ----------------------------------------

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run jobs as a user")


@pytest.fixture(scope="module")
def jobs_url() -> Iterator[str]:
    if os.geteuid() != 0:
        pytest.skip("needs root to run jobs as a user")
    ensure_user(OWNER)
    root = Path(tempfile.mkdtemp(prefix="gpuhive-wjobs-"))
    hosts = []
    for name in ("wjob1", "wjob2"):  # names no other test on this machine simulates
        env = LocalSimHost(name, root / name).env()
        hosts.append({"name": name, "address": "localhost", "transport": "local",
                      "env": {k: env[k] for k in SIM_ENV}})  # fmt: skip
    config = {"db_url": f"sqlite:///{root / 'hive.sqlite'}", "hosts": hosts,
              "poll_interval": 0.3, "site_timezone": "UTC"}  # fmt: skip
    server = JupyterServer(config, {**USERS, OWNER_TOKEN: {"name": OWNER, "groups": []}})
    url = f"http://127.0.0.1:{server.port}/"
    owner = HiveClient(url, OWNER_TOKEN)
    wait_for(lambda: sum(len(h["gpus"]) for h in owner.hosts()) == 8)
    yield url
    for job in owner.request("GET", "jobs", params={"user": OWNER})["jobs"]:
        if job["status"] in ("pending", "starting", "running"):
            owner.request("POST", f"jobs/{job['id']}/stop")
    server.stop()


@pytest.fixture
def owner(jobs_url: str) -> HiveClient:
    return HiveClient(jobs_url, OWNER_TOKEN)


@needs_root
def test_preview_shows_each_tasks_environment_and_server_errors(owner: HiveClient) -> None:
    model = JobBuilderModel(owner)
    model.load()
    assert {"plain", "pytorch", "tensorflow"} <= set(model.templates)
    assert model.all_gpus == [f"wjob{h}:{i}" for h in (1, 2) for i in range(4)]
    model.choose_template("pytorch")
    model.pick_gpus(["wjob1:0", "wjob2:0"])
    model.edit(name="ddp", command="train.py --lr {lr}", sweeps="lr=0.1",
               options={"mode": "env"})  # fmt: skip
    tasks = model.preview()
    assert tasks is not None, model.error
    assert [t["host"] for t in tasks] == ["wjob1", "wjob2"]
    assert [t["env"]["RANK"] for t in tasks] == ["0", "1"]
    assert {t["env"]["WORLD_SIZE"] for t in tasks} == {"2"}
    assert {t["env"]["MASTER_ADDR"] for t in tasks} == {"localhost"}
    assert all("--lr 0.1" in t["shell"] for t in tasks)

    model.edit(command="train.py --lr {lr} --out {missing}")
    assert model.preview() is None and model.tasks == []
    assert model.error.startswith("Could not preview the job. Not accepted:")
    assert "missing" in model.error

    # The view: a checkbox per GPU, the template's help, the preview as text.
    view = JobBuilderView(model)
    assert set(view.gpu_boxes) == set(model.all_gpus)
    assert "PyTorch distributed" in view.info.value and "master_port" in view.info.value
    view.gpu_boxes["wjob2:0"].value = False
    assert model.form.gpus == ["wjob1:0"]
    view.command.value = "train.py --lr {lr}"
    view.preview_button.click()
    assert "MASTER_ADDR=localhost" in view.preview_out.value and view.status.value.startswith("1")
    view.template.value = "tensorflow"
    assert set(view.option_widgets) >= {"chief", "ps", "per_gpu"}
    view.preview()
    assert "TF_CONFIG" in view.preview_out.value


@needs_root
def test_jobs_run_log_into_the_list_and_stop(owner: HiveClient) -> None:
    listing = jobs(owner, live=False, interval=0.3)
    builder = job_builder(owner, template="plain", gpus=["wjob1:0"], jobs=listing)
    m = builder.model
    # Logs live in the owner's ~/.gpuhive/jobs/<id>-<task>.log, which other servers of this
    # test run (with their own job ids) append to as well: look for this run's own words.
    mark = uuid.uuid4().hex[:8]
    m.edit(name="hello", command=f"echo seen-{mark} {{lr}} $CUDA_VISIBLE_DEVICES",
           sweeps="lr=0.1,0.01")  # fmt: skip
    short = m.submit()
    assert short is not None, m.error
    assert len(short["tasks"]) == 2 and short["owner"] == OWNER
    assert listing.model.selected == short["id"]  # the builder hands the job to the list

    lm: JobListModel = listing.model
    wait_for(lambda: (lm.refresh(), lm.job() and lm.job()["status"] == "succeeded")[1])  # type: ignore[index]
    assert lm.log.splitlines()[-1].startswith(f"seen-{mark} 0.1 GPU-")
    assert lm.log_state == "succeeded"
    lm.select(short["id"], task=1)
    assert lm.log.splitlines()[-1].startswith(f"seen-{mark} 0.01 GPU-")
    assert "screen" in lm.attach and f"%gpujob attach {short['id']}" in lm.attach_hint()
    listing.render()
    assert f"seen-{mark} 0.01" in listing.log.value and listing.stop_button.disabled

    assert builder.sweeps.value == "lr=0.1,0.01"  # edits from code show in the widgets
    builder.name.value = "sleeper"  # as typed in the builder
    builder.command.value = f"echo sleeping-{mark}; sleep 120"
    builder.sweeps.value = ""
    builder.submit_button.click()
    sleeper = m.job
    assert sleeper is not None and m.error == "" and "started" in builder.status.value
    listing.start()  # the background poll refreshes the list and the log tail
    wait_for(lambda: f"sleeping-{mark}" in lm.log and lm.job()["status"] == "running")  # type: ignore[index]
    assert not listing.stop_button.disabled
    assert any(r.id == sleeper["id"] and r.status == "running" for r in lm.rows())
    rounds = listing.poller.rounds
    wait_for(lambda: listing.poller.rounds > rounds + 1)
    listing.stop_button.click()
    assert lm.error == "" and lm.message.startswith(f"Job {sleeper['id']} ")
    wait_for(lambda: lm.job()["status"] == "stopped")  # type: ignore[index]
    listing.stop()
    assert listing.poller.last_error == ""
    assert lm.stop() is None and "nothing to stop" in lm.error  # said in words


@needs_root
def test_queue_schedule_and_reservation_choice(owner: HiveClient) -> None:
    m = JobBuilderModel(owner)
    m.load()
    m.choose_template("plain")
    m.pick_gpus(["wjob2:1"])
    m.edit(name="queued", command="sleep 1", mode="queue", walltime="2h")
    queued = m.submit()
    assert queued is not None, m.error
    assert queued["queued"] is True and queued["walltime_s"] == 7200
    assert queued["status"] in ("pending", "starting", "running")  # the queue may admit it

    start = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=5)
    m.edit(name="later", mode="schedule", start_at=start, walltime="")
    later = m.submit()
    assert later is not None and later["status"] == "pending"
    assert datetime.fromisoformat(later["start_at"]) == start
    owner.request("DELETE", f"jobs/{later['id']}")

    held = owner.reserve(title="mine", gpus=["wjob2:3"], start=datetime.now(UTC).isoformat(),
                         duration="1h")  # fmt: skip
    m.load_reservations()
    m.choose_reservation(held["id"])
    m.edit(mode="now")
    assert m.request()[2]["reservation"] == held["id"]
    tasks = m.preview()
    assert tasks is not None and tasks[0]["gpus"] == ["wjob2:3"]
    owner.cancel(held["id"])
    for job in (queued,):
        if owner.request("GET", f"jobs/{job['id']}")["status"] in ("pending", "running"):
            owner.request("POST", f"jobs/{job['id']}/stop")


@needs_root
def test_a_queue_by_count_preview_and_submit_say_what_will_happen(owner: HiveClient) -> None:
    """#48 item 7: not "0 tasks on no host", nor "queued on its GPUs" when none were named."""
    m = JobBuilderModel(owner)
    m.load()
    m.choose_template("plain")
    m.pick_gpus([])
    m.edit(name="counted", command="sleep 1", mode="queue", walltime="1h", gpu_count=2,
           preemptible=True)  # fmt: skip
    assert m.preview() is not None, m.error
    assert m.message == "Queued by count: it runs on 2 GPUs chosen when it starts."
    job = m.submit()
    assert job is not None, m.error
    assert "on 2 GPUs chosen when it starts" in m.message or "on wjob" in m.message, m.message
    assert "its GPUs" not in m.message
    owner.request("POST", f"jobs/{job['id']}/stop")


@needs_root
def test_overview_shows_a_running_queued_job(owner: HiveClient) -> None:
    def none_running() -> bool:  # the jobs earlier tests stopped have ended (a stop takes a sync)
        return not owner.request("GET", "jobs", params={"status": "running"})["jobs"]

    wait_for(none_running, 30, "the earlier tests' jobs to end")
    body = {"name": "q-hold", "template": "plain", "gpus": ["wjob1:2"], "command": "sleep 120",
            "queued": True, "walltime": "1h"}  # fmt: skip
    job = owner.request("POST", "jobs", body)
    try:
        owner.request("POST", f"jobs/{job['id']}/start")
    except HiveClientError as error:  # the queue admitted it first
        assert error.status == 409
    wait_for(lambda: owner.request("GET", f"jobs/{job['id']}")["status"] == "running")
    now = datetime.now(UTC)  # the model's clock too: its today and this hour cannot disagree
    model = OverviewModel(owner, days=1, slot="1h", zone="UTC", now=lambda: now)
    model.load()
    row = model.gpus.index("wjob1:2")
    hour = now.hour
    assert model.matrix[row, hour] == QUEUED
    assert list(model.matrix[row, hour:]).count(QUEUED) in (1, 2)  # until its 1 h walltime ends
    assert f"queued job {job['id']}" in model.describe(row, hour)
    assert np.all(model.matrix[model.gpus.index("wjob1:1")] == FREE)
    owner.request("POST", f"jobs/{job['id']}/stop")


@needs_root
@pytest.mark.parametrize("name", ["queue", "distributed-pytorch", "tensorflow"])
def test_job_examples_run_top_to_bottom(
    name: str, jobs_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("GPUHIVE_URL", jobs_url)
    monkeypatch.setenv("GPUHIVE_TOKEN", OWNER_TOKEN)
    book = nbformat.read(EXAMPLES / f"{name}.ipynb", as_version=4)
    t0 = time.perf_counter()
    NotebookClient(book, timeout=90, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()  # fmt: skip
    seconds = time.perf_counter() - t0
    text = "\n".join(_text(cell) for cell in book.cells if cell.cell_type == "code")
    print(f"{name}.ipynb ran in {seconds:.1f} s")
    if name == "queue":
        assert "queued: True" in text and "status: pending" in text
        assert "walltime: 0:10:00" in text
    elif name == "distributed-pytorch":
        assert "MASTER_ADDR=localhost" in text and "WORLD_SIZE=4" in text and "RANK=3" in text
        assert "--nnodes 2" in text
    else:
        assert '"task": {"type": "worker", "index": 1}' in text or "'index': 1" in text
