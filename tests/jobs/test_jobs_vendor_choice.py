"""A count-only job that names a vendor or a model: the queue's pass gives it only matching GPUs,
now and in the slot it keeps, and `candidates` reads the choice from the job's options."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from jupyter_gpuhive.jobs.admission import Candidate, GpuState, admit, template_options
from jupyter_gpuhive.jobs.queue import candidates
from jupyter_gpuhive.jobs.selection import GpuChoice, choice_of, matching, vendors_of
from jupyter_gpuhive.model import Gpu, HostDecl
from jupyter_gpuhive.model.jobs import Job

NOW = 1_900_000_000.0
H = 3600.0


def world() -> dict[str, GpuState]:
    """nv1: four GPUs, am1: two; nv1:0 and nv1:1 busy for 2 hours."""
    states = [GpuState(f"nv1-{i}", "nv1", i, f"nv1:{i}") for i in range(4)]
    states[0] = GpuState("nv1-0", "nv1", 0, "nv1:0", blocker="a task", release=NOW + 2 * H)
    states[1] = GpuState("nv1-1", "nv1", 1, "nv1:1", blocker="a task", release=NOW + 2 * H)
    states += [GpuState(f"am1-{i}", "am1", i, f"am1:{i}") for i in range(2)]
    return {s.uuid: s for s in states}


def test_a_count_only_job_gets_only_the_gpus_it_asks_for() -> None:
    amd = frozenset({"am1-0", "am1-1"})
    nvidia = frozenset(f"nv1-{i}" for i in range(4))
    jobs = [
        Candidate(1, "ann", 1, NOW + H, count=2, only=nvidia),  # two free on nv1: now
        Candidate(2, "ann", 2, NOW + H, count=1, only=amd),  # would fit nv1 too: am1
        Candidate(3, "ann", 3, NOW + H, count=2, only=nvidia),  # nv1 full: waits for nv1
        Candidate(4, "ann", 4, NOW + H, count=2, only=amd),  # one am1 GPU left: waits
    ]
    result = admit(jobs, world(), NOW)
    placed = {a.job_id: set(a.gpus) for a in result.admitted}
    assert placed == {1: {"nv1-2", "nv1-3"}, 2: {"am1-1"}}
    assert set(result.planned[3].gpus) == {"nv1-2", "nv1-3"}  # after job 1, not on am1
    assert result.planned[3].start == pytest.approx(NOW + H)
    assert set(result.planned[4].gpus) <= amd and len(result.planned[4].gpus) == 2
    assert "of those it asks for" in result.waiting[4]


def test_more_gpus_of_a_kind_than_one_host_has_is_said_at_once() -> None:
    only = frozenset({"am1-0", "am1-1"})
    result = admit([Candidate(1, "ann", 1, NOW + H, count=3, same_host="required",
                              only=only)], world(), NOW)  # fmt: skip
    assert result.waiting[1] == "no host has 3 GPUs (it asks for them on one host)"
    assert 1 not in result.planned


def test_candidates_read_the_choice_and_match_each_hosts_vendor() -> None:
    hosts = {"nv1": HostDecl("nv1"), "am1": HostDecl("am1", extra={"vendor": "amd"})}
    inventory = {
        g.uuid: g
        for g in [
            Gpu(1, "nv1", 0, "nv1-0", model="NVIDIA A100-SXM4-80GB"),
            Gpu(2, "nv1", 1, "nv1-1", model="NVIDIA H100 80GB HBM3"),
            Gpu(3, "am1", 0, "am1-0", model="AMD Instinct MI300X"),
        ]
    }
    now = datetime.fromtimestamp(NOW, UTC)

    def only(**choice: str) -> frozenset[str] | None:
        job = Job(id=7, owner="ann", name="j", command="true", queued=True,
                  created_at=now,
                  options={"gpu_count": 1, **choice})  # fmt: skip
        found = candidates([job], now, timedelta(hours=1), inventory=inventory,
                           vendors=vendors_of(hosts))  # fmt: skip
        return found[0].only

    assert only() is None
    assert only(vendor="amd") == {"am1-0"}
    assert only(vendor="nvidia") == {"nv1-0", "nv1-1"}
    assert only(model="h100") == {"nv1-1"}
    assert only(vendor="amd", model="a100") == frozenset()
    assert template_options({"gpu_count": 1, "vendor": "amd", "model": "x", "k": 1}) == {"k": 1}


def test_the_choice_is_checked_and_said_in_words() -> None:
    assert choice_of({"vendor": " AMD ", "model": " MI300X "}) == GpuChoice("amd", "MI300X")
    assert not choice_of({})
    with pytest.raises(ValueError, match="known: amd, nvidia"):
        choice_of({"vendor": "intel"})
    with pytest.raises(ValueError, match="'model' must be a non-empty name"):
        choice_of({"model": 3})
    assert GpuChoice("amd", "MI300X").words() == 'AMD GPUs whose name holds "MI300X"'
    gpu = Gpu(1, "x", 0, "u", model=None)
    assert matching(GpuChoice(model="a100"), [gpu], {}) == []  # an unknown model matches none
    assert matching(GpuChoice(vendor="nvidia"), [gpu], {}) == [gpu]  # no entry: the default
