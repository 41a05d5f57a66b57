"""Fixtures for the MIG tests: the simulated-host ones are shared with tests/sim."""

from tests.sim.conftest import gpu_processes  # noqa: F401
