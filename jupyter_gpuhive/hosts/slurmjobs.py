"""The jobs Slurm runs on its nodes, and the GPUs each holds: `squeue --json`, parsed.

A job's GPUs are its `gres_detail` (`gpu:a100:2(IDX:0-1)`, one item per node of the job, in
the order of its expanded node list), the indexes `scontrol show job -d` names too: GPU `IDX`
N of a node is the GPU gpuhive shows as `host:N`. JSON, not `scontrol`'s text: a job's name
and comment are its user's to write, and no text of theirs can start a field here. Only
numbers, the node list and the account name are read.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from typing import Any

from ..model.engines import EngineJob
from .slurm import SlurmParseError, expand_hostlist, indexes

_IDX = re.compile(r"\(IDX:([0-9,\-]+)\)")
_ACCOUNT = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.@-]{0,63}\Z")
HOLDING = frozenset({"RUNNING", "COMPLETING", "SUSPENDED"})


def _instant(value: Any) -> datetime:
    seconds = value.get("number") if isinstance(value, dict) else value  # 23.x: {"number": …}
    if not isinstance(seconds, int) or isinstance(seconds, bool):
        raise SlurmParseError(f"cannot read the time {value!r}")
    return datetime.fromtimestamp(seconds, tz=timezone.utc)


def parse_jobs(text: str) -> list[EngineJob]:
    """The jobs of `squeue --json` that hold GPUs now (running, completing, suspended)."""
    try:
        listed = json.loads(text).get("jobs", [])
    except (ValueError, AttributeError):
        raise SlurmParseError("squeue --json did not answer with JSON") from None
    found = []
    for job in listed:
        if not isinstance(job, dict):
            continue
        state = job.get("job_state")
        states = state if isinstance(state, list) else [state]
        if not HOLDING & {str(s) for s in states}:
            continue
        details = job.get("gres_detail") or []
        nodes = expand_hostlist(str(job.get("nodes") or ""))
        gpus = []
        for node, detail in zip(nodes, details, strict=False):
            match = _IDX.search(str(detail)) if str(detail).startswith("gpu") else None
            if match is not None:
                gpus += [(node, i) for i in indexes(match.group(1))]
        user = str(job.get("user_name") or "")
        job_id = job.get("job_id")
        if not gpus or not isinstance(job_id, int) or not _ACCOUNT.match(user):
            continue
        start, end = _instant(job.get("start_time")), _instant(job.get("end_time"))
        found.append(EngineJob(job_id, user, start, end, tuple(gpus)))
    return found
