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
