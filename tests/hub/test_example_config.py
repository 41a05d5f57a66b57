"""examples/jupyterhub_config.py loaded as docs/team-mode.md says: it adds, never replaces.

Fast (no Hub is started): the config files are loaded by JupyterHub's own loader and the
settings read back from JupyterHub's and the Spawner's traits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from jupyterhub.app import JupyterHub
from jupyterhub.spawner import Spawner

from tests.support.team_hub import EXAMPLE

SITE = """\
c = get_config()  # noqa: F821
c.JupyterHub.services = [{"name": "grafana", "url": "http://127.0.0.1:3000"}]
c.JupyterHub.load_roles = [{"name": "ops", "scopes": ["admin:users"], "users": ["olga"]}]
c.JupyterHub.load_groups = {"admins": {"users": ["carol"]}, "phd": {"users": ["alice"]}}
c.JupyterHub.custom_scopes = {"custom:grafana:view": {"description": "see dashboards"}}
c.Authenticator.admin_users = {"carol"}
c.Spawner.args = ["--allow-root"]
c.Spawner.server_token_scopes = ["read:users:name!user"]
"""


def load(tmp_path: Path, site: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The Hub's and the Spawner's settings after loading the site's config file."""
    monkeypatch.setenv("GPUHIVE_SERVICE_PORT", "10999")
    monkeypatch.setenv("GPUHIVE_SERVICE_CONFIG", "/etc/gpuhive/test.py")
    config = tmp_path / "jupyterhub_config.py"
    config.write_text(site + f"load_subconfig({str(EXAMPLE)!r})  # noqa: F821\n")
    hub = JupyterHub()
    hub.load_config_file(str(config))
    spawner = Spawner(config=hub.config)
    return {
        "services": hub.services,
        "roles": {role["name"]: role for role in hub.load_roles},
        "groups": hub.load_groups,
        "custom_scopes": hub.custom_scopes,
        "extra_user_scopes": hub.extra_user_scopes,
        "admin_users": hub.config.Authenticator.admin_users,
        "args": spawner.args,
        "server_token_scopes": spawner.server_token_scopes,
    }


def test_the_example_loaded_last_keeps_every_site_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    got = load(tmp_path, SITE, monkeypatch)
    assert [s["name"] for s in got["services"]] == ["grafana", "gpuhive"]
    gpuhive = got["services"][1]
    assert gpuhive["url"] == "http://127.0.0.1:10999"
    assert gpuhive["command"][-2:] == ["--config", "/etc/gpuhive/test.py"]
    assert set(got["roles"]) == {"ops", "gpuhive-admin"}
    assert got["roles"]["ops"]["users"] == ["olga"]
    assert got["roles"]["gpuhive-admin"]["groups"] == ["admins"]
    assert got["groups"] == {"admins": {"users": ["carol"]}, "phd": {"users": ["alice"]}}
    assert set(got["custom_scopes"]) == {"custom:grafana:view", "custom:gpuhive:admin"}
    assert got["extra_user_scopes"] == {"access:services!service=gpuhive"}
    assert got["admin_users"] == {"carol"}
    assert got["args"] == [
        "--allow-root",
        "--GpuHiveApp.service_url=http://127.0.0.1:10999/services/gpuhive/",
    ]
    assert got["server_token_scopes"] == [
        "read:users:name!user",
        "users:activity!user",
        "access:servers!server",
        "access:services!service=gpuhive",
        "custom:gpuhive:admin",
    ]


def test_the_example_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    got = load(tmp_path, "c = get_config()  # noqa: F821\n", monkeypatch)
    assert [s["name"] for s in got["services"]] == ["gpuhive"]
    assert set(got["roles"]) == {"gpuhive-admin"}
    assert got["groups"] == {}  # the role creates its group; members are the site's
    assert got["args"] == ["--GpuHiveApp.service_url=http://127.0.0.1:10999/services/gpuhive/"]
    assert "custom:gpuhive:admin" in got["server_token_scopes"]


def test_replicas_behind_a_balancer_with_a_fixed_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """examples/deploy/'s Hub drop-in: no service started, the balancer routed, a fixed token."""
    token_file = tmp_path / "service-token.env"
    token_file.write_text("# the replicas' EnvironmentFile\nJUPYTERHUB_API_TOKEN=0123abcd\n")
    monkeypatch.setenv("GPUHIVE_SERVICE_URL", "http://127.0.0.1:10100/")
    monkeypatch.setenv("GPUHIVE_SERVICE_TOKEN_FILE", str(token_file))
    got = load(tmp_path, "c = get_config()  # noqa: F821\n", monkeypatch)
    (gpuhive,) = got["services"]
    assert gpuhive["url"] == "http://127.0.0.1:10100"
    assert "command" not in gpuhive  # the replicas are the site's (systemd), not the Hub's
    assert gpuhive["api_token"] == "0123abcd"
    assert got["args"] == ["--GpuHiveApp.service_url=http://127.0.0.1:10100/services/gpuhive/"]
    token_file.write_text("0123abcd\n")  # or the bare token
    assert (
        load(tmp_path, "c = get_config()  # noqa: F821\n", monkeypatch)["services"][0]["api_token"]
        == "0123abcd"
    )


def test_replicas_without_a_token_file_stop_the_hub(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUHIVE_SERVICE_URL", "http://127.0.0.1:10100")
    with pytest.raises(ValueError, match="GPUHIVE_SERVICE_TOKEN_FILE"):
        load(tmp_path, "c = get_config()  # noqa: F821\n", monkeypatch)
