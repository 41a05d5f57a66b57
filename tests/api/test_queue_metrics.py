"""`gpuhive_queue_length` and `gpuhive_queue_jobs` count every job GET queue lists as waiting:
one by count (no tasks yet) and one that names its GPUs (pending tasks) alike (#48)."""

from __future__ import annotations

import re
from typing import Any

from tests.api.test_preemption_api import JOB


def gauge(text: str, name: str, labels: str = "") -> float:
    """The value of one sample of the exposition `text` (0 when the sample is absent)."""
    found = re.search(rf"^{name}{re.escape(labels)} (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


async def test_queue_length_counts_jobs_that_name_their_gpus(api: Any) -> None:
    alice, bob, boss = api("alice"), api("bob"), api("boss")
    held = await bob("POST", "reservations", {"title": "holds", "gpus": ["gpu1:0"],
                                              "duration": "2h"})  # fmt: skip
    assert held.status == 201, held
    named = await alice("POST", "jobs", JOB)  # gpu1:0, held by bob: it waits
    assert named.status == 201, named
    assert named.body["tasks"], "a job that names its GPUs has its tasks from the start"
    counted = await alice("POST", "jobs", {"name": "c", "command": "sleep 1", "queued": True,
                                           "walltime": "1h", "options": {"gpu_count": 12}})  # fmt: skip
    assert counted.status == 201, counted
    queue = await alice("GET", "queue")
    assert queue.status == 200, queue
    waiting = {job["id"] for job in queue.body["jobs"]} if isinstance(queue.body, dict) else {
        job["id"] for job in queue.body}  # fmt: skip
    assert {named.body["id"], counted.body["id"]} <= waiting
    scraped = await boss("GET", "prometheus")
    assert scraped.status == 200, scraped
    assert gauge(scraped.body, "gpuhive_queue_length") == len(waiting)
    assert gauge(scraped.body, "gpuhive_queue_jobs", '{user="alice"}') == 2
