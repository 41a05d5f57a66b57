"""Fixtures for the sampler tests: the host tests' sshd cluster, pools and simulated hosts."""

from __future__ import annotations

from tests.hosts.conftest import (  # noqa: F401
    channels,
    gpu_processes,
    hive_cluster,
    make_cluster,
    make_local_host,
    make_pool,
    monitor_user,
    shared_dir,
    sim_users,
)
