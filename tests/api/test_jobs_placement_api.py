"""Where a count-only job may run (`same_host`), through the REST API: checked at submission."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.api.helpers import refused

QUEUED = {"name": "p", "command": "sleep 1", "queued": True, "walltime": "10m"}


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_a_job_that_can_never_fit_one_host_is_refused_when_it_requires_one(api: Any) -> None:
    alice = api("alice")  # three hosts of four GPUs each
    for body in (
        {**QUEUED, "options": {"gpu_count": 5}, "same_host": "required"},
        {**QUEUED, "options": {"gpu_count": 8, "same_host": "required"}},
    ):
        for path in ("jobs", "jobs/preview"):
            reply = await alice("POST", path, body)
            refused(reply, 422, "same_host", "largest host has 4", "preferred")
    assert (await alice("GET", "jobs")).body["jobs"] == []

    # Without `same_host`, five GPUs may span hosts; four fit one host and must stay there.
    spans = await alice("POST", "jobs", {**QUEUED, "options": {"gpu_count": 5}})
    assert spans.status == 201, spans
    assert "same_host" not in spans.body["options"]  # the default is not stored
    whole = await alice("POST", "jobs", {**QUEUED, "options": {"gpu_count": 4},
                                         "same_host": "required"})  # fmt: skip
    assert whole.status == 201 and whole.body["options"]["same_host"] == "required"
    anywhere = await alice("POST", "jobs", {**QUEUED, "options": {"gpu_count": 6},
                                            "same_host": "any"})  # fmt: skip
    assert anywhere.status == 201 and anywhere.body["options"] == {"gpu_count": 6,
                                                                   "same_host": "any"}  # fmt: skip
    # Projected starts, in the queue's order: the 5- and 6-GPU jobs are wider than a host
    # and keep their submission time; the 4-GPU job's area (40 GPU-minutes) puts it 40
    # minutes back. 5 GPUs over hosts and 6 anywhere fit now (11 of 12 GPUs); the four that
    # must share one host wait for a whole host, once one of them ends (10 minute walltime).
    listed = await alice("GET", "queue")
    assert listed.status == 200
    starts = {j["id"]: j["estimated_start"] for j in listed.body["jobs"]}
    first, third = (datetime.fromisoformat(starts[r.body["id"]]) for r in (spans, anywhere))
    second = datetime.fromisoformat(starts[whole.body["id"]])
    assert abs((first - third).total_seconds()) < 60
    assert timedelta(minutes=9) < second - first <= timedelta(minutes=11)
    # GET jobs gives each waiting queued job the same projected start as GET queue.
    mine = {j["id"]: j["estimated_start"] for j in (await alice("GET", "jobs")).body["jobs"]}
    assert mine == starts
    assert (await alice("GET", "queue")).body["jobs"][0]["estimated_start"] in starts.values()


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_bad_placements_are_refused_in_words(api: Any) -> None:
    alice = api("alice")
    count = {**QUEUED, "options": {"gpu_count": 2}}
    refused(await alice("POST", "jobs", {**count, "same_host": "yes"}), 422,
            "required, preferred, any")  # fmt: skip
    refused(await alice("POST", "jobs", {**count, "same_host": 2}), 400, "same_host")
    refused(await alice("POST", "jobs", {**count, "same_host": "any",
                                         "options": {"gpu_count": 2, "same_host": "required"}}),
            422, "once")  # fmt: skip
    named = {**QUEUED, "gpus": ["gpu1:0"], "same_host": "required"}
    refused(await alice("POST", "jobs", named), 422, "gpu_count", "names its GPUs")
    assert (await alice("GET", "jobs")).body["jobs"] == []
