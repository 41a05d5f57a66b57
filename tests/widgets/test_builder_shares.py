"""The job builder makes share jobs: the templates' `memory` option is a field of the form,
and what is typed there reaches the job's options (a share job, packed and capped)."""

from __future__ import annotations

from jupyter_gpuhive.jobs.catalog import TEMPLATES
from jupyter_gpuhive.widgets.jobs_view import JobBuilderView
from tests.widgets.test_jobs import stub_builder

REAL = {("GET", "templates"): {"templates": [t.describe() for t in TEMPLATES.values()]}}


def test_the_builder_sends_a_share_jobs_memory() -> None:
    model, client = stub_builder(REAL)
    view = JobBuilderView(model)
    view.template.value = "pytorch"
    assert "memory" in view.option_widgets  # every template takes it
    view.gpu_boxes["gpu1:0"].value = True
    view.command.value = "python train.py"
    view.option_widgets["memory"].value = "20G"
    view.submit()
    assert client.calls[-1][:2] == ("POST", "jobs")
    assert client.calls[-1][2]["options"]["memory"] == "20G"
    view.option_widgets["memory"].value = ""  # left empty: whole GPUs
    view.submit()
    assert "memory" not in client.calls[-1][2].get("options", {})
