"""Reservations in calendars and chat: iCal feeds and signed webhooks (docs/integrations.md)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, tzinfo
from typing import Any

from ..errors import Invalid, NotFound
from ..model import UTC, Identity, Reservation
from ..model.budgets import Standing
from ..model.health import GpuCondition
from ..model.jobs import ACTIVE, Job, TaskState
from ..privacy import ANYONE, Privacy, job_summary_json, reservation_json, violation_brief
from ..store import Store
from ..store.subscriptions import Subscription
from . import approvals, budgets, health, mail
from .digests import DigestService
from .feeds import Feeds, FeedSettings
from .mail import MailSettings
from .subscriptions import Availability
from .transport import Transports
from .webhooks import Webhooks, WebhookSettings

log = logging.getLogger(__name__)
TOUCH_INTERVAL = 0.05  # seconds between batched calendar writes


@dataclass(frozen=True)
class IntegrationSettings:
    """Feeds, webhooks and the reminders' lead time."""

    feeds: FeedSettings = field(default_factory=FeedSettings)
    webhooks: WebhookSettings = field(default_factory=WebhookSettings)
    ending_minutes: int = 15
    tick: float = 30.0
    mail: MailSettings = field(default_factory=MailSettings)
    digest_hour: int = 7
    zone: tzinfo = UTC


def _gpus(res: Reservation) -> str:
    hosts = sorted({g.host for g in res.gpus})
    count = res.held_text()  # '2 GPUs', or a share: '0.25 of a GPU (20 GiB)'
    return f"{count} on {', '.join(hosts)} ({', '.join(g.ref for g in res.gpus)})"


