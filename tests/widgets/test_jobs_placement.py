"""The job builder's GPU count and placement field: the exact request it sends."""

from __future__ import annotations

from typing import Any

import ipywidgets as w
import pytest

from jupyter_gpuhive.widgets.job_form import FormError
from jupyter_gpuhive.widgets.jobs_view import JobBuilderView
from tests.widgets.test_jobs import stub_builder


def test_builder_queues_a_gpu_count_with_its_placement() -> None:
    model, client = stub_builder()
    model.choose_template("plain")
    model.edit(name="c", command="python train.py", mode="queue", walltime="2h", gpu_count=8,
               same_host="required")  # fmt: skip
    model.submit()
    assert model.error == ""
    body: dict[str, Any] = client.calls[-1][2]
    assert body == {
        "name": "c", "description": "", "template": "plain", "command": "python train.py",
        "options": {"gpu_count": 8}, "queued": True, "same_host": "required",
        "walltime": "2h", "start": False,
    }  # fmt: skip
    model.edit(same_host="")  # the default is not sent
    assert "same_host" not in model.request()[2]
    model.edit(mode="now")
    with pytest.raises(FormError, match="for the queue"):
        model.request()


def test_builder_view_has_the_count_and_placement_fields() -> None:
    model, _ = stub_builder()
    view = JobBuilderView(model)
    view.count.value = 4
    view.placement.value = "preferred"
    view.name.value, view.command.value = "v", "true"
    view.mode.value = "queue"
    view.sync()
    assert model.form.gpu_count == 4 and model.form.same_host == "preferred"
    assert isinstance(view.placement, w.Dropdown)
    assert model.request()[2]["same_host"] == "preferred"


def test_builder_asks_for_a_vendor_and_a_model_and_names_each_hosts_vendor() -> None:
    hosts = {"hosts": [
        {"name": "nv1", "vendor": "nvidia", "gpus": [{"id": "nv1:0", "index": 0}]},
        {"name": "am1", "vendor": "amd", "gpus": [{"id": "am1:0", "index": 0}]},
    ]}  # fmt: skip
    model, _ = stub_builder({("GET", "hosts"): hosts})
    view = JobBuilderView(model)
    labels = [row.children[0].value for row in view.gpus.children]
    assert labels == ["am1 (AMD)", "nv1 (NVIDIA)"]
    view.name.value, view.command.value, view.mode.value = "v", "true", "queue"
    view.count.value = 2
    view.vendor.value, view.gpu_model.value = "amd", " MI300X "
    view.sync()
    body = model.request()[2]
    assert (body["vendor"], body["model"], body["options"]) == ("amd", "MI300X", {"gpu_count": 2})
    view.vendor.value, view.gpu_model.value = "", ""
    view.sync()
    assert "vendor" not in model.request()[2] and "model" not in model.request()[2]
    one, _ = stub_builder()  # a site of one vendor: hosts by name only
    assert [r.children[0].value for r in JobBuilderView(one).gpus.children] == ["gpu1", "gpu2"]
