"""What %gpustatus shows with no hosts and with a host down (no server needed)."""

from __future__ import annotations

from IPython.core.interactiveshell import InteractiveShell

from jupyter_gpuhive.hosts.guidance import advise
from jupyter_gpuhive.notebook.magicviews import GpuStatus


def bundle(result: object) -> dict[str, str]:
    data, _ = InteractiveShell.instance().display_formatter.format(result)
    return data  # type: ignore[no-any-return]


def test_gpustatus_without_hosts_shows_the_first_steps() -> None:
    shown = bundle(GpuStatus([], "me"))
    assert shown["text/plain"].startswith("No GPU hosts are configured yet.")
    assert "jupyter gpuhive hosts add gpu1 gpu1.example.org --user $USER" in shown["text/plain"]
    assert "<b>No GPU hosts are configured yet.</b>" in shown["text/html"]
    assert "jupyter gpuhive init</code>" in shown["text/html"]


def test_gpustatus_with_a_host_down_shows_its_fix_after_the_table() -> None:
    error = "127.0.0.1:2200 refused the key for user hive: add the line from `jupyter gpuhive key`"
    hosts = advise(
        [{"name": "gpu9", "state": "down", "error": error, "transport": "ssh", "gpus": []},
         {"name": "gpu1", "state": "up", "gpus": [
             {"id": "gpu1:0", "processes": [], "reservation": None, "next_reservation": None},
             {"id": "gpu1:1", "processes": [{"pid": 7, "user": "me"}],
              "reservation": {"owner": "me", "end": "2030-01-01T10:00:00+00:00"}}]}],
        lambda: "ssh-ed25519 AAAAkey gpuhive",
    )["hosts"]  # fmt: skip
    shown = bundle(GpuStatus(hosts, "me"))
    lines = shown["text/plain"].splitlines()
    assert lines[2].startswith("gpu1:1  mine until ")  # mine first
    assert lines[3].startswith("gpu9    down")  # then the hosts' order
    assert lines[4].startswith("gpu1:0  free")
    assert "Add this line to ~hive/.ssh/authorized_keys on gpu9:" in shown["text/plain"]
    assert "ssh-ed25519 AAAAkey gpuhive" in shown["text/plain"]
    html = shown["text/html"]
    assert html.index("data-state='mine'") < html.index("data-state='free'")
    assert "data-state='down'" in html
    assert "<code" in html and "ssh-ed25519 AAAAkey gpuhive</code>" in html


def test_a_reservation_says_to_which_job_it_is_lent_and_what_a_reclaim_did() -> None:
    from jupyter_gpuhive.notebook.lending import reclaimed_text
    from jupyter_gpuhive.notebook.magicviews import ReservationList, ReservationResult

    res = {"id": 5, "title": "t", "gpus": ["gpu1:0"], "start": "2030-01-01T09:00:00+00:00",
           "end": "2030-01-01T10:00:00+00:00", "owner": "me", "status": "upcoming",
           "lent_to": [{"job": 42, "name": "n", "owner": "bob", "preemptible": True}]}  # fmt: skip
    card = bundle(ReservationResult(res, "Reservation 5"))
    assert "Lending      lent to job 42 (preemptible) until you start" in card["text/plain"]
    listed = bundle(ReservationList([res]))["text/plain"]
    assert "upcoming (lent to job 42 (preemptible) until you start)" in listed
    never = bundle(ReservationResult({**res, "lent_to": [], "lend": False}, "R"))["text/plain"]
    assert "Lending      never lent" in never
    assert "Lending" not in bundle(ReservationResult({**res, "lent_to": []}, "R"))["text/plain"]
    answer = {"reclaimed": [42, 43], "free_by": "2030-01-01T09:00:31+00:00"}
    text = reclaimed_text(5, answer)
    assert text.startswith("Reservation 5: preemptible jobs 42, 43 signalled to save and stop")
    assert "free by" in text and ":00:31" in text
    assert "nothing was running" in reclaimed_text(5, {"reclaimed": [], "free_by": None})
