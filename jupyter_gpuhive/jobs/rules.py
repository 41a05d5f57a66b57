"""Job rules: what a request may create, who may act on a job, when it may run now."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta, tzinfo
from typing import Any

from ..bookings import access
from ..errors import Conflict, Forbidden, Invalid, NotFound
from ..model import ID_MAX, Gpu, HostDecl, Identity, units_conflict, utcnow
from ..model.approvals import tentative_refusal
from ..model.containers import ContainerSpec
from ..model.jobs import Job
from ..model.requests import JobRequest
from ..store import Store
from . import containers, slurm
from .admission import (
    SAME_HOST,
    gpu_count,
    placement,
    same_host,
    template_options,
)
from .caps import Cap, job_caps
from .commands import shell_command
from .model import mps_hosts, pinnings_of, render_tasks
from .preemption import check_request
from .selection import choice_of, matching, merged, refuse_unmatched, vendors_of, without
from .tasks import GpuSlot, TaskSpec, TemplateError

DEFAULT_WALLTIME = timedelta(hours=1)


def _placement_option(given: str | None, options: dict[str, Any]) -> dict[str, Any]:
    """The options with `same_host` (given at the top level or in options) checked."""
    value = options.get(SAME_HOST) if given is None else given
    if value is None:
        return {k: v for k, v in options.items() if k != SAME_HOST}
    if given is not None and options.get(SAME_HOST, value) != value:
        raise Invalid("Give 'same_host' once: at the top level or in 'options'.")
    try:
        same_host({SAME_HOST: value})
    except ValueError as error:
        raise Invalid(f"{error}.") from None
    return {**options, SAME_HOST: value}


class JobRules:
    """Turns requests into jobs, and guards who may start, stop or delete them."""

    def __init__(
        self,
        store: Store,
        zone: tzinfo,
        identity_of: Callable[[str], Identity],
        clock: Callable[[], datetime] = utcnow,
        hosts: Callable[[], Mapping[str, HostDecl]] = dict,
    ) -> None:
        self.store = store
        self.hosts = hosts  # the configured hosts (their container engines)
        self.zone = zone
        self.identity_of = identity_of
        self.now = clock
        self.preempt_grace_s = 30  # the site's preemption grace: a job may ask for less

    # --- building jobs -----------------------------------------------------------------

    def _gpus(self, who: Identity, request: JobRequest) -> list[Gpu]:
        if request.reservation is not None:
            if request.gpus:
                raise Invalid("Give either 'gpus' or 'reservation', not both.")
            rid = request.reservation
            if not 0 <= rid <= ID_MAX:  # no table holds such an id (nor can the driver send it)
                raise NotFound(f"There is no reservation {rid}.")
            res = self.store.reservations.get(rid)
            if res.owner != who.name and not who.is_admin:
                raise Forbidden(f"Reservation {rid} belongs to {res.owner}, not to you.")
            if res.cancelled or res.end <= self.now():
                raise Conflict(f"Reservation {rid} is over; pick GPUs or a current reservation.")
            if res.tentative:
                raise Conflict(tentative_refusal(res, "run"))
            return list(res.gpus)
        refs = request.gpus
        if not refs:
            raise Invalid("'gpus' must be a non-empty list such as [\"gpu1:0\"], or give "
                          "'reservation'.")  # fmt: skip
        gpus: dict[int, Gpu] = {}
        for ref in refs:
            gpu = self.store.inventory.gpu(ref)
            if gpu is None:
                raise Invalid(f"Unknown GPU '{ref}'. %gpustatus and the sidebar list the GPUs.")
            gpus[gpu.id] = gpu
        return list(gpus.values())

    def _share_caps(
        self, job: Job, request: JobRequest, memory: dict[str, int | None]
    ) -> dict[str, Cap] | None:
        """A job on a share booking is capped to the share (or to its own `memory` option,
        which must fit in the share); None: the job's own option decides (`render_tasks`)."""
        if request.reservation is None:
            return None
        res = self.store.reservations.get(request.reservation)
        if not res.is_share:
            return None
        uuid = res.gpus[0].uuid
        held = Cap.of(uuid, memory.get(uuid), fraction=res.share)
        asked = job_caps(job.options.get("memory"), [(uuid, memory.get(uuid))])
        if not asked:
            return {uuid: held}
        if held.mib is not None and (asked[uuid].mib or 0) > held.mib:
            raise TemplateError(
                f"option memory {job.options['memory']} is more than reservation "
                f"{res.id}'s share ({res.held_text()}); leave it out to use the whole share."
            )
        return asked

    def _layout(self, gpus: Sequence[Gpu]) -> list[tuple[str, str, list[GpuSlot]]]:
        by_host: dict[str, list[GpuSlot]] = {}
        for gpu in gpus:
            by_host.setdefault(gpu.host, []).append(GpuSlot(gpu.host, "", gpu.index, gpu.uuid))
        out = []
        for host, slots in by_host.items():
            found = self.store.inventory.host(host)
            address = found.address if found else host
            out.append((host, address, [replace(s, address=address) for s in slots]))
        return out

    def build(self, who: Identity, request: JobRequest) -> tuple[Job, list[TaskSpec]]:
        """Check a job request against the site and render its tasks (nothing is stored)."""
        options = _placement_option(request.same_host, request.options)
        options = merged(request.vendor, request.model, options)
        try:
            choice = choice_of(options)
        except ValueError as error:
            raise Invalid(f"{error}.") from None
        job = Job(owner=who.name, **{**request.defines(), "options": options})
        try:
            check_request(request.preemptible, request.preempt_signal, request.grace_s,
                          self.preempt_grace_s)  # fmt: skip
        except ValueError as error:
            raise Invalid(str(error)) from None
        if request.preemptible and not request.queued:
            raise Invalid("A preemptible job must be queued ('queued': true): the queue places "
                          "it on lent GPUs.")  # fmt: skip
        if request.image is not None or request.mounts:
            job = replace(job, container=self._container(request))
        if job.start_at and job.stop_at and job.stop_at <= job.start_at:
            raise Invalid("'stop_at' must be after 'start_at'.")
        try:
            count = gpu_count(options)
        except ValueError as error:
            raise Invalid(str(error)) from None
        if count is None and SAME_HOST in options:
            raise Invalid("'same_host' is for jobs that ask for a GPU count ('gpu_count' in "
                          "options); this one names its GPUs.")  # fmt: skip
        if count is not None:
            return job, self._check_count_only(job, request, count)
        gpus = self._gpus(who, request)
        refuse_unmatched(choice, gpus, vendors_of(self.hosts()))
        job = replace(job, options=without(options))  # named GPUs: checked now, not kept
        try:
            memory = {g.uuid: g.memory_mib for g in gpus}
            caps = self._share_caps(job, request, memory)
            specs = render_tasks(
                job, self._layout(gpus), pinnings=pinnings_of(self.hosts()),
                mps=mps_hosts(self.hosts()), gpu_memory=memory, caps=caps,
            )  # fmt: skip
        except (TemplateError, ValueError) as error:
            raise Invalid(str(error)) from None
        if job.container is not None:
            hosts = list(dict.fromkeys(spec.host for spec in specs))
            containers.requested(job.container.image, job.container.mounts, None, hosts,
                                 self.hosts())  # fmt: skip
            containers.check_env(specs)
        return job, specs

    def _container(self, request: JobRequest) -> ContainerSpec | None:
        """The request's image and mounts, checked against the allow-lists of some host."""
        return containers.requested(
            request.image, request.mounts, request.reservation, None, self.hosts(),
            request.template,
        )  # fmt: skip

    def _check_count_only(self, job: Job, request: JobRequest, count: int) -> list[TaskSpec]:
        """A job that names only a GPU count: queued, GPUs chosen at admission, no tasks yet."""
        if request.gpus or request.reservation is not None:
            raise Invalid("Give either 'gpu_count' (in options) or GPUs, not both.")
        if not job.queued:
            raise Invalid(
                "A job that names only a GPU count must be queued ('queued': true): gpuhive "
                "picks its GPUs when enough are free."
            )
        choice = choice_of(job.options)
        gpus = matching(choice, self.store.inventory.gpus(), vendors_of(self.hosts()))
        if slurm.engine_of(job.options) is not None:  # for Slurm's queue: Slurm places it
            refused = slurm.engine_refusal(job, count, self.hosts(), gpus)
            if refused is not None:
                raise Invalid(refused)
            try:  # render it once now, so template mistakes show now
                slurm.handover(job, self.hosts())
            except (TemplateError, ValueError) as error:
                raise Invalid(str(error)) from None
            return []
        kind = choice.words() if choice else "GPUs"
        if count > len(gpus):
            raise Invalid(f"The job wants {count} {kind}; there are only {len(gpus)}.")
        largest = max(Counter(g.host for g in gpus).values(), default=0)
        if placement(count, same_host(job.options), largest) == "required" and count > largest:
            raise Invalid(
                f"The job wants {count} {kind} on one host ('same_host': 'required'), but the "
                f"largest host has {largest}. Ask for at most {largest}, or let it span hosts "
                "with 'same_host': 'preferred' or 'any'."
            )
        trial = replace(job, options=template_options(job.options))
        try:  # render once on any GPUs, so template mistakes show now, not at admission
            render_tasks(trial, self._layout(gpus[:count]))
        except (TemplateError, ValueError) as error:
            raise Invalid(str(error)) from None
        return []

    @staticmethod
    def preview(specs: Sequence[TaskSpec]) -> list[dict[str, Any]]:
        """The exact per-task commands and environments (what --dry-run shows)."""
        return [
            {
                "index": spec.index,
                "host": spec.host,
                "gpus": [f"{g.host}:{g.index}" for g in spec.gpus],
                "role": spec.role,
                "env": dict(spec.env),
                "command": spec.command,
                "shell": shell_command(spec),
            }
            for spec in specs
        ]

    # --- guarding actions ---------------------------------------------------------------

    @staticmethod
    def may_act(who: Identity, job: Job, verb: str) -> None:
        if job.owner != who.name and not who.is_admin:
            raise Forbidden(
                f"Job {job.id} belongs to {job.owner}; only they or an admin may {verb} it."
            )

    def check_run_now(
        self, owner_name: str, uuids: Collection[str], walltime: timedelta | None
    ) -> None:
        """Refuse to start on GPUs someone else holds now, or that the owner may not use."""
        now = self.now()
        until = now + (walltime or DEFAULT_WALLTIME)
        wanted = set(uuids)
        every = self.store.inventory.units()  # GPUs and MIG slices
        gpus = [g for g in every if g.uuid in wanted]
        # A whole GPU is held by a booking of any of its slices, a slice by one of its GPU.
        ids = [u.id for u in every if any(units_conflict(u, g) for g in gpus)]
        for res in self.store.reservations.window(
            now, now + timedelta(microseconds=1), gpu_ids=ids
        ):
            if res.owner != owner_name:
                held = ", ".join(g.ref for g in res.gpus if g.id in ids)
                until_text = f"{res.end.astimezone(self.zone):%a %H:%M}"
                raise Conflict(
                    f"{held} is reserved by {res.owner} until {until_text}; queue the job to "
                    "run when the GPUs are free, or choose other GPUs."
                )
        owner = self.identity_of(owner_name)
        mine = self.store.reservations.window(now, until, gpu_ids=ids, owner=owner_name)
        held_by_owner = {g.id for r in mine if r.start <= now for g in r.gpus}
        unheld = [g for g in gpus if not {g.id, g.device_id} & held_by_owner]
        problems = access.uncovered(self.store.rules.all(), owner, unheld, now, until, self.zone)
        if problems:
            refs = ", ".join(g.ref for g, _ in problems)
            raise Forbidden(f"The access rules do not allow {owner_name} to use {refs} now.")
