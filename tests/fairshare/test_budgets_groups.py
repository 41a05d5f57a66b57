"""Budgets of groups whose hosts a host group's administrators run: they see their group's
budget and statement, never another group's (403 saying who may), and change none."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from jupyter_gpuhive.store.accounting import RESERVED, Charge
from tests.api.helpers import WARSAW, refused
from tests.conftest import HOSTS, USERS
from tests.fairshare.test_budgets_api import add_budget, around_today

pytestmark = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
LAB_USERS = {
    **USERS,
    "tok-alice": {"name": "alice", "groups": ["phd", "physics"]},
    "tok-hedy": {"name": "hedy", "groups": ["physics-heads"]},
    "tok-carl": {"name": "carl", "groups": []},
}


@pytest.fixture
def hive_config(hive_config: dict[str, Any]) -> dict[str, Any]:
    hosts = [{**h, "group": "chemistry" if h["name"] == "gpu3" else "physics"} for h in HOSTS]
    groups = {"physics": {"admin_groups": ["physics-heads"]}, "chemistry": {"admins": ["carl"]}}
    return {**hive_config, "hosts": hosts, "host_groups": groups}


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    jp_server_config["TokenUsersIdentityProvider"] = {"users": LAB_USERS}
    return jp_server_config


async def test_a_group_administrator_reads_her_groups_statement_only(
    api: Any, jp_serverapp: Any
) -> None:
    boss, hedy, carl, alice = api("boss"), api("hedy"), api("carl"), api("alice")
    assert (await alice("GET", "me")).status == 200  # gpuhive now knows her groups
    physics = await add_budget(boss, scope="group", name="physics", gpu_hours=100, **around_today())
    chemistry = await add_budget(boss, scope="group", name="chemistry", kwh=50, period="quarter")
    hive = jp_serverapp.web_app.settings["gpuhive"]
    gpu = hive.store.inventory.gpu("gpu1:2")
    hour = datetime.now(WARSAW).replace(minute=0, second=0, microsecond=0)
    hive.store.accounting.record(
        [Charge(gpu.id, hour, hour.replace(day=1), "alice", RESERVED, 7200, energy_j=1.8e6)]
    )
    statement = await hedy("GET", f"budgets/{physics['id']}/statement")
    assert statement.status == 200, statement
    assert statement.body["rows"] == [
        {"user": "alice", "host": "gpu1", "kind": "reserved", "gpu_hours": 2.0, "kwh": 0.5}
    ]
    assert statement.body["standing"]["gpu_hours"]["used"] == pytest.approx(2)
    listed = [b["name"] for b in (await hedy("GET", "budgets")).body["budgets"]]
    assert listed == ["physics"]
    # across groups: refused, naming who may
    words = refused(await hedy("GET", f"budgets/{chemistry['id']}/statement"), 403, "Who may")
    assert "chemistry's administrators (carl)" in words and "gpuhive admins" in words
    words = refused(await carl("GET", f"budgets/{physics['id']}/statement"), 403, "Who may")
    assert "physics's administrators (members of physics-heads)" in words
    assert (await carl("GET", f"budgets/{chemistry['id']}/statement")).status == 200
    # a member sees her group's budget but not who used what; no group admin changes one
    assert (await alice("GET", f"budgets/{physics['id']}")).status == 200
    refused(await alice("GET", f"budgets/{physics['id']}/statement"), 403)
    body = {"scope": "group", "name": "physics", "gpu_hours": 1000}
    refused(await hedy("PUT", f"budgets/{physics['id']}", body), 403, "Only gpuhive admins")
    refused(await hedy("POST", "budgets", body), 403, "Only gpuhive admins")
