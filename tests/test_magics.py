"""The magics in a real IPython shell against a real server (own process) and real jobs."""

from __future__ import annotations

import os
import sys
import threading
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output

from jupyter_gpuhive.notebook.magicviews import local
from jupyter_gpuhive.sim.cluster import SshdCluster, ensure_user
from tests.support.server import Client, JupyterServer, magics_shell
from tests.support.waiting import wait_for

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="jobs run as a real test user")

OWNER = "hivejob1"
USERS = {"tok-owner": {"name": OWNER}, "tok-bob": {"name": "bob"}}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterServer]:
    """A real server in its own process, monitoring a real sshd host (as the job owner)."""
    ensure_user(OWNER)
    root = tmp_path_factory.mktemp("magics")
    with SshdCluster([f"mg{os.getpid() % 10000}"]) as cluster:
        cluster.add_user(OWNER)
        host = next(iter(cluster))
        config = {
            "db_url": f"sqlite:///{root / 'hive.sqlite'}",
            "hosts": [{"name": "gpu1", "address": host.address, "port": host.port,
                       "user": OWNER}],
            "ssh_key": str(cluster.client_key),
            "known_hosts": [str(cluster.known_hosts)],
            "poll_interval": 0.5,
            "min_reservation": "1m",
            "site_timezone": "UTC",
        }  # fmt: skip
        srv = JupyterServer(config, USERS)
        client = Client(srv.port, "tok-owner")

        def discovered() -> bool:  # the 4 simulated GPUs
            status, body, _ = client.call("GET", "hosts")
            return status == 200 and len(body["hosts"][0]["gpus"]) == 4

        wait_for(discovered, 30, "discovery of the 4 simulated GPUs", interval=0.3)
        yield srv
        srv.stop()


@pytest.fixture
def shell(server: JupyterServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    return magics_shell(server.port, "tok-owner", monkeypatch, tmp_path)


def bundle(shell: Any, result: Any) -> dict[str, str]:
    """What a notebook receives for a cell's value: the MIME bundle of the display formatter."""
    data, _ = shell.display_formatter.format(result)
    return data  # type: ignore[no-any-return]


def test_gpureserve_pins_lists_refuses_and_cancels(shell: Any, server: JupyterServer) -> None:
    with capture_output() as out:
        done = shell.run_line_magic("gpureserve", "gpu1:2 --for 30m --title magic")
    assert out.stdout == ""  # one result, shown as the cell's value: nothing printed besides
    assert done["gpus"] == ["gpu1:2"]
    assert os.environ["CUDA_VISIBLE_DEVICES"] == done["gpu_uuids"][0]
    shown = bundle(shell, done)
    assert shown["text/plain"].startswith("Reserved gpu1:2 from ")
    assert f"CUDA_VISIBLE_DEVICES={done['gpu_uuids'][0]} in this kernel." in shown["text/plain"]
    assert "{'id'" not in shown["text/plain"]  # not the dict echoed
    assert "<b>Reserved gpu1:2 from " in shown["text/html"]
    assert (
        "<td style='padding:2px 8px;text-align:left;vertical-align:top'>gpu1:2</td>"
        in (shown["text/html"])
    )
    with pytest.raises(UsageError, match="reserved by hivejob1"):
        shell.run_line_magic("gpureserve", "gpu1:2 --for 30m --no-pin")
    with pytest.raises(UsageError, match="must be numbers"):
        shell.run_line_magic("gpureserve", "gpu1:x")
    listed = shell.run_line_magic("gpureserve", "--list")
    assert [r["id"] for r in listed] == [done["id"]]
    assert "magic" in bundle(shell, listed)["text/plain"]
    assert "data-state='mine'" in bundle(shell, listed)["text/html"]

    bob = Client(server.port, "tok-bob")
    status, held, _ = bob.call("POST", "reservations", {"title": "bob's", "gpus": ["gpu1:0"],
                                                        "duration": "20m"})  # fmt: skip
    assert status == 201, held
    status = shell.run_line_magic("gpustatus", "")
    shown = bundle(shell, status)
    lines = shown["text/plain"].splitlines()
    assert lines[0].split() == ["GPU", "STATE", "UTIL", "MEMORY", "PROCESSES", "NEXT"]
    assert lines[2].startswith("gpu1:2  mine until ")  # my rows first
    assert any(line.startswith("gpu1:0  bob until ") for line in lines)
    assert any(line.startswith("gpu1:1  free") for line in lines)
    html = shown["text/html"]
    assert html.index("data-state='mine'") < html.index("data-state='reserved'")
    assert "border-left:4px solid var(--jp-warn-color1, #f57c00)' data-state='reserved'" in html
    assert "data-state='free'" in html
    bob.call("DELETE", f"reservations/{held['id']}")

    with capture_output() as out:  # a cell whose value is the magic: its text, once
        shell.run_cell(f"%gpureserve --cancel {done['id']}", store_history=True)
    assert out.stdout.count("ended early: its GPUs are free.") == 1
    assert "'gpu_uuids'" not in out.stdout


def test_every_magic_has_help_and_results_can_be_bound(shell: Any) -> None:
    for magic in ("gpureserve", "gpustatus", "gpujob"):
        for flag in ("--help", "-h"):
            with capture_output() as out:
                assert shell.run_line_magic(magic, flag) is None
            assert out.stdout.startswith(f"usage: %{magic}"), out.stdout
            assert "-o NAME" in out.stdout or magic == "gpustatus"
    with capture_output() as out:
        assert shell.run_cell_magic("gpujob", "--help", "echo never run") is None
    assert out.stdout.startswith("usage: %gpujob")

    later = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(time.time() + 3 * 86400))
    shell.run_cell(f"r = %gpureserve gpu1:3 --start {later} --for 10m --no-pin")
    bound = shell.user_ns["r"]
    assert bound["gpus"] == ["gpu1:3"]
    with capture_output() as out:
        assert shell.run_line_magic("gpureserve", f"--cancel {bound['id']} -o gone") is None
    assert shell.user_ns["gone"]["id"] == bound["id"]
    shown = [o.data for o in out.outputs]  # -o shows it as well, as the same rich bundle
    assert len(shown) == 1
    assert "cancelled: its GPUs are free." in shown[0]["text/plain"]
    assert "cancelled: its GPUs are free." in shown[0]["text/html"]
    with pytest.raises(UsageError, match="-o needs a Python name"):
        shell.run_line_magic("gpureserve", "--list -o 'not a name'")


