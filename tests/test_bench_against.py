"""benchmarks/against.py: the figures it compares and the commit it exports."""

from __future__ import annotations

from pathlib import Path

from tests.support.bench_compare import export, flatten, last_json, ratios


def test_every_number_is_a_figure_by_its_path_and_flags_are_not() -> None:
    figures = {"search_ms": 12, "ok": True, "by_load": {"busy": {"wait": 0.5}}, "who": "x"}
    assert flatten(figures) == {"search_ms": 12.0, "by_load.busy.wait": 0.5}


def test_the_ratio_is_new_over_old_the_median_of_the_rounds() -> None:
    old = [{"a": 10.0, "z": 0.0, "gone": 1.0}, {"a": 10.0, "z": 0.0}, {"a": 10.0, "z": 0.0}]
    new = [{"a": 30.0, "z": 0.0}, {"a": 11.0, "z": 0.0}, {"a": 12.0, "z": 0.0}]
    assert ratios(old, new) == {"a": 1.2, "z": 1.0}  # 'gone' is not on every side


def test_only_a_json_object_on_the_last_line_counts() -> None:
    assert last_json('started\n{"x": 1}\n\n') == {"x": 1}
    assert last_json('{"x": 1}\ndone') is None
    assert last_json("[1, 2]") is None
    assert last_json("") is None


def test_the_commit_is_exported_whole(tmp_path: Path) -> None:
    commit = export("HEAD", tmp_path)
    assert len(commit) == 40
    assert (tmp_path / "benchmarks" / "finder.py").is_file()
    assert (tmp_path / "jupyter_gpuhive" / "__init__.py").is_file()
