"""Fixtures of the container tests: the simulated hosts of tests/sim, reused here."""

from tests.sim.conftest import gpu_processes, make_local_host, run_smi, shared_dir, sim_users

__all__ = ["gpu_processes", "make_local_host", "run_smi", "shared_dir", "sim_users"]
