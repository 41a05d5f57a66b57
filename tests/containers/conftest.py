"""Fixtures of the container tests: simulated hosts and the protection rig, reused from
tests/sim and tests/protection (re-exported, not copied)."""

from tests.protection.conftest import make_rig, store
from tests.sim.conftest import gpu_processes, make_local_host, run_smi, shared_dir, sim_users

__all__ = [
    "gpu_processes",
    "make_local_host",
    "make_rig",
    "run_smi",
    "shared_dir",
    "sim_users",
    "store",
]
