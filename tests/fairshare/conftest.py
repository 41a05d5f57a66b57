"""Fixtures for fair-share tests: the protection rig and simulated hosts (re-exported)."""

from __future__ import annotations

from tests.protection.conftest import (  # noqa: F401
    gpu_processes,
    make_local_host,
    make_rig,
    shared_dir,
    sim_users,
    store,
)
