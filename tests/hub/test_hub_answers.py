"""The service remembers the Hub's answers itself (server/hub_answers.py), through HubAuth's
public call only: reads use an answer for token_cache_seconds, and a fresh one replaces it."""

from __future__ import annotations

import ast
from pathlib import Path

from jupyter_gpuhive.server.hub_answers import HubAnswers

HUB = Path(__file__).resolve().parents[2] / "jupyter_gpuhive" / "server" / "hub.py"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_answer_is_used_for_its_seconds_then_asked_again() -> None:
    clock = Clock()
    answers = HubAnswers(60.0, clock)
    alice = {"kind": "user", "name": "alice"}
    assert answers.get("tok-a") == (False, None)
    answers.put("tok-a", alice)
    answers.put("tok-gone", None)  # the Hub does not know it: remembered as well
    clock.now += 59.9
    assert answers.get("tok-a") == (True, alice)
    assert answers.get("tok-gone") == (True, None)
    assert answers.get("tok-b") == (False, None)
    clock.now += 0.1
    assert answers.get("tok-a") == (False, None)


def test_a_fresh_answer_replaces_the_remembered_one_and_old_ones_are_dropped() -> None:
    clock = Clock()
    answers = HubAnswers(10.0, clock)
    answers.put("tok", {"kind": "user", "name": "carol", "groups": ["admins"]})
    clock.now += 5
    answers.put("tok", {"kind": "user", "name": "carol", "groups": []})  # a write's answer
    assert answers.get("tok") == (True, {"kind": "user", "name": "carol", "groups": []})
    clock.now += 11
    answers.put("other", None)  # a put past the period drops what expired
    assert len(answers._answers) == 1


def test_the_service_reads_no_cache_of_hubauth() -> None:
    """HubAuth's cache and its key format ('token:<session>:<sha256>') are its own."""
    tree = ast.parse(HUB.read_text())
    found = [
        node.lineno
        for node in ast.walk(tree)
        if (isinstance(node, ast.Attribute) and node.attr == "cache")
        or (isinstance(node, ast.Constant) and isinstance(node.value, str)
            and node.value.startswith("token:"))
    ]  # fmt: skip
    assert not found, f"server/hub.py reaches HubAuth's cache at lines {found}"
