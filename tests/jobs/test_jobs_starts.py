"""GET jobs' planned starts are worked out once per pass of the queue (#45 item 3): a job the
estimates leave out is not worked out again on every poll of every sidebar."""

from __future__ import annotations

from typing import Any


async def test_a_job_the_estimates_leave_out_costs_one_estimate_per_pass(jp_serverapp: Any):
    jobs = jp_serverapp.web_app.settings["gpuhive"].jobs
    real = jobs.scheduler.estimates
    calls = []

    async def counted() -> Any:
        calls.append(1)
        return await real()

    jobs.scheduler.estimates = counted
    first = await jobs.starts({424242})  # no such waiting job: the estimates leave it out
    assert first[424242] is None
    for _ in range(5):  # the sidebars' polls until the next pass
        assert (await jobs.starts({424242}))[424242] is None
    assert len(calls) == 1
    await jobs.starts({424242, 515151})  # a job new to them: worked out again, once
    await jobs.starts({515151})
    assert len(calls) == 2
