"""docs/team-mode.md followed literally: its hosts file, its PostgreSQL set-up, its Hub line.

The code blocks are read from the document itself, so the document cannot drift from what
is tested: the TOML hosts file is loaded by the service's own settings code, the PostgreSQL
commands run against a fresh cluster (as its `postgres` superuser) with the pg_hba.conf
line added as the document says, and the service's store is created through the URL form
the document gives (role, password, host and port).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from jupyter_gpuhive.hosts.config import parse_hosts
from jupyter_gpuhive.server.app import GpuHiveApp
from jupyter_gpuhive.store import Store
from tests.support.docblocks import code_blocks
from tests.support.postgres import PostgresCluster, _bin, running_postgres
from tests.support.team_hub import EXAMPLE, REPO, TeamHub

DOC = REPO / "docs" / "team-mode.md"


def blocks(language: str, containing: str) -> list[str]:
    """The document's code blocks of `language` that contain `containing`, dedented."""
    found = [b.text for b in code_blocks(DOC) if b.language == language and containing in b.text]
    assert found, f"no {language or 'plain'} block with {containing!r} in {DOC}"
    return found


def test_the_documented_hosts_file_is_what_the_service_reads(tmp_path: Path) -> None:
    (toml,) = blocks("toml", "[[hosts]]")
    path = tmp_path / "hosts.toml"
    path.write_text(toml)
    app = GpuHiveApp(hosts_file=str(path))
    hosts = {h.name: h for h in parse_hosts(app.all_host_specs())}
    assert list(hosts) == ["gpu1", "gpu2", "box"]
    gpu1, gpu2, box = hosts["gpu1"], hosts["gpu2"], hosts["box"]
    assert (gpu1.address, gpu1.port, gpu1.user, gpu1.transport) == (
        "gpu1.lab.example", 22, "gpuhive", "ssh"
    )  # fmt: skip
    assert [g.index for g in gpu1.gpus] == [0, 1, 2, 3]
    assert {g.model for g in gpu1.gpus} == {"A100 40GB"}
    assert gpu1.extra["env"] == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert [(g.index, g.memory_mib) for g in gpu2.gpus] == [(0, 81559), (1, 81559)]
    assert gpu2.gpus[0].uuid.startswith("GPU-8a1c0f3e")
    assert (box.transport, len(box.gpus)) == ("local", 2)
    assert box.extra["env"]["PATH"].startswith("/usr/local/cuda/bin:")


def test_the_hub_tests_load_the_example_as_the_document_says() -> None:
    # Deploy's one-line block (the quick start's Hub config ends with such a line too).
    (line,) = [b.strip() for b in blocks("python", "load_subconfig(") if "\n" not in b.strip()]
    assert line == 'load_subconfig("/etc/jupyterhub/gpuhive_hub_config.py")'
    hub = TeamHub("postgresql+psycopg://nobody@127.0.0.1/none", {"alice": ["phd"]})
    try:
        written = [ln for ln in hub.config.read_text().splitlines() if ln.strip()]
    finally:
        hub.cleanup()
    # The generated jupyterhub_config.py ends with that line (for the example's path).
    assert written[-1] == f"load_subconfig({str(EXAMPLE)!r})  # noqa: F821"
    assert sum("load_subconfig" in ln for ln in written) == 1


@pytest.fixture
def cluster() -> Iterator[PostgresCluster]:
    """A cluster of its own: the test edits its pg_hba.conf."""
    with running_postgres() as fresh:
        yield fresh


def cluster_env(cluster: PostgresCluster) -> dict[str, str]:
    """What a shell on the database's machine has, with libpq pointed at `cluster`."""
    path = f"{Path(_bin('psql')).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    return {"PATH": path, "PGHOST": "127.0.0.1", "PGPORT": str(cluster.port),
            "PGUSER": cluster.user, "LANG": "C.UTF-8"}  # fmt: skip


