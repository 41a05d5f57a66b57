"""The decomposition of the replay's waits that docs/explanation/queue-order.md reports."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.support.wait_causes import CAUSES, cause, causes


def test_each_waiting_job_has_one_cause() -> None:
    free = Counter({"h0": 3, "h1": 2})
    assert cause(8, "", free, free) == "capacity"  # 5 free in all
    assert cause(4, "", free, free) == "fragmented"  # 5 free, 3 at most on one host
    assert cause(3, "", free, Counter({"h0": 1, "h1": 2})) == "kept"  # h0's kept for slots
    held = "queued job 9 waits for 16 GPUs; until it starts, only jobs with a walltime …"
    assert cause(2, held, free, free) == "wide rule"
    assert cause(5, "", Counter({f"h{i}": 1 for i in range(12)}), Counter()) == "fragmented"
    wide = Counter({f"h{i}": 8 for i in range(3)})
    assert cause(16, "", wide, wide) == "wide, not placeable"


def test_the_causes_add_up_to_the_replays_mean_wait() -> None:
    found = causes("light", "las", hosts=16, jobs=200, seed=7)
    assert found["mean_wait_h"] > 0
    assert found["total_h"] == pytest.approx(found["mean_wait_h"], rel=0.05)
    assert {name.split(" (")[0] for name in found["by_cause"]} <= set(CAUSES)
    with pytest.raises(ValueError, match="EASY"):
        causes("light", "easy", hosts=16, jobs=200, seed=7)
