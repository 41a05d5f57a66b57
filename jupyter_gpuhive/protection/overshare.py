"""Protection on a shared GPU: whose processes are whose, and who uses more than their share.

On a GPU that bookings share, each share holder may run processes there: their own, their
jobs' and the preemptible jobs their booking lends to. A holder whose processes use more of
the GPU's memory than the share holds, beyond the policy's tolerance (a CUDA context, an
allocator's rounding), goes up the ladder as an over-share violation, like an intruder. A
process of someone who holds no share of the GPU is an intruder (foreign), as on a GPU
booked whole.

Decisions read only what a user cannot write: the process's owner (the kernel's, through
`ps`), its memory (the driver's, per process and GPU), its process group (for the jobs),
and the bookings in the store. Never a process name, argument or environment.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from ..hosts.probe import ProcessInfo
from ..model import Reservation

# (host, pid) -> the gpuhive user whose job runs that process, and the lending reservation.
JobOwnersView = Callable[[tuple[str, int]], str | None]
LentView = Callable[[tuple[str, int]], int | None]


def sharers(active: Sequence[Reservation], at: datetime) -> dict[str, tuple[Reservation, ...]]:
    """GPU UUID -> the share bookings holding part of it at `at`, by id."""
    held: dict[str, list[Reservation]] = {}
    for res in sorted(active, key=lambda r: r.id):
        if not res.cancelled and res.start <= at < res.end and res.is_share:
            for gpu in res.gpus:
                held.setdefault(gpu.uuid, []).append(res)
    return {uuid: tuple(found) for uuid, found in held.items()}


@dataclass(frozen=True)
class Overuse:
    """A share holder using more than the share: the booking, the processes, the MiB used."""

    reservation: Reservation
    user: str  # the UNIX user whose processes they are
    processes: tuple[ProcessInfo, ...]
    used_mib: int
    share_mib: int

    def detail(self, tolerance_mib: int) -> str:
        """'uses 12000 MiB of a 10240 MiB share (tolerance 512 MiB)'."""
        return (
            f"uses {self.used_mib} MiB of a {self.share_mib} MiB share "
            f"(tolerance {tolerance_mib} MiB)"
        )


def judge(
    host: str,
    processes: Sequence[ProcessInfo],
    shares: Sequence[Reservation],
    *,
    unix_user: Callable[[str], str],
    job_owner: JobOwnersView,
    lent: LentView,
    tolerance_mib: int,
) -> tuple[list[ProcessInfo], list[Overuse]]:
    """(the processes of nobody holding a share: the intruders' candidates, the holders'
    uses over their share) on one shared GPU. A holder of several shares of it has their sum."""
    mine: dict[str, list[ProcessInfo]] = {}  # holder -> their processes
    strangers: list[ProcessInfo] = []
    for proc in processes:
        if proc.user is None:
            continue  # gone before `ps` saw it: nobody to tell or stop
        owner = job_owner((host, proc.pid))
        lender = lent((host, proc.pid))
        holder = next(
            (
                res.owner
                for res in shares
                if proc.user in (unix_user(res.owner), res.owner)
                or owner == res.owner
                or lender == res.id
            ),
            None,
        )
        if holder is None:
            strangers.append(proc)
        else:
            mine.setdefault(holder, []).append(proc)
    over: list[Overuse] = []
    for holder, procs in sorted(mine.items()):
        theirs = [res for res in shares if res.owner == holder]
        limits = [res.share_memory_mib() for res in theirs]
        if any(limit is None for limit in limits):
            continue  # the GPU's memory is unknown: no share to compare with
        limit = sum(limit or 0 for limit in limits)
        used = sum(p.used_memory_mib or 0 for p in procs)
        if used > limit + tolerance_mib:
            ordered = tuple(sorted(procs, key=lambda p: p.pid))
            over.append(Overuse(theirs[0], unix_user(holder), ordered, used, limit))
    return strangers, over
