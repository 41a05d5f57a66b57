"""The site's switch for least attained service (`c.GpuHiveApp.least_attained_service`)."""

from __future__ import annotations

from jupyter_gpuhive.server.app import GpuHiveApp


def test_the_site_setting_reaches_the_scheduler() -> None:
    """c.GpuHiveApp.least_attained_service: on by default; off, only lending preempts."""
    assert GpuHiveApp(auto_local_host=False).settings_for_hive().preemption.least_attained_service
    off = GpuHiveApp(auto_local_host=False, least_attained_service=False).settings_for_hive()
    assert off.preemption.least_attained_service is False
