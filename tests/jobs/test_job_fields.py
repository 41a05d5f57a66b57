"""Job fields are declared once (issue #42 item 6): a JobRequest's fields reach the Job by
name (JobRequest.defines), not copied one by one; the API's NewJob declares the same fields."""

from __future__ import annotations

import typing
from dataclasses import MISSING, fields
from datetime import UTC, timedelta
from pathlib import Path

from jupyter_gpuhive.jobs.rules import JobRules
from jupyter_gpuhive.model import GpuDecl, HostDecl, Identity
from jupyter_gpuhive.model.jobs import Job
from jupyter_gpuhive.model.requests import REQUEST_ONLY, JobRequest
from jupyter_gpuhive.server.api.schemas.bodies import NewJob
from jupyter_gpuhive.store import Store


def _declared(cls: type) -> dict[str, tuple[object, object]]:
    hints = typing.get_type_hints(cls)
    out = {}
    for f in fields(cls):
        default = f.default_factory() if f.default_factory is not MISSING else f.default
        out[f.name] = (hints[f.name], default)
    return out


def test_every_request_field_is_a_job_field_or_request_only() -> None:
    request, job = _declared(JobRequest), _declared(Job)
    defined = {name for name in request if name not in REQUEST_ONLY}
    assert defined <= set(job), (
        f"decide for {sorted(defined - set(job))}: a Job field, or REQUEST_ONLY"
    )
    for name in defined:  # the same type and default on both sides
        assert request[name] == job[name], name
    assert set(request) >= REQUEST_ONLY


def test_the_api_declares_the_request_fields() -> None:
    assert list(NewJob.model_fields) == [f.name for f in fields(JobRequest)]


def test_a_built_job_carries_every_field_the_request_defines(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'hive.sqlite'}").open()
    try:
        store.inventory.sync([HostDecl("h1", gpus=(GpuDecl(0, "GPU-h1-0"),))])
        rules = JobRules(store, UTC, Identity)
        request = JobRequest(
            name="sweep", command="python train.py --lr {lr}", template="plain",
            description="a sweep", gpus=("h1:0",), options={"per_gpu": True},
            variables={"epochs": "3"}, sweep={"lr": ["0.1", "0.01"]}, env={"A": "1"},
            workdir="/tmp", queued=True, walltime=timedelta(hours=2), max_retries=2,
            preemptible=True, preempt_signal="SIGUSR1", grace_s=5,
        )  # fmt: skip
        job, specs = rules.build(Identity("alice"), request)
        assert job.owner == "alice" and len(specs) == 2  # one task per sweep value
        for name, value in request.defines().items():
            assert getattr(job, name) == value, name
    finally:
        store.close()
