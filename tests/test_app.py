"""GpuHiveApp configuration: documented traits, validation, settings for the Hive."""

from __future__ import annotations

import gc
import json
from datetime import timedelta
from pathlib import Path

import pytest
from traitlets import TraitError

from jupyter_gpuhive.server import heap
from jupyter_gpuhive.server.app import GpuHiveApp
from jupyter_gpuhive.server.config import GpuHiveConfig


def test_every_trait_is_documented_configuration() -> None:
    own = GpuHiveConfig.class_own_traits()  # GpuHiveApp carries them (c.GpuHiveApp.…)
    assert {"db_url", "hosts", "site_timezone", "admin_users", "admin_groups", "groups"} <= set(own)
    assert {"min_reservation", "max_reservation", "booking_horizon", "past_grace"} <= set(own)
    for name, trait in own.items():
        assert (trait.help or "").strip(), f"GpuHiveApp.{name} has no help"
        assert trait.metadata.get("config") is True, f"GpuHiveApp.{name} is not configurable"


@pytest.mark.parametrize("zone", ["Mars/Olympus_Mons", "", "Europe/"])
def test_bad_site_timezone_is_a_trait_error(zone: str) -> None:
    app = GpuHiveApp()
    with pytest.raises(TraitError, match="time zone"):
        app.site_timezone = zone
    with pytest.raises(TraitError):
        GpuHiveApp(site_timezone=zone)


@pytest.mark.parametrize(
    "trait", ["min_reservation", "max_reservation", "booking_horizon", "past_grace"]
)
@pytest.mark.parametrize("value", ["soon", "-5m", "0", "2 weeks"])
def test_bad_duration_is_a_trait_error(trait: str, value: str) -> None:
    app = GpuHiveApp()
    before = getattr(app, trait)
    with pytest.raises(TraitError, match=trait):
        setattr(app, trait, value)
    assert getattr(app, trait) == before


def test_settings_for_hive(tmp_path: Path) -> None:
    extra = tmp_path / "hosts.json"
    extra.write_text(json.dumps({"hosts": [{"name": "gpu9", "gpu_count": 2}]}))
    toml = tmp_path / "hosts.toml"
    toml.write_text('[[hosts]]\nname = "gpu8"\ntransport = "local"\n')
    app = GpuHiveApp(
        db_url=f"sqlite:///{tmp_path / 'x.sqlite'}",
        site_timezone="Europe/Warsaw",
        min_reservation="15m",
        max_reservation="3d",
        booking_horizon="30d",
        past_grace="90s",
        hosts=[{"name": "gpu1", "gpu_count": 4}],
        hosts_file=str(extra),
        admin_users={"boss"},
        admin_groups={"admins"},
        groups={"phd": ["alice", "bob"]},
    )
    settings = app.settings_for_hive()
    assert str(settings.policy.zone) == "Europe/Warsaw"
    assert settings.policy.min_length == timedelta(minutes=15)
    assert settings.policy.max_length == timedelta(days=3)
    assert settings.policy.horizon == timedelta(days=30)
    assert settings.policy.past_grace == timedelta(seconds=90)
    assert [h.name for h in settings.hosts] == ["gpu1", "gpu9"]
    assert [len(h.gpus) for h in settings.hosts] == [4, 2]
    assert settings.policy.authority.admin_users == frozenset({"boss"})
    assert settings.groups == {"phd": ["alice", "bob"]}
    app.hosts_file = str(toml)
    assert [h.name for h in app.settings_for_hive().hosts] == ["gpu1", "gpu8"]


def test_default_db_url_is_sqlite_in_the_data_dir() -> None:
    url = GpuHiveApp().resolved_db_url()
    assert url.startswith("sqlite:///")
    assert url.endswith("gpuhive/gpuhive.sqlite")


def test_the_startup_heap_is_frozen_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """What exists when the server is up leaves full collections, once per process."""
    monkeypatch.setattr(heap, "_frozen", False)
    before = gc.get_freeze_count()
    try:
        heap.freeze_startup_heap()
        frozen = gc.get_freeze_count()
        assert frozen > before
        made_since = [[] for _ in range(1000)]
        heap.freeze_startup_heap()  # a second server in the same process: nothing more
        # frozen objects may still die meanwhile (other threads run): the count only falls
        assert gc.get_freeze_count() <= frozen and len(made_since) == 1000
    finally:
        gc.unfreeze()  # the rest of the test run keeps its usual collections
