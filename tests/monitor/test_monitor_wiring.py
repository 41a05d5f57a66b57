"""A monitor is wired when it is built (issue #42 item 5): without the bookings service's
reflag and the site's container owners it is not built at all, instead of running with a
silent default that re-flags nothing and charges no container to its owner."""

from __future__ import annotations

from typing import Any

import pytest

from jupyter_gpuhive.hosts.pool import HostPool
from jupyter_gpuhive.monitor.containers import ContainerOwners, no_own_containers
from jupyter_gpuhive.monitor.service import Monitor, nothing_to_reflag, unwired
from jupyter_gpuhive.store import Store


async def _run(fn: Any) -> Any:
    return fn()


def test_a_monitor_without_its_wires_is_not_built(sqlite_url: str) -> None:
    store, pool = Store(sqlite_url), HostPool([])
    with pytest.raises(TypeError, match=r"reflag.*containers"):
        Monitor(store, pool, _run)  # type: ignore[call-arg]
    owners = ContainerOwners(pool)
    wired = Monitor(store, pool, _run, reflag=nothing_to_reflag, containers=owners)
    assert wired.containers is owners and wired.reflag is nothing_to_reflag
    alone = Monitor(store, pool, _run, **unwired(pool))  # said where it is built
    assert alone.reflag is nothing_to_reflag


def test_the_hive_hands_the_monitor_its_wires(jp_serverapp: Any) -> None:
    hive = jp_serverapp.web_app.settings["gpuhive"]
    assert hive.monitor.reflag == hive.bookings.repartitioned
    assert hive.monitor.containers.own is not no_own_containers  # gpuhive's own, from the Hive