class Integrations:
    """Feeds and webhooks, fed by the booking path and a reminder ticker."""

    def __init__(
        self,
        store: Store,
        settings: IntegrationSettings,
        run: Callable[..., Awaitable[Any]],
        clock: Callable[[], datetime],
        transports: Transports,
        privacy: Privacy | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.privacy = privacy or Privacy()  # what every outbound channel may carry
        self.rows = store.integrations
        self.run = run
        self.now = clock
        self.feeds = Feeds(store, self.rows, settings.feeds, clock, self.privacy)
        self.webhooks = Webhooks(self.rows, settings.webhooks, run, clock, transports)
        self.availability = Availability(store, store.subscriptions, clock)
        self.digests = DigestService(
            store, store.digests, settings.mail, settings.zone, settings.digest_hour, clock
        )
        self.publish_lab: Callable[[dict[str, Any]], Any] | None = None  # set by the app
        self._tasks: set[asyncio.Task[Any]] = set()
        self._ticker: asyncio.Task[None] | None = None
        self._touched: set[int] = set()  # reservations edited, for the calendar (batched)
        self._toucher: asyncio.Task[None] | None = None
        self._writing: set[asyncio.Future[None]] = set()  # batches of edits being written
        self._jobs: dict[int, str] = {}  # running jobs seen → their last status
        self._job_lock = asyncio.Lock()
        # what else the leader's ticker does, given the tick's instant (approvals' holds)
        self.ticks: list[Callable[[datetime], Awaitable[Any]]] = []

    def _spawn(self, work: Coroutine[Any, Any, Any]) -> None:
        """Run in the background: the request that caused an event never waits for it."""
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("gpuhive: integration event failed", exc_info=task.exception())

    def reservation_event(
        self, kind: str, res: Reservation, by: str | None = None, reason: str | None = None
    ) -> None:
        """A reservation was created, changed or cancelled, by whom and (when not asked by
        them) why; the bookings service calls it after every change (on the event loop)."""
        self._spawn(self._reservation_event(kind, res, {"by": by, "reason": reason}))

    def _touch(self, reservation_id: int) -> None:
        """Bump SEQUENCEs in batches: one write per TOUCH_INTERVAL, not one per booking."""
        self._touched.add(reservation_id)
        if self._toucher is None or self._toucher.done():
            self._toucher = asyncio.create_task(self._touch_batches())

    async def feed(self, token: str) -> bytes:
        """A calendar feed's text, with every edit so far recorded first (SEQUENCE).

        It waits for the edits made before it only (those being written, and those waiting
        for their batch, written now): edits that keep coming never hold a feed back."""
        writing = list(self._writing)
        await self._write_touched()
        if writing:
            await asyncio.gather(*writing, return_exceptions=True)
        body: bytes = await self.run(self.feeds.render, token)
        return body

    async def settle(self) -> None:
        """Wait until every edit so far is recorded for the calendar (tests, shutdown)."""
        while self._toucher is not None and not self._toucher.done():
            await asyncio.gather(self._toucher, return_exceptions=True)

    async def _touch_batches(self) -> None:
        while self._touched:
            await asyncio.sleep(TOUCH_INTERVAL)
            await self._write_touched()

    async def _write_touched(self) -> None:
        """Record the edits waiting for their batch, now."""
        ids, self._touched = sorted(self._touched), set()
        if not ids:
            return
        write = asyncio.ensure_future(self.run(self.feeds.touch, ids))
        self._writing.add(write)
        try:
            await write
        except Exception:
            log.exception("gpuhive: could not record %d calendar edits", len(ids))
        finally:
            self._writing.discard(write)

    async def _reservation_event(
        self, kind: str, res: Reservation, cause: dict[str, str | None] | None = None
    ) -> None:
        if kind in ("changed", "cancelled"):  # SEQUENCE counts every edit
            self._touch(res.id)  # (a new booking is recorded when a feed first shows it)
        what = {
            "created": f"{res.owner} booked {_gpus(res)}",
            "changed": f"{res.owner} changed their booking of {_gpus(res)}",
            "cancelled": f"{res.owner} cancelled their booking of {_gpus(res)}",
            "starting": f"{res.owner}'s booking of {_gpus(res)} starts now",
            "ending": f"{res.owner}'s booking of {_gpus(res)} ends soon",
        }[kind]
        span = f"{res.start:%Y-%m-%d %H:%M}–{res.end:%Y-%m-%d %H:%M} UTC"
        text = f"{what}: '{res.title}', {span}."
        now = self.now()
        own, public = (self._reservation_data(kind, res, who, now) for who in (res.owner, ANYONE))
        own |= cause or {}  # who changed it and why: the owner's view only (a no-show is theirs)
        await self.webhooks.emit(f"reservation.{kind}", own, [res.owner], text, public)
        if kind in ("cancelled", "changed"):
            await self.check_subscriptions(released=True)

    def _reservation_data(
        self, kind: str, res: Reservation, who: Identity | str, now: datetime
    ) -> dict[str, Any]:
        """A reservation event's data as `who` (its owner, or ANYONE) may read it."""
        reader = Identity(who) if isinstance(who, str) else who
        data: dict[str, Any] = {"reservation": reservation_json(res, reader, self.privacy, now)}
        if kind == "ending":
            data["minutes_left"] = max(0, round((res.end - now).total_seconds() / 60))
        return data

    def approval_event(
        self, kind: str, res: Reservation, by: str, note: str | None, approvers: list[str]
    ) -> None:
        """A booking waits for approval (`tentative`: the approvers are told), or was
        approved, declined or released unanswered (its holder is told): approvals.tell."""
        self._spawn(approvals.tell(
            kind, res, by, note, approvers, settings=self.settings.mail, webhooks=self.webhooks,
            publish_lab=self.publish_lab, privacy=self.privacy, zone=self.settings.zone,
        ))  # fmt: skip

    def budget_warning(self, standing: Standing, threshold: float, people: list[str]) -> None:
        """A budget reached a threshold: its people are told (integrations/budgets.py)."""
        self._spawn(budgets.tell(
            standing, threshold, people, settings=self.settings.mail, webhooks=self.webhooks,
            publish_lab=self.publish_lab, zone=self.settings.zone,
        ))  # fmt: skip

    # --- availability subscriptions ------------------------------------------------------

    async def channels(
        self, who: Identity, asked: tuple[str, ...] | None, email: str | None
    ) -> tuple[str, ...]:
        """The channels a subscription of `who` uses: those asked for, or by default every one
        that reaches them here (the Lab; e-mail when the site sends mail and knows an address;
        a webhook when they have one for gpus.available). Asking for one that cannot reach them
        is a 422 that says why."""
        mail_ok = self.settings.mail.enabled and bool(email or self.settings.mail.address(who.name))
        hooks = [w for w in await self.webhooks.endpoints() if not w.site and w.owner == who.name]
        why = {
            "email": None if mail_ok else (
                "this server sends no e-mail (c.GpuHiveApp.notify_email)"
                if not self.settings.mail.enabled else "it knows no e-mail address of yours: "
                "give 'email'"),
            "webhook": None if any("gpus.available" in w.events for w in hooks) else
                "you have no webhook for the event gpus.available (add one through the REST "
                "API: POST /gpuhive/api/webhooks)",
        }  # fmt: skip
        if asked is None:
            return tuple(c for c in ("email", "lab", "webhook") if why.get(c) is None)
        for channel in asked:
            if why.get(channel):
                raise Invalid(f"Cannot tell you by {channel}: {why[channel]}.")
        return asked

    def subscribed(self) -> None:
        """A subscription was made: it may fire at once."""
        self._spawn(self.check_subscriptions(released=True))

    async def check_subscriptions(self, released: bool) -> int:
        """Offer free slots to the subscriptions that match them; how many fired."""
        due = await self.run(self.availability.due, released)
        for sub, offer in due:
            await self._offer(sub, offer)
        return len(due)

    async def _offer(self, sub: Subscription, offer: dict[str, Any]) -> None:
        span = f"{offer['start'][:16].replace('T', ' ')} to {offer['end'][:16].replace('T', ' ')}"
        count = len(offer["gpus"])
        text = (
            f"{count} GPU{'s are' if count != 1 else ' is'} free for {sub.owner}: "
            f"{', '.join(offer['gpus'])}, {span} UTC. To book: 'Book it' in the GPU "
            f"sidebar, or {offer['magic']} in a notebook."
        )
        if "lab" in sub.channels and self.publish_lab is not None:
            try:
                result = self.publish_lab({"user": sub.owner, "message": text, "offer": offer})
                if asyncio.iscoroutine(result):
                    await result
            except Exception:
                log.exception("gpuhive: could not publish an availability event")
        address = sub.email or self.settings.mail.address(sub.owner)
        if "email" in sub.channels and self.settings.mail.enabled and address:
            subject = f"[gpuhive] {count} GPU{'s' if count != 1 else ''} free on {offer['host']}"
            body = (
                f"Hello {sub.owner},\n\n{text}\n\nThis slot is not held for you: the first "
                "to book it gets it.\n\n-- gpuhive\n"
            )
            try:
                await mail.deliver(self.settings.mail, address, subject, body)
            except Exception as error:
                log.warning("gpuhive: availability e-mail to %s failed: %s", address, error)
        if "webhook" in sub.channels:
            found = {"offer": offer}  # free GPUs and a way to book them: nothing private
            await self.webhooks.emit("gpus.available", found, [sub.owner], text, found)

    # --- jobs (the launcher tells) and violations (protection tells) -------------------

    def job_changed(self, job_id: int) -> None:
        """The launcher moved a job's tasks (started, followed or stopped them): its event."""
        self._spawn(self._job_changed(job_id))

    async def _job_changed(self, job_id: int) -> None:
        async with self._job_lock:  # one job's changes in the order they were told
            try:
                job = await self.run(self.store.jobs.get, job_id)
            except NotFound:
                self._jobs.pop(job_id, None)
                return
            before = self._jobs.get(job_id)
            if job.status in ACTIVE:
                self._jobs[job_id] = job.status
                if before is None:
                    await self._job_event("started", job)
                return
            self._jobs.pop(job_id, None)
            if job.status in (TaskState.SUCCEEDED, TaskState.FAILED, TaskState.LOST):
                if before is None:  # it ended as it started (or before this process saw it)
                    await self._job_event("started", job)
                kind = "succeeded" if job.status == TaskState.SUCCEEDED else "failed"
                await self._job_event(kind, job)

    def job_preempted(self, event: dict[str, Any]) -> None:
        """A lender took its GPUs back from a preemptible job, or a new queued job preempted
        it (least attained service): `job.preempted` to the job's owner and the holder
        ({job, owner, reservation (None for a new job), for_job (only then), signal,
        grace_s, restarts})."""
        self._spawn(self._job_preempted(dict(event)))

    async def _job_preempted(self, event: dict[str, Any]) -> None:
        holder: str | None = None
        if event["reservation"] is None:
            what = f"its GPUs to new queued job {event.get('for_job')}"
        else:
            what = f"back the GPUs of reservation {event['reservation']}"
            with contextlib.suppress(NotFound):
                holder = (await self.run(self.store.reservations.get, event["reservation"])).owner
        text = (f"{event['owner']}'s preemptible job {event['job']} gives {what}: "
                f"{event['signal']}, {event['grace_s']:g} s to checkpoint, then back in the "
                f"queue (restart {event['restarts']})")  # fmt: skip
        users = [u for u in (event["owner"], holder) if u]
        await self.webhooks.emit("job.preempted", event, users, text + ".", event)

    async def _job_event(self, kind: str, job: Job) -> None:
        where = ", ".join(sorted({t.host for t in job.tasks})) or "?"
        text = f"{job.owner}'s job {job.id} '{job.name}' on {where} {kind}"
        if kind != "started":
            codes = sorted({t.exit_status for t in job.tasks if t.exit_status is not None})
            text += f" (exit status {', '.join(map(str, codes))})" if codes else ""
        own, public = ({"job": job_summary_json(job, who, self.privacy)}
                       for who in (Identity(job.owner), ANYONE))  # fmt: skip
        await self.webhooks.emit(f"job.{kind}", own, [job.owner], text + ".", public)

    async def health_changed(
        self, changed: dict[int, GpuCondition], offers: Mapping[int, Any] | None = None
    ) -> None:
        """GPUs' health or drain changed: a `gpu.health` event to their holders (next week),
        with the finder's alternative per reservation (`offers`) where one was found."""
        await health.tell_holders(self.store, self.run, self.webhooks, changed, self.now(), offers)

    def violations_opened(self, violations: list[dict[str, Any]]) -> None:
        """Protection opened these violations (as `ongoing` lists them): their events."""
        self._spawn(self._violation_events(violations))

    async def _violation_events(self, violations: list[dict[str, Any]]) -> None:
        for v in violations:
            data = {k: value for k, value in v.items() if k != "commands"}
            who = v.get("offender") or "an unknown user"
            text = f"{v['kind']} use of GPU {v['gpu']} on {v['host']} by {who}"
            if v.get("holder"):
                text += f" (reserved by {v['holder']})"
            users = [u for u in (v.get("holder"), v.get("offender")) if u]
            # Site endpoints: only with public_violations, and then the public brief.
            brief = {"violation": violation_brief(data)} if self.privacy.public_violations else None
            await self.webhooks.emit("violation", {"violation": data}, users, text + ".", brief)

    # --- reminders ----------------------------------------------------------------------

    def start(self) -> None:
        """Start the reminder ticker (reservation starting / ending in N minutes)."""
        if self._ticker is None:
            self._ticker = asyncio.create_task(self._tick_forever())

    async def _tick_forever(self) -> None:
        last = self.now()
        while True:
            await asyncio.sleep(self.settings.tick)
            now = self.now()
            try:
                await self.remind(last, now)
                await self.check_subscriptions(released=False)
                await self.run(self.digests.send_due)
            except Exception:
                log.exception("gpuhive: reservation reminders failed")
            for tick in self.ticks:  # each on its own: one failing never stops the others
                try:
                    await tick(now)
                except Exception:
                    log.exception("gpuhive: %s failed", getattr(tick, "__qualname__", tick))
            last = now

    async def remind(self, since: datetime, now: datetime) -> int:
        """Emit 'starting' for bookings that began in (since, now], 'ending' likewise."""
        lead = timedelta(minutes=self.settings.ending_minutes)
        window = await self.run(
            self.store.reservations.window, since, now + lead + timedelta(seconds=1)
        )
        sent = 0
        for res in window:
            if since < res.start <= now:
                await self._reservation_event("starting", res)
                sent += 1
            if since < res.end - lead <= now:
                await self._reservation_event("ending", res)
                sent += 1
        return sent

    async def stop(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            await asyncio.gather(self._ticker, return_exceptions=True)
            self._ticker = None
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._toucher is not None:
            await asyncio.gather(self._toucher, return_exceptions=True)
        await self.webhooks.stop()
        self.rows.close_log()  # the delivery log's own file (SQLite)


def mail_settings(options: dict[str, Any]) -> MailSettings:
    """MailSettings from the notify_email option (unknown keys are refused)."""
    known = set(MailSettings.__dataclass_fields__)
    unknown = sorted(set(options) - known)
    if unknown:
        raise Invalid(f"notify_email: unknown option(s) {', '.join(unknown)}.")
    return MailSettings(**options)


__all__ = [
    "FeedSettings",
    "IntegrationSettings",
    "Integrations",
    "MailSettings",
    "WebhookSettings",
    "mail_settings",
]
