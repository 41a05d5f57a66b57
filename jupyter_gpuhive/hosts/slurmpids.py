"""Which processes of a Slurm node run inside a Slurm job: the node's own slurmstepd says.

gpuhive asks `scontrol listpids '*' NODE`, run by root (or the SlurmUser) on the node: each
job step's slurmstepd (root's) answers with the pids its proctrack plugin holds in the step
(a cgroup's `cgroup.procs` with proctrack/cgroup, the process tree it started with
linuxproc, ...). The answer is a table of numbers only: PID, JOBID, STEPID, LOCALID, GLOBALID.

Nothing a user controls decides it: not a process's name or arguments (`slurmstepd: [7.0]` as
`argv[0]` is a name anyone may pick), not its environment (`SLURM_JOB_ID` is anyone's to set),
and not a cgroup path read as text (below a systemd-delegated subtree a user names cgroups,
and a name may hold a line break). A process a user starts over SSH, outside any step, is not
in the table, whatever it calls itself.
"""

from __future__ import annotations

_HEADER = "PID"


def parse_listpids(text: str) -> dict[int, int]:
    """`scontrol listpids` as {pid: job id}; lines that are not a row of numbers are skipped."""
    found: dict[int, int] = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) < 2 or words[0] == _HEADER:
            continue
        pid, job = words[0], words[1]
        if pid.isdigit() and job.isdigit() and int(pid) > 1:
            found[int(pid)] = int(job)
    return found


def confinement(job: int) -> str:
    """How a process inside Slurm job `job` is described in reports."""
    return f"Slurm job {job}"
