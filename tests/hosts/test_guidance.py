"""The fix shown for a host that is down, from the reasons real sshd failures give."""

from __future__ import annotations

import shutil

import pytest

from jupyter_gpuhive.hosts.guidance import advise, host_advice, setup_text
from jupyter_gpuhive.hosts.pool import HostPool, HostUnavailable
from jupyter_gpuhive.hosts.ssh import ensure_client_key
from tests.hosts.helpers import G1


def down(pool: HostPool, name: str) -> dict[str, object]:
    decl, status = pool.hosts[name], pool.status(name)
    assert status.state == "down"
    return {"name": name, "address": decl.address, "port": decl.port, "transport": "ssh",
            **status.to_json()}  # fmt: skip


async def test_a_key_that_is_not_authorized_gets_the_exact_authorized_keys_line(
    hive_cluster, make_pool, monitor_user, tmp_path
) -> None:
    path = tmp_path / "gpuhive_ed25519"
    public = ensure_client_key(path).export_public_key("openssh").decode().strip()
    pool = make_pool(hive_cluster, names=[G1], client_keys=[str(path)])
    with pytest.raises(HostUnavailable):
        await pool.run(G1, "true")
    advice = host_advice(down(pool, G1), lambda: public)
    assert advice is not None
    first, example = advice["steps"]
    assert first == {
        "text": f"Add this line to ~{monitor_user}/.ssh/authorized_keys on {G1}:",
        "command": public,
    }
    assert example["command"] == f"echo '{public}' >> ~/.ssh/authorized_keys"
    assert advice["message"].startswith(f"{G1} is down: ")
    # Without a key file yet, the step names the command that makes and prints it.
    assert host_advice(down(pool, G1), lambda: None)["steps"] == [
        {"text": first["text"], "command": "jupyter gpuhive key"}
    ]


async def test_an_unknown_host_key_gets_the_trust_command(make_cluster, make_pool, tmp_path):
    cluster = make_cluster(1)
    known_hosts = tmp_path / "known_hosts"
    shutil.copyfile(cluster.known_hosts, known_hosts)
    pool = make_pool(cluster, known_hosts=[str(known_hosts)])
    cluster.rotate_host_key("gpu1")
    with pytest.raises(HostUnavailable):
        await pool.run("gpu1", "true")
    advice = host_advice(down(pool, "gpu1"), lambda: "unused")
    assert advice is not None
    assert [s["command"] for s in advice["steps"]] == ["jupyter gpuhive trust gpu1"]


def test_no_advice_for_a_healthy_host_and_setup_only_without_hosts() -> None:
    healthy = {"name": "h", "state": "up", "error": None, "gpu_error": None}
    reply = advise([healthy], lambda: None)
    assert reply == {"hosts": [{**healthy, "advice": None}], "setup": None}
    failing = {**healthy, "gpu_error": "nvidia-smi: command not found"}
    assert "nvidia-smi failed there" in host_advice(failing, lambda: None)["message"]
    empty = advise([], lambda: None)
    assert empty["hosts"] == []
    assert empty["setup"]["message"] == "No GPU hosts are configured yet."
    text = setup_text()
    assert "jupyter gpuhive hosts add gpu1 gpu1.example.org --user $USER" in text
    assert "jupyter gpuhive init" in text
