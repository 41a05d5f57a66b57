"""Sweep specifications and their cartesian product."""

from __future__ import annotations

import pytest

from jupyter_gpuhive.jobs import TemplateError, expand, parse_sweep, parse_sweeps


def test_parse_sweep():
    assert parse_sweep("lr=0.1,0.01") == ("lr", ("0.1", "0.01"))
    assert parse_sweep("mode=fast") == ("mode", ("fast",))


def test_values_are_verbatim():
    assert parse_sweep("x= a ,b;c,$(d)") == ("x", (" a ", "b;c", "$(d)"))


def test_product_in_stable_order():
    assert expand(["lr=0.1,0.01", "bs=32,64"]) == [
        {"lr": "0.1", "bs": "32"},
        {"lr": "0.1", "bs": "64"},
        {"lr": "0.01", "bs": "32"},
        {"lr": "0.01", "bs": "64"},
    ]


def test_lists_given_as_python_lists():
    combos = expand({"lr": [0.1, "1e-3"], "opt": "adam", "name": ["a,b", ""]})
    assert combos == [
        {"lr": "0.1", "opt": "adam", "name": "a,b"},
        {"lr": "0.1", "opt": "adam", "name": ""},
        {"lr": "1e-3", "opt": "adam", "name": "a,b"},
        {"lr": "1e-3", "opt": "adam", "name": ""},
    ]


def test_no_sweeps_is_one_empty_combination():
    assert expand([]) == [{}]


def test_limit():
    assert len(expand(["a=" + ",".join(map(str, range(10))), "b=" + ",".join("abc")])) == 30
    with pytest.raises(TemplateError, match=r"1100 combinations \(100 a x 11 b\).*limit is 1000"):
        expand({"a": list(range(100)), "b": list(range(11))})
    with pytest.raises(TemplateError, match="limit is 5"):
        expand(["a=1,2,3", "b=1,2"], max_combinations=5)


@pytest.mark.parametrize(
    ("specs", "message"),
    [
        (["lr"], "expected name=value1,value2"),
        (["lr="], "empty value"),
        (["lr=1,,2"], "empty value"),
        (["1lr=1"], "not an identifier"),
        (["l-r=1"], "not an identifier"),
        (["lr=1", "lr=2"], "given twice"),
        (["lr=1,1"], "value '1' is given twice"),
        ({"lr": []}, "has no values"),
        ({"lr": [None]}, "must be a string or number"),
        ({"lr": {"a": 1}}, "must be a list"),
        ("lr=1", "list of 'name=v1,v2' strings"),
    ],
)
def test_errors(specs, message):
    with pytest.raises(TemplateError, match=message):
        expand(specs)


def test_template_error_is_a_value_error():
    with pytest.raises(ValueError, match="identifier"):
        parse_sweeps(["a b=1"])
