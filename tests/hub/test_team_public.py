"""Team mode with the Hub's public URL set and the service's hosts in a hosts file.

A real JupyterHub (configurable-http-proxy, the gpuhive service on PostgreSQL, alice's
single-user server in client mode) whose `c.JupyterHub.public_url` names the proxy by
another name (`localhost` for its 127.0.0.1), so a URL built from the Hub's configuration is
told apart from one built from a request. The service reads its hosts from a hosts file only.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_gpuhive.hosts.file import add_host, write_hosts
from tests.hub.conftest import Team
from tests.support.postgres import PostgresCluster
from tests.support.team_hub import HubSetupError, TeamHub, call
from tests.support.waiting import wait_for

pytestmark = pytest.mark.hub


def local_host(name: str) -> dict[str, object]:
    return {"name": name, "transport": "local", "gpu_count": 2, "gpu_model": "Simulated A100"}


@pytest.fixture(scope="module")
def hosts_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("service-hosts")
    os.chmod(folder, 0o755)
    path = folder / "hosts.toml"
    write_hosts(path, [local_host("filed1")])
    return path


@pytest.fixture(scope="module")
def pteam(postgres: PostgresCluster, hosts_file: Path) -> Iterator[Team]:
    settings = {"hosts": [], "hosts_file": str(hosts_file), "poll_interval": 0.5}
    try:
        hub = TeamHub(postgres.new_database(), {"alice": ["phd"]}, service_settings=settings,
                      public_host="localhost")  # fmt: skip
    except HubSetupError as error:
        pytest.fail(f"{error} (then `make test`; or `make sysdeps venv` first)", pytrace=False)
    hub.start()
    try:
        hub.spawn(["alice"])
        tokens = {"alice": hub.token_for("alice", ["access:servers!user=alice"])}
        service = {"alice": hub.token_for("alice", ["access:services!service=gpuhive"])}
        yield Team(hub, tokens, service, replica=None, replica_port=0)  # type: ignore[arg-type]
    except Exception:
        print(hub.log_tail())
        raise
    finally:
        hub.cleanup()


def host_names(team: Team) -> list[str]:
    listed = team.service(team.service_tokens["alice"], "GET", "hosts")
    assert listed.status == 200, listed
    return sorted(h["name"] for h in listed.body["hosts"])


def test_the_service_uses_a_change_to_its_hosts_file_without_a_restart(
    pteam: Team, hosts_file: Path
) -> None:
    assert host_names(pteam) == ["filed1"]
    add_host(hosts_file, local_host("filed2"))  # what `jupyter gpuhive hosts add` does
    wait_for(lambda: host_names(pteam) == ["filed1", "filed2"], 30, "the added host")
    booked = pteam.own("alice", "POST", "reservations",
                       {"title": "new host", "gpus": ["filed2:1"], "duration": "30m"})  # fmt: skip
    assert booked.status == 201, booked
    hosts_file.write_text('[[hosts]]\nname = "filed2"\ntransport = "carrier pigeon"\n')
    log = pteam.hub.dir / "jupyterhub.log"  # the service logs there (the Hub's output)
    wait_for(lambda: "changed but is not used" in log.read_text(errors="replace"), 30,
             "the broken file's error in the log")  # fmt: skip
    assert host_names(pteam) == ["filed1", "filed2"]  # a broken file changes nothing


def test_a_feed_made_through_a_users_server_has_the_hubs_public_url(pteam: Team) -> None:
    public = pteam.hub.public_url + "services/gpuhive/api/calendar/"
    made = pteam.own("alice", "POST", "feeds/personal")
    assert made.status == 201, made
    url = made.body["url"]
    assert url.startswith(public), (url, public)
    # What a calendar program does with it: fetch it with no credentials, from outside.
    feed = call("GET", url)
    assert feed.status == 200, feed
    assert "BEGIN:VCALENDAR" in str(feed.body)
    # The Hub's public URL wins over whatever a request says about where it arrived.
    forged = pteam.proxied(pteam.service_tokens["alice"], "POST", "feeds/personal",
                           headers={"X-Forwarded-Host": "evil.example"})  # fmt: skip
    assert forged.status == 201 and forged.body["url"].startswith(public), forged
    assert "evil" not in json.dumps(forged.body)
