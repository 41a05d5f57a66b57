"""Preemptible jobs in the widgets (#31): the builder's fields and exact bodies, and the
reservation rows that say to which job a holder's idle GPUs are lent."""

from __future__ import annotations

from datetime import timedelta

import pytest

from jupyter_gpuhive.widgets.calendar_model import CalendarModel
from jupyter_gpuhive.widgets.job_form import FormError, task_text
from jupyter_gpuhive.widgets.jobs_view import JobBuilderView
from tests.widgets.test_jobs import NOW, stub_builder


def test_builder_sends_the_preemption_fields_only_for_a_preemptible_queued_job() -> None:
    model, client = stub_builder()
    model.pick_gpus(["gpu1:0"])
    model.edit(command="python train.py", mode="queue")
    assert "preemptible" not in model.request("submit")[2]
    model.edit(preemptible=True)
    assert model.request("submit")[2]["preemptible"] is True
    assert "preempt_signal" not in model.request("submit")[2]  # the default is not sent
    model.edit(preempt_signal="SIGUSR1", grace="12")
    job = model.submit()
    assert job is not None
    sent = client.calls[-1][2]
    assert (sent["preemptible"], sent["preempt_signal"], sent["grace_s"], sent["queued"]) == (
        True,
        "SIGUSR1",
        12,
        True,
    )
    # A preemptible job waits in the queue; the grace is whole seconds, 0 or more.
    for changes, words in (
        ({"mode": "now"}, "choose Queue"),
        ({"mode": "queue", "grace": "soon"}, "whole seconds, not 'soon'"),
        ({"grace": "-1"}, "cannot be negative"),
    ):
        model.edit(**changes)
        with pytest.raises(FormError, match=words):
            model.request("submit")


def test_builder_view_has_the_preemption_fields() -> None:
    model, client = stub_builder()
    view = JobBuilderView(model)
    view.gpu_boxes["gpu1:0"].value = True
    view.command.value = "python train.py"
    view.mode.value = "queue"
    view.preemptible.value = True
    view.preempt_signal.value = "SIGUSR2"
    view.grace.value = "5"
    view.submit()
    sent = client.calls[-1][2]
    assert client.calls[-1][:2] == ("POST", "jobs")
    assert (sent["preempt_signal"], sent["grace_s"]) == ("SIGUSR2", 5)
    assert view.preempt_signal.options[0][0] == "SIGTERM (default)"


def test_reservation_rows_say_to_which_job_idle_gpus_are_lent() -> None:
    lent = [{"job": 42, "name": "sweep", "owner": "bob", "preemptible": True}]
    model, _ = stub_builder()
    mine = {**model.reservations[0], "lent_to": lent}
    assert model.reservation_label(mine).endswith(
        "active, lent to job 42 (preemptible) until you start)"
    )
    assert "lent" not in model.reservation_label(model.reservations[0])

    calendar = CalendarModel(None, start=NOW.date(), gpus=["gpu2:1"], zone="UTC", now=lambda: NOW)
    theirs = {**mine, "id": 8, "owner": "carl", "start": (NOW + timedelta(hours=2)).isoformat(),
              "end": (NOW + timedelta(hours=3)).isoformat(),
              "lent_to": [*lent, {**lent[0], "job": 43}]}  # fmt: skip
    calendar.me = "ann"
    calendar.apply([mine, theirs], {})
    labels = {box.reservation_id: box.label for box in calendar.boxes}
    assert labels[7] == "ann: exp · lent to job 42 (preemptible) until you start"
    assert labels[8] == "carl: exp · lent to jobs 42, 43 (preemptible) until its holder starts"


def test_previews_shorten_the_shipped_checkpoint_module() -> None:
    task = {"index": 0, "host": "gpu1", "gpus": ["gpu1:0"], "role": "",
            "env": {"GPUHIVE_CHECKPOINT_SOURCE": "H4sI" + "A" * 3000, "LR": "0.1"},
            "shell": "run"}  # fmt: skip
    text = task_text(task)
    assert "#   GPUHIVE_CHECKPOINT_SOURCE=H4sI" in text and "(3004 characters)" in text
    assert "#   LR=0.1" in text and len(text) < 300


def test_the_job_list_says_which_jobs_are_preemptible_and_how_often_preempted() -> None:
    from jupyter_gpuhive.widgets.joblist_model import JobListModel
    from tests.widgets.test_jobs import Recorder

    jobs = [
        {"id": 1, "name": "plain", "status": "running", "tasks": []},
        {"id": 2, "name": "borrower", "status": "pending", "queued": True, "tasks": [],
         "preemptible": True, "restarts": 2},
        {"id": 3, "name": "fresh", "status": "running", "queued": True, "tasks": [],
         "preemptible": True, "restarts": 0},
    ]  # fmt: skip
    client = Recorder({("GET", "jobs"): {"jobs": jobs}})
    model = JobListModel(client, user="ann")
    model.refresh()
    labels = {row.id: row.label for row in model.rows()}
    assert labels[1] == "#1 plain — running — "
    assert labels[2] == "#2 borrower — pending (queued, preemptible, preempted 2×) — "
    assert labels[3] == "#3 fresh — running (queued, preemptible) — "
