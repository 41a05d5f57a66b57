"""One way a job body's sweep is built on the notebook side (issue #42 item 6): the job
builder and %%gpujob go through notebook.jobsweeps.sweep_body, with the same results. Before,
%%gpujob sent its --sweep entries verbatim ('lr=0.1, 0.01' ran with the value ' 0.01') and
left refusals to the server, in other words."""

from __future__ import annotations

import shlex
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.magic_arguments import parse_argstring

from jupyter_gpuhive.notebook.jobmagics import GpuJobMagics
from jupyter_gpuhive.notebook.jobsweeps import sweep_body
from jupyter_gpuhive.widgets.job_form import FormError
from tests.widgets.test_jobs import Recorder, stub_builder

GOOD = [
    ["lr=0.1,0.01"],
    ["lr=0.1, 0.01", " bs = 32"],  # spaces around names and values
    ["seed=1,2,3", "lr=3e-4"],  # in the order given: the first changes slowest
]
BAD = [["lr=0.1,,1"], ["lr"], ["2x=1"], ["lr=1", "lr=2"]]


def _magic(entries: list[str], variables: tuple[str, ...] = ()) -> dict[str, Any]:
    magics = GpuJobMagics(shell=None)
    magics._client = Recorder({})  # type: ignore[assignment]
    line = "gpu1:0 --dry-run " + " ".join(f"--sweep {shlex.quote(e)}" for e in entries)
    line += "".join(f" --var {shlex.quote(v)}" for v in variables)
    body: dict[str, Any] = magics._body(parse_argstring(GpuJobMagics.gpujob, line), "train.py")
    return body


def _builder(entries: list[str], variables: tuple[str, ...] = ()) -> dict[str, Any]:
    model, _ = stub_builder()
    model.pick_gpus(["gpu1:0"])
    model.edit(name="n", command="train.py", sweeps="\n".join(entries),
               variables="\n".join(variables))  # fmt: skip
    return model.body()


@pytest.mark.parametrize("entries", GOOD)
def test_the_builder_and_the_magic_send_the_same_sweep(entries: list[str]) -> None:
    expected = sweep_body(entries)
    assert _magic(entries)["sweep"] == expected == _builder(entries)["sweep"]
    assert all(v == v.strip() for values in expected.values() for v in values)


@pytest.mark.parametrize("entries", BAD)
def test_the_builder_and_the_magic_refuse_alike(entries: list[str]) -> None:
    with pytest.raises(ValueError) as found:
        sweep_body(entries)
    with pytest.raises(UsageError) as magic:
        _magic(entries)
    with pytest.raises(FormError) as builder:
        _builder(entries)
    assert str(found.value) in str(magic.value) and str(builder.value) == str(found.value)


def test_a_name_both_variable_and_sweep_is_refused_by_both() -> None:
    with pytest.raises(UsageError, match="both a variable and a sweep"):
        _magic(["lr=1,2"], ("lr=3",))
    with pytest.raises(FormError, match="both a variable and a sweep"):
        _builder(["lr=1,2"], ("lr=3",))
