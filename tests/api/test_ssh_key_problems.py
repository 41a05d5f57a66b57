"""GET hosts says why gpuhive's own SSH key cannot log in (real sshd, real key files).

A `.pub` beside the private key that is not the private key's own (replaced by another
key's) stops asyncssh before it connects. The host used to stay "unknown" with no error, so
the sidebar said nothing; now it is down with the reason, the file and the fix.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpuhive.sim.cluster import SshdCluster
from tests.support.waiting import until

NAME = f"kp{uuid.uuid4().hex[:6]}"

pytestmark = pytest.mark.skipif(
    shutil.which("sshd", path="/usr/sbin:/usr/bin:/sbin:/bin") is None,
    reason="needs OpenSSH sshd",
)


@pytest.fixture(scope="module")
def cluster() -> Iterator[SshdCluster]:
    with SshdCluster([NAME]) as running:
        yield running


@pytest.fixture
def key(cluster: SshdCluster, tmp_path: Path) -> Path:
    """The cluster's authorized private key, with another key's public half as its .pub."""
    folder = tmp_path / "ssh"
    folder.mkdir(mode=0o700)
    path = folder / "id_ed25519"
    shutil.copyfile(cluster.client_key, path)
    os.chmod(path, 0o600)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(folder / "other")],
                   check=True)  # fmt: skip
    shutil.copyfile(folder / "other.pub", f"{path}.pub")
    return path


@pytest.fixture
def hive_config(cluster: SshdCluster, key: Path) -> dict[str, Any]:
    host = cluster[NAME]
    return {
        "hosts": [{"name": NAME, "address": host.address, "port": host.port, "user": "root",
                   "gpu_count": 1}],
        "ssh_key": str(key),
        "known_hosts": [str(cluster.known_hosts)],
        "poll_interval": 0.3,
        "site_timezone": "UTC",
        "admin_groups": ["admins"],
    }  # fmt: skip


def write_own_public_key(key: Path) -> None:
    """What the reason says to do: the .pub made from the private key itself."""
    own = subprocess.run(["ssh-keygen", "-y", "-f", str(key)], check=True, capture_output=True,
                         text=True)  # fmt: skip
    Path(f"{key}.pub").write_text(own.stdout)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_a_public_key_that_is_not_the_private_keys_own_is_named_in_get_hosts(
    api: Any, running_hive: Any, key: Path
) -> None:
    alice = api("alice")

    async def down() -> Any:
        (host,) = (await alice("GET", "hosts")).body["hosts"]
        return host if host["state"] == "down" and host["error"] else None

    host = await until(down, 20, "the host down, with a reason")
    assert f"SSH public key {key}.pub does not match its private key {key}" in host["error"]
    assert f"ssh-keygen -y -f {key}" in host["error"]
    assert host["error"] in host["advice"]["message"]  # what the sidebar shows

    # With the right .pub again, the same key logs in (the reason was the file, not the host).
    write_own_public_key(key)

    async def up() -> Any:
        (host,) = (await alice("GET", "hosts")).body["hosts"]
        return host if host["state"] == "up" else None

    await until(up, 90, "the host up with the fixed key")
