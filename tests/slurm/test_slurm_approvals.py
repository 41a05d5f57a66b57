"""Approvals (#46 item 4) on Slurm nodes (#47): a tentative booking is held in gpuhive's store
only, and becomes a Slurm reservation of its owner when an administrator approves it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from jupyter_gpuhive.model.engines import engine_name
from tests.conftest import iso, soon
from tests.slurm.conftest import ACCOUNTS, slurm_hosts
from tests.slurm.test_slurm_api import WHOLE_N1, held, inventory
from tests.support.slurm import SlurmCluster


@pytest.fixture
def hive_config(hive_config: dict[str, Any], slurm: SlurmCluster) -> dict[str, Any]:
    return {**hive_config, "hosts": slurm_hosts(slurm), "unix_users": ACCOUNTS,
            "poll_interval": 0.5, "approvals": {"n1": {"gpus": 2}}}  # fmt: skip


async def test_a_tentative_booking_gets_its_slurm_reservation_only_when_approved(
    api, running_hive, slurm
) -> None:
    """Until approved, a booking is held in gpuhive's store only: a Slurm reservation would let
    its holder run there before anyone approved it (sbatch --reservation works without gpuhive)."""
    alice = api("alice")
    await inventory(alice)
    start = soon()
    made = await alice("POST", "reservations", {"title": "big", "gpus": WHOLE_N1,
                                                "start": iso(start), "duration": "2h"})  # fmt: skip
    assert made.status == 201 and made.body["tentative"] is True, made
    name = engine_name(made.body["id"])
    assert name not in held(slurm)
    await running_hive.bookings.on_sweep()  # the reconciliation does not make one either
    assert name not in held(slurm)
    done = await api("boss")("POST", f"reservations/{made.body['id']}/approve")
    assert done.status == 200 and done.body["tentative"] is False, done
    assert held(slurm)[name].users == (ACCOUNTS["alice"],)

    declined = await alice("POST", "reservations", {"title": "later", "gpus": WHOLE_N1,
                                                    "start": iso(start + timedelta(hours=3)),
                                                    "duration": "2h"})  # fmt: skip
    assert declined.status == 201 and declined.body["tentative"] is True, declined
    no = await api("boss")("POST", f"reservations/{declined.body['id']}/decline")
    assert no.status == 200 and no.body["status"] == "cancelled", no
    assert set(held(slurm)) == {name}
