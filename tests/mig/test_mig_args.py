"""%gpureserve and %%gpujob name MIG slices as people type them."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError

from jupyter_gpuhive.notebook.args import parse_gpu_args


def test_slices_are_named_by_ref_or_mig_uuid() -> None:
    uuid = "MIG-dbbf4f9e-de61-bf85-9e9e-8d6d5f61c39a"
    assert parse_gpu_args(["gpu1:0/mig5,1", uuid]) == (["gpu1:0/mig5", "gpu1:1", uuid], None)
    assert parse_gpu_args(["gpu1:0/mig5.1"]) == (["gpu1:0/mig5.1"], None)


@pytest.mark.parametrize("bad", ["gpu1:0/slice", "gpu1:0/mig", "gpu1:x/mig5"])
def test_a_bad_slice_name_says_how_to_write_it(bad: str) -> None:
    with pytest.raises(UsageError, match=bad.replace(".", r"\.")):
        parse_gpu_args([bad])


def test_gpustatus_lists_slices_with_utilisation_not_reported() -> None:
    from jupyter_gpuhive.notebook.magicviews import GpuStatus

    brief = {"id": 3, "owner": "me", "title": "ft", "start": "2026-11-22T09:00:00+00:00",
             "end": "2999-11-22T12:00:00+00:00"}  # fmt: skip
    part = {"id": "gpu1:0/mig5", "util": None, "util_label": "not reported",
            "mem_used_mib": 700, "mem_total_mib": 19968, "processes": [{"pid": 1, "user": "me"}],
            "reservation": brief, "next_reservation": None}  # fmt: skip
    gpu = {"id": "gpu1:0", "util": None, "util_label": "not reported", "mem_used_mib": 700,
           "mem_total_mib": 81920, "processes": [], "reservation": None,
           "next_reservation": None, "slices": [part]}  # fmt: skip
    status = GpuStatus([{"name": "gpu1", "state": "up", "gpus": [gpu]}], "me")
    rows = {row[0]: row for row in status.rows}
    assert set(rows) == {"gpu1:0", "gpu1:0/mig5"}
    assert rows["gpu1:0/mig5"][2] == "not reported" and rows["gpu1:0/mig5"][3] == "700/19968 MiB"
    assert status.kinds[0] == "mine" and status.rows[0][0] == "gpu1:0/mig5"
    assert "0%" not in status.text()
