"""What %gpustatus shows with no hosts and with a host down (no server needed)."""

from __future__ import annotations

from IPython.core.interactiveshell import InteractiveShell

from jupyter_gpuhive.hosts.guidance import advise
from jupyter_gpuhive.notebook.magicviews import GpuStatus, gpu_state, local


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


def test_gpustatus_shows_my_waiting_queued_jobs_with_place_start_and_why() -> None:
    hosts = [
        {
            "name": "gpu1",
            "state": "up",
            "gpus": [
                {"id": "gpu1:0", "processes": [], "reservation": None, "next_reservation": None}
            ],
        }
    ]
    queued = [
        {"id": 7, "name": "train", "owner": "me", "place": 2,
         "estimated_start": "2030-01-01T10:00:00+00:00", "waiting_for": "gpu1:0 runs job 3"},
        {"id": 8, "name": "eval", "owner": "me", "place": 1, "estimated_start": None,
         "waiting_for": "waiting for 9 free GPUs"},
        {"id": 9, "name": "theirs", "owner": "bob", "place": 3, "waiting_for": "x"},
        {"id": 10, "name": "new", "owner": "me", "place": None, "waiting_for": None},
    ]  # fmt: skip
    shown = bundle(GpuStatus(hosts, "me", queued))
    text = shown["text/plain"]
    assert "My queued jobs:" in text and text.index("gpu1:0") < text.index("My queued jobs:")
    lines = text[text.index("My queued jobs:") :].splitlines()
    assert lines[1].split() == ["JOB", "PLACE", "EXPECTED", "START", "WAITING", "FOR"]
    assert lines[3].startswith("7 train") and " 2 " in lines[3]
    assert (
        lines[3].endswith("gpu1:0 runs job 3") and local(queued[0]["estimated_start"]) in lines[3]
    )
    assert lines[4].startswith("8 eval") and "1 (next)" in lines[4]
    assert "not known" in lines[4] and lines[4].endswith("waiting for 9 free GPUs")
    assert lines[5].startswith("10 new") and "not yet" in lines[5]
    assert "theirs" not in text  # only mine
    html = shown["text/html"]
    assert "<b>My queued jobs</b>" in html and "gpu1:0 runs job 3</td>" in html
    assert "My queued jobs" not in bundle(GpuStatus(hosts, "me", []))["text/plain"]
    assert "PREEMPTED" not in text  # none of mine was preempted
    # A preempted job: how often, the service it had and what it lost, in its own column.
    preempted = {**queued[0], "preemptions": 2, "service_gpu_h": 1.5, "lost_gpu_h": 0.25}
    old = {**queued[1], "preemptions": 1, "service_gpu_h": None, "lost_gpu_h": None}
    text = bundle(GpuStatus(hosts, "me", [preempted, old, queued[3]]))["text/plain"]
    lines = text[text.index("My queued jobs:") :].splitlines()
    assert lines[1].split()[-1] == "PREEMPTED"
    assert lines[3].startswith("7 train") and lines[3].endswith("2× · had 1.5 GPU-h, lost 0.25")
    assert lines[4].startswith("8 eval") and lines[4].endswith("1×")  # hours not known
    assert lines[5].startswith("10 new") and lines[5].endswith("not known")  # empty cells


def test_gpustatus_on_a_mixed_site_says_each_gpus_vendor() -> None:
    free = {"processes": [], "reservation": None, "next_reservation": None}
    hosts = [
        {"name": "nv1", "state": "up", "vendor": "nvidia", "gpus": [{"id": "nv1:0", **free}]},
        {"name": "am1", "state": "up", "vendor": "amd", "gpus": [{"id": "am1:0", **free}]},
        {"name": "am2", "state": "down", "vendor": "amd", "gpus": []},
    ]
    text = bundle(GpuStatus(hosts, "me"))["text/plain"]
    rows = [line.split("  ")[0] for line in text.splitlines()[2:5]]
    assert rows == ["nv1:0 (NVIDIA)", "am1:0 (AMD)", "am2 (AMD)"]
    one = [{**h, "vendor": "amd"} for h in hosts]
    assert "(AMD)" not in bundle(GpuStatus(one, "me"))["text/plain"]


def test_a_gpu_a_slurm_job_holds_is_busy_in_gpustatus() -> None:
    held = {"id": "n1:0", "state": "busy", "processes": [], "held_by_engine": "a Slurm job"}
    assert gpu_state(held, "up", "me") == ("busy", "busy: a Slurm job")
    assert gpu_state({**held, "held_by_engine": None, "state": "free"}, "up", "me") == (
        "free",
        "free",
    )
