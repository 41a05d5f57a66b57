"""Fixtures for the MIG tests: a store with the MIG host; the simulated-host ones are shared
with tests/sim."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from jupyter_gpuhive.store import Store
from tests.mig.helpers import mig_host
from tests.sim.conftest import gpu_processes  # noqa: F401


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    """A store (each database) whose inventory is the MIG host of helpers.mig_host."""
    opened = Store(db_url).open()
    opened.inventory.sync([mig_host()])
    yield opened
    opened.close()