def as_shell(script: str, cluster: PostgresCluster) -> subprocess.CompletedProcess[str]:
    """Run a documented block with bash, as root with no terminal (a new session)."""
    return subprocess.run(
        ["bash", "-e", "-c", script], env=cluster_env(cluster), capture_output=True, text=True,
        timeout=60, stdin=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip


def as_postgres(command: str, cluster: PostgresCluster) -> str:
    """Run one `runuser -u postgres -- …` command line against `cluster`."""
    words = shlex.split(command, comments=True)
    assert words[:4] == ["runuser", "-u", "postgres", "--"], command
    done = as_shell(command, cluster)
    assert done.returncode == 0, (command, done.stderr)
    return done.stdout


def test_the_documented_postgresql_setup_gives_the_service_its_store(
    cluster: PostgresCluster,
) -> None:
    secret = "s3cret pa@ss"
    (setup,) = blocks("sh", "CREATE ROLE gpuhive")
    assert setup.startswith("runuser -u postgres -- psql"), setup  # no sudo, no terminal
    made = as_shell(setup.replace("SECRET", secret), cluster)
    assert made.returncode == 0, made.stderr
    (hba,) = blocks("", "scram-sha-256")
    rule = [ln for ln in hba.splitlines() if ln.strip() and not ln.startswith("#")]
    assert rule == ["host    gpuhive   gpuhive  127.0.0.1/32   scram-sha-256"]
    hba_file = as_postgres("runuser -u postgres -- psql -tA -c 'SHOW hba_file'", cluster)
    path = Path(hba_file.strip())
    path.write_text(rule[0] + "\n" + path.read_text())  # above the cluster's trust lines
    as_postgres("runuser -u postgres -- psql -c 'SELECT pg_reload_conf()'", cluster)

    (config,) = blocks("python", 'c.GpuHiveApp.db_url = "postgresql')
    documented = re.search(r'db_url = "([^"]+)"', config)
    assert documented is not None
    url = documented.group(1)
    assert url == "postgresql+psycopg://gpuhive:SECRET@127.0.0.1:5432/gpuhive"
    # The document's advice for special characters: percent-encode the password.
    from urllib.parse import quote

    url = url.replace("SECRET", quote(secret, safe="")).replace(":5432/", f":{cluster.port}/")
    # The document's check of the URL, with the Hub environment's Python: silent when it works.
    (check,) = blocks("sh", "sqlalchemy.create_engine")
    check = check.replace("/opt/jupyterhub/bin/python", sys.executable)
    site_url = "postgresql+psycopg://gpuhive:SECRET@127.0.0.1:5432/gpuhive"
    works = as_shell(check.replace(site_url, url), cluster)
    assert (works.returncode, works.stdout, works.stderr) == (0, "", ""), works
    wrong = as_shell(check.replace(site_url, url.replace("s3cret", "wrong")), cluster)
    assert wrong.returncode != 0 and "password authentication failed" in wrong.stderr, wrong
    store = Store(url)
    store.open()  # the gpuhive role creates the tables (btree_gist was created for it)
    try:
        with store.db.read() as conn:
            assert conn.exec_driver_sql("SELECT current_user").scalar() == "gpuhive"
    finally:
        store.close()
    # The pg_hba line demands the password: without it the role is refused.
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(f"host=127.0.0.1 port={cluster.port} user=gpuhive dbname=gpuhive")


def test_the_documented_key_command_reads_the_services_settings(tmp_path: Path) -> None:
    (command,) = blocks("sh", "gpuhive key --config")
    config = tmp_path / "gpuhive_config.py"
    key = tmp_path / "ssh" / "id_ed25519"
    config.write_text(f"c = get_config()  # noqa: F821\nc.GpuHiveApp.ssh_key = {str(key)!r}\n")
    command = command.replace("/etc/gpuhive/gpuhive_config.py", str(config))
    command = command.replace("/opt/jupyterhub/bin/", f"{Path(sys.executable).parent}/")
    done = subprocess.run(["bash", "-e", "-c", command], capture_output=True, text=True,
                          timeout=60, env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ssh-ed25519 "), done.stdout
    assert key.stat().st_mode & 0o777 == 0o600  # made where the service's settings say
