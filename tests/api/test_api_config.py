"""Identity from configuration: c.GpuHiveApp.groups, admin_users, and their effect on rules."""

from __future__ import annotations

import getpass
import json
from datetime import timedelta
from typing import Any

import pytest

from tests.api.helpers import booking, refused
from tests.conftest import soon


@pytest.fixture
def hive_config(hive_config: dict[str, Any]) -> dict[str, Any]:
    return {
        **hive_config,
        "groups": {"gpu-team": ["alice", "carol"], "ops": [getpass.getuser()]},
        "admin_users": ["carol"],
    }


async def test_configured_groups_and_admins(api: Any, jp_fetch: Any) -> None:
    alice, bob, carol = api("alice"), api("bob"), api("carol")
    assert (await alice("GET", "me")).body == {
        "name": "alice",
        "groups": ["gpu-team", "phd"],
        "admin": False,
    }
    assert (await bob("GET", "me")).body == {"name": "bob", "groups": ["phd"], "admin": False}
    assert (await carol("GET", "me")).body == {
        "name": "carol",
        "groups": ["gpu-team", "staff"],
        "admin": True,
    }
    assert (await api("boss")("GET", "me")).body["admin"] is True  # admin_groups still apply
    server = json.loads((await jp_fetch("gpuhive", "api", "me")).body)
    assert server == {"name": getpass.getuser(), "groups": ["ops"], "admin": False}

    # carol is an admin by name: she manages rules; a configured group is a rule subject
    rule = await carol("POST", "rules", {"name": "team", "groups": ["gpu-team"], "hosts": ["gpu3"]})
    assert rule.status == 201, rule
    t = soon()
    assert (
        await alice("POST", "reservations", booking(["gpu3:0"], t, t + timedelta(hours=1)))
    ).status == 201
    refused(
        await bob("POST", "reservations", booking(["gpu3:1"], t, t + timedelta(hours=1))),
        403,
        "bob",
        "gpu3:1",
    )
    assert [r["name"] for r in (await alice("GET", "rules")).body["rules"]] == ["team"]
    assert (await bob("GET", "rules")).body == {"rules": []}