def test_gpujob_help_over_an_empty_cell_is_the_help() -> None:
    """`%%gpujob -h` alone in a cell, as a person types it, prints the help (IPython refused a
    cell magic with an empty body before the magic was called: a UsageError, #48 item 10)."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "jupyter_gpuhive")
    for cell in ("%%gpujob -h", "%%gpujob --help\n", "%%gpujob --dry-run -h\n\n   \n"):
        with capture_output() as out:
            result = shell.run_cell(cell)
        assert result.success, (cell, out.stderr, result.error_in_exec)
        assert out.stdout.startswith("usage: %gpujob"), (cell, out.stdout, out.stderr)
        assert "cell body is empty" not in out.stderr + out.stdout
    with capture_output() as out:  # an empty body without -h is still IPython's refusal
        assert not shell.run_cell("%%gpujob gpu1:0\n").success
    assert "usage: %gpujob" not in out.stdout


def test_gpureserve_waits_until_the_gpu_frees_up(shell: Any, server: JupyterServer) -> None:
    bob = Client(server.port, "tok-bob")
    now = time.time()
    start = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(now))
    status, held, _ = bob.call(
        "POST", "reservations", {"title": "bob's", "gpus": ["gpu1:3"], "start": start,
                                 "duration": "1h"}
    )  # fmt: skip
    assert status == 201, held
    threading.Timer(2.0, lambda: Client(server.port, "tok-bob").call(
        "DELETE", f"reservations/{held['id']}")).start()  # fmt: skip
    began = time.monotonic()
    with capture_output():
        done = shell.run_line_magic("gpureserve", "gpu1:3 --for 10m --wait --timeout 30s --no-pin")
    assert done["gpus"] == ["gpu1:3"]
    assert time.monotonic() - began >= 1.5
    shell.run_line_magic("gpureserve", f"--cancel {done['id']}")


def test_gpujob_streams_output_and_can_be_stopped(shell: Any) -> None:
    tasks = shell.run_cell_magic(
        "gpujob", "gpu1:0 --template pytorch --option mode=env --dry-run", "python3 x.py"
    )
    assert tasks[0]["env"]["WORLD_SIZE"] == "1"
    assert "#   MASTER_ADDR=" in bundle(shell, tasks)["text/plain"]
    assert bundle(shell, tasks)["text/html"].startswith("<pre class='gpuhive-preview'># task 0")
    cell = 'python3 -c \'import os; print("gpus", os.environ["CUDA_VISIBLE_DEVICES"])\''
    with capture_output() as out:
        job = shell.run_cell_magic("gpujob", "gpu1:0 --name hello", cell)
    assert job["status"] == "succeeded", out.stdout
    assert f"gpus {job['gpus'][0]}" in out.stdout
    shown = bundle(shell, job)
    assert shown["text/plain"].splitlines()[0] == f"Job {job['id']} (hello) succeeded."
    assert shown["text/plain"].splitlines()[1].split() == ["TASK", "HOST", "GPUS", "STATE", "EXIT"]
    assert f"<b>Job {job['id']} (hello) succeeded.</b>" in shown["text/html"]
    with capture_output() as out:
        sleeper = shell.run_cell_magic("gpujob", "gpu1:1 --no-follow --name sleeper", "sleep 60")
        stopped = shell.run_line_magic("gpujob", f"stop {sleeper['id']}")
    assert out.stdout == ""
    assert f"%gpujob attach {sleeper['id']}" in bundle(shell, sleeper)["text/plain"]
    assert stopped["status"] == "stopped"
    listed = shell.run_line_magic("gpujob", "")
    assert {"hello", "sleeper"} <= {j["name"] for j in listed}
    assert "sleeper" in bundle(shell, listed)["text/html"]
    with pytest.raises(UsageError, match="GPUs"):
        shell.run_cell_magic("gpujob", "--name nothing", "echo hi")
    with pytest.raises(UsageError, match="caffe"):
        shell.run_cell_magic("gpujob", "gpu1:0 --template caffe", "echo hi")
    # --image and --mount reach the server, which refuses them in words (no host has an engine).
    with pytest.raises(UsageError, match="No host runs a container engine"):
        shell.run_cell_magic("gpujob", "gpu1:0 --image lab/x:1 --mount /data --dry-run", "true")
    with pytest.raises(UsageError, match="engine flags are never accepted"):
        shell.run_cell_magic("gpujob", "gpu1:0 --image=--privileged", "true")


def succeeded(server: JupyterServer, job_id: int) -> Any:
    """The job once it has succeeded (waits for it)."""
    client = Client(server.port, "tok-owner")

    def done() -> Any:
        status, job, _ = client.call("GET", f"jobs/{job_id}")
        return job if status == 200 and job["status"] == "succeeded" else None

    return wait_for(done, 30, f"job {job_id} to succeed", interval=0.3)


def test_gpujob_queues_a_gpu_count_on_one_host(shell: Any, server: JupyterServer) -> None:
    job = shell.run_cell_magic(
        "gpujob", "3 --queue --same-host required --walltime 10m --name counted", "sleep 1"
    )
    assert job["options"] == {"gpu_count": 3, "same_host": "required"} and job["queued"]
    with pytest.raises(UsageError, match="invalid choice"):
        shell.run_cell_magic("gpujob", "2 --queue --same-host nearby", "sleep 1")
    with pytest.raises(UsageError, match="queue a GPU count"):
        shell.run_cell_magic("gpujob", "3", "sleep 1")  # a count is for the queue
    done = succeeded(server, job["id"])  # the queue picks three GPUs of gpu1 and runs it
    assert [(t["host"], len(t["gpus"])) for t in done["tasks"]] == [("gpu1", 3)]


def test_gpustatus_shows_where_my_queued_job_waits_and_why(
    shell: Any, server: JupyterServer
) -> None:
    bob = Client(server.port, "tok-bob")
    status, held, _ = bob.call("POST", "reservations", {"title": "bob's", "gpus": ["gpu1:3"],
                                                        "duration": "20m"})  # fmt: skip
    assert status == 201, held
    job = shell.run_cell_magic("gpujob", "gpu1:3 --queue --walltime 10m --name waits", "true")
    client = Client(server.port, "tok-owner")
    try:

        def placed() -> Any:  # the queue's pass has seen it wait
            status, body, _ = client.call("GET", "queue")
            found = [j for j in body["jobs"] if j["id"] == job["id"]] if status == 200 else []
            return found[0] if found and found[0]["place"] else None

        queued = wait_for(placed, 30, f"job {job['id']} to have a place", interval=0.3)
        assert "gpu1:3 is reserved" in queued["waiting_for"]
        text = bundle(shell, shell.run_line_magic("gpustatus", ""))["text/plain"]
        row = next(line for line in text.splitlines() if line.startswith(f"{job['id']} waits"))
        assert row.endswith(queued["waiting_for"])
        place = queued["place"]
        assert (f" {place} (next) " if place == 1 else f" {place} ") in row
        if queued["estimated_start"]:  # after bob's booking
            assert local(queued["estimated_start"]) in row
    finally:
        client.call("POST", f"jobs/{job['id']}/stop")
        bob.call("DELETE", f"reservations/{held['id']}")


def test_gpujob_runs_a_pytorch_template_job_with_rank_prefixed_output(shell: Any) -> None:
    cell = (
        'python3 -c \'import os; print("rank", os.environ["RANK"], "of", '
        'os.environ["WORLD_SIZE"], os.environ["MASTER_ADDR"])\''
    )
    with capture_output() as out:
        job = shell.run_cell_magic(
            "gpujob", "gpu1:2,3 --template pytorch --option mode=env --name ddp", cell
        )
    assert job["status"] == "succeeded", out.stdout
    lines = out.stdout.splitlines()
    assert "[0] rank 0 of 2 127.0.0.1" in lines
    assert "[1] rank 1 of 2 127.0.0.1" in lines


def test_pinning_is_refused_once_a_framework_holds_cuda(
    shell: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No GPU here, so a framework that initialised CUDA cannot be produced for real: stand
    # in an imported TensorFlow, which is enough for the magic to refuse.
    monkeypatch.setitem(sys.modules, "tensorflow", types.ModuleType("tensorflow"))
    done = shell.run_line_magic("gpureserve", "gpu1:1 --for 10m")
    assert "TensorFlow has already set up CUDA" in bundle(shell, done)["text/plain"]
    assert "CUDA_VISIBLE_DEVICES" not in os.environ
    shell.run_line_magic("gpureserve", f"--cancel {done['id']}")


def test_gpujob_options_are_typed_and_preemption_flags_checked(shell: Any) -> None:
    with capture_output():
        preview = shell.run_cell_magic(
            "gpujob",
            "gpu1:0 --template pytorch --option mode=env --option resume=yes "
            "--option checkpoint_every=5 --dry-run",
            "python3 train.py",
        )
    env = preview[0]["env"]
    assert env["GPUHIVE_CHECKPOINT_EVERY"] == "5" and "GPUHIVE_CHECKPOINT_SOURCE" in env
    for line, words in (
        ("gpu1:0 --template pytorch --option resume=maybe --dry-run", "takes true or false"),
        ("gpu1:0 --template pytorch --option checkpoint_every=x --dry-run", "whole number"),
        ("gpu1:0 --preempt-signal SIGUSR1", "go with --preemptible"),
        ("gpu1:0 --grace 5", "go with --preemptible"),
        ("gpu1:0 --preemptible --grace -1", "0 or more"),
    ):
        with pytest.raises(UsageError, match=words):
            shell.run_cell_magic("gpujob", line, "true")
    with pytest.raises(UsageError, match="--reclaim-before-start has no use"):
        shell.run_line_magic("gpureserve", "gpu1:0 --no-lend --reclaim-before-start")


def test_a_holder_sees_the_loan_and_reclaims_with_a_magic(
    shell: Any, server: JupyterServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    bob = Client(server.port, "tok-bob")
    status, held, _ = bob.call("POST", "reservations", {"title": "idle", "gpus": ["gpu1:3"],
                                                        "duration": "30m"})  # fmt: skip
    assert status == 201 and held["lend"] is True, held
    job: dict[str, Any] = {}
    try:
        job = shell.run_cell_magic(
            "gpujob", "gpu1:3 --preemptible --preempt-signal SIGUSR1 --grace 3 --walltime 10m "
            "--name borrower", "sleep 120")  # fmt: skip
        assert (job["preemptible"], job["preempt_signal"], job["grace_s"], job["queued"]) == (
            True, "SIGUSR1", 3, True)  # fmt: skip
        assert "queued (preemptible)" in bundle(shell, job)["text/plain"]

        def lent() -> Any:
            _, found, _ = bob.call("GET", f"reservations/{held['id']}")
            return found if found.get("lent_to") else None

        wait_for(lent, 30, "the idle reservation to be lent to the job", interval=0.3)
        with pytest.raises(UsageError):  # not the holder's: refused in the server's words
            shell.run_line_magic("gpureserve", f"--reclaim {held['id']}")

        holder = magics_shell(server.port, "tok-bob", monkeypatch, tmp_path)
        listed = bundle(holder, holder.run_line_magic("gpureserve", "--list"))["text/plain"]
        assert f"lent to job {job['id']} (preemptible) until you start" in listed
        done = holder.run_line_magic("gpureserve", f"--reclaim {held['id']}")
        assert done["reclaimed"] == [job["id"]]
        assert f"preemptible job {job['id']} signalled to save and stop" in repr(done)

        owner = Client(server.port, "tok-owner")

        def preempted() -> Any:
            _, found, _ = owner.call("GET", f"jobs/{job['id']}")
            return found if found.get("restarts") == 1 else None

        back = wait_for(preempted, 30, "the job to be preempted", interval=0.3)
        assert [e["event"] for e in back["history"]][:1] == ["preempted"]
        assert back["history"][0]["reservation"] == held["id"]
        # What it cost: its run up to the reclaim, all counted as lost (no checkpoint known).
        lost = back["history"][0]["gpu_h"]
        assert back["preemptions"] == 1 and lost > 0 and back["lost_gpu_h"] == lost
        assert back["service_gpu_h"] >= lost
        _, listed, _ = owner.call("GET", "jobs")
        [same] = [j for j in listed["jobs"] if j["id"] == job["id"]]
        assert (same["preemptions"], same["lost_gpu_h"]) == (1, lost)

        def requeued() -> Any:
            _, found, _ = owner.call("GET", f"jobs/{job['id']}")
            return found if found.get("status") == "pending" else None

        waiting = wait_for(requeued, 30, "the job to be back in the queue", interval=0.3)
        assert waiting["service_gpu_h"] == waiting["lost_gpu_h"] == lost  # no run now
        mine = magics_shell(server.port, "tok-owner", monkeypatch, tmp_path)  # not bob's now
        text = bundle(mine, mine.run_line_magic("gpustatus", ""))["text/plain"]
        row = next(line for line in text.splitlines() if line.startswith(f"{job['id']} "))
        assert row.endswith(f"1× · had {lost:.3g} GPU-h, lost {lost:.3g}")
        never = holder.run_line_magic("gpureserve", "gpu1:2 --for 10m --no-lend --no-pin")
        assert never["lend"] is False
        assert "never lent" in bundle(holder, never)["text/plain"]
        nothing = holder.run_line_magic("gpureserve", f"--reclaim {never['id']}")
        assert nothing["reclaimed"] == [] and "nothing was running" in repr(nothing)
        holder.run_line_magic("gpureserve", f"--cancel {never['id']}")
        with pytest.raises(UsageError):
            holder.run_line_magic("gpureserve", "--reclaim 999999")
    finally:
        if job:  # out of the queue, and stopped if it borrowed the idle GPU again meanwhile
            owner = Client(server.port, "tok-owner")
            owner.call("POST", f"jobs/{job['id']}/dequeue")
            owner.call("POST", f"jobs/{job['id']}/stop")
        bob.call("DELETE", f"reservations/{held['id']}")


def test_gpujob_asks_for_a_vendor_and_a_model(shell: Any, server: JupyterServer) -> None:
    job = shell.run_cell_magic(
        "gpujob", "1 --queue --vendor nvidia --model a100 --walltime 10m --name nv", "sleep 1"
    )
    assert job["options"] == {"gpu_count": 1, "vendor": "nvidia", "model": "a100"}
    with pytest.raises(UsageError, match="1 AMD GPUs; there are only 0"):
        shell.run_cell_magic("gpujob", "1 --queue --vendor amd --walltime 10m", "sleep 1")
    with pytest.raises(UsageError, match="known: amd, nvidia"):
        shell.run_cell_magic("gpujob", "1 --queue --vendor intel", "sleep 1")
    with pytest.raises(UsageError, match="gpu1:0 is an NVIDIA GPU"):
        shell.run_cell_magic("gpujob", "gpu1:0 --model MI300X --dry-run", "true")
    assert succeeded(server, job["id"])["tasks"][0]["host"] == "gpu1"
    # One vendor at this site: %gpustatus does not tag each GPU with it.
    assert "(NVIDIA)" not in shell.run_line_magic("gpustatus", "").text()
    # %gpureserve by count and --earliest take the same choice.
    with pytest.raises(UsageError, match=r"No host of this site has AMD GPUs \(its GPUs: NVIDIA\)"):
        shell.run_line_magic("gpureserve", "1 --vendor amd --for 10m --no-pin")
    with pytest.raises(UsageError, match="Only 0 NVIDIA MI300X GPUs are free then; 1 wanted"):
        shell.run_line_magic("gpureserve", "1 --vendor nvidia --model MI300X --for 10m --no-pin")
    with pytest.raises(UsageError, match="known: amd, nvidia"):
        shell.run_line_magic("gpureserve", "1 --earliest --vendor intel --for 10m")
    with pytest.raises(UsageError, match="No slot fits"):
        shell.run_line_magic("gpureserve", "1 --earliest --model mi300x --for 10m")
    slots = shell.run_line_magic("gpureserve", "2 --earliest --vendor nvidia --for 10m")
    assert slots and all(g.startswith("gpu1:") for g in slots[0]["gpus"])
