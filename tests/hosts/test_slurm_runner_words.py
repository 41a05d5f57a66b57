"""The Slurm task runner's readings of Slurm's words, without a cluster: the owner's jobs as
`squeue` lists them (states, starts, reasons), why Slurm ended a job, the sbatch line with every
value quoted, and the time limit at a booking's end."""

from __future__ import annotations

import shlex
from datetime import UTC, datetime, timedelta

import pytest

from jupyter_gpuhive.hosts.runners import RunnerError, TaskStart
from jupyter_gpuhive.hosts.runners.slurm import read_jobs, sbatch_line, time_limit, why_ended

NOW = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)


def test_jobs_by_name_newest_first_with_starts_and_reasons() -> None:
    listed = "\n".join([
        "job gpuhive-a-1-0 7 TIMEOUT 2030-01-02T01:00:00 TimeLimit",
        "job gpuhive-a-1-0 12 PENDING 2030-01-02T05:00:00 Resources",  # a later run, same name
        "job gpuhive-b-2-0 9 NODE_FAIL 2030-01-02T02:00:00 NodeDown",
        "job gpuhive-c-3-0 10 PENDING N/A Priority",
        "exit gpuhive-b-2-0 143",
    ])  # fmt: skip
    jobs = read_jobs(listed)
    assert jobs["gpuhive-a-1-0"] == (12, "PENDING", "Resources",
                                     datetime(2030, 1, 2, 5, tzinfo=UTC))  # fmt: skip
    assert jobs["gpuhive-c-3-0"][3] is None  # Slurm has no estimate yet
    assert why_ended("TIMEOUT", "TimeLimit") == (
        "Slurm ended it (TIMEOUT): it reached its time limit; Slurm's reason: TimeLimit"
    )
    assert why_ended(*jobs["gpuhive-b-2-0"][1:3]) == (
        "Slurm ended it (NODE_FAIL): its node failed; Slurm's reason: NodeDown"
    )
    assert why_ended("COMPLETED", "None") is None  # its exit file says how it ended


def launch(**changes: object) -> TaskStart:
    values: dict[str, object] = {
        "name": "gpuhive-x-1-0", "body": "echo 'GPUHIVE_BATCH_END'\nGPUHIVE_BATCH_END\ntrue",
        "log_dir": "./.gpuhive", "log_path": "./.gpuhive/1-0.log",
        "exit_path": "./.gpuhive/1-0.exit", "env_path": "./.gpuhive/1-0.env", "env_text": "",
        "host": "n1", "account": "gh-alice", "gpu_count": 2, "hold": "gpuhive-12",
        "until": NOW + timedelta(minutes=90, seconds=30),
    }  # fmt: skip
    values.update(changes)
    return TaskStart(**values)  # type: ignore[arg-type]


def test_the_sbatch_line_quotes_every_value_and_feeds_the_script_on_stdin() -> None:
    line = sbatch_line(launch(), "n1", NOW)
    head, _, rest = line.partition("\n")
    words = shlex.split(head.rsplit(" <<", 1)[0])
    assert words[:2] == ["sbatch", "--parsable"]
    assert {"--nodelist=n1", "--gres=gpu:2", "--reservation=gpuhive-12", "--time=90:30",
            "--job-name=gpuhive-x-1-0"} <= set(words)  # fmt: skip
    delimiter = head.rsplit("<<", 1)[1].strip("'")
    assert delimiter != "GPUHIVE_BATCH_END"  # the body holds that line: another one is used
    assert rest.endswith(f"\n{delimiter}\n") and "GPUHIVE_BATCH_END\ntrue" in rest
    with pytest.raises(RunnerError):
        sbatch_line(launch(hold="x; rm -rf ~"), "n1", NOW)
    free = shlex.split(sbatch_line(launch(hold=None, until=None), "n1", NOW).split(" <<")[0])
    assert not [w for w in free if w.startswith(("--reservation", "--time"))]


def test_a_job_for_slurms_queue_names_no_node_and_no_reservation() -> None:
    """A count-only job in Slurm's own queue: its GPU count and walltime, Slurm picks the node."""
    anywhere = launch(hold=None, anywhere=True, gpu_count=3, until=NOW + timedelta(hours=1))
    words = shlex.split(sbatch_line(anywhere, "n1", NOW).split(" <<")[0])
    assert {"--gres=gpu:3", "--time=60:00", "--nodes=1"} <= set(words), words
    assert not [w for w in words if w.startswith(("--nodelist", "--reservation"))], words


def test_the_time_limit_ends_at_the_booking_and_is_a_minute_at_least() -> None:
    assert time_limit(None, NOW) is None
    assert time_limit(NOW + timedelta(hours=2), NOW) == "120:00"
    assert time_limit(NOW + timedelta(seconds=5), NOW) == "1:00"
