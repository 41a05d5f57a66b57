"""REST handlers of the integrations: calendar feeds and webhooks (docs/integrations.md)."""

from __future__ import annotations

import inspect
from dataclasses import replace

from jupyter_server.auth.decorator import allow_unauthenticated, authorized
from tornado import web

from ...errors import NotFound
from ...integrations.subscriptions import subscription_json
from ...integrations.webhooks import describe
from ...model.authority import READ, WRITE
from .base import HiveLogic
from .operations import operation
from .schemas import bodies, queries, replies
from .shown import Shown


def feed_url(handler: HiveLogic, token: str) -> str:
    """The absolute URL of a feed (the token is its only credential)."""
    return f"{handler.public_api_url()}calendar/{token}.ics"


class CalendarHandler(HiveLogic):
    """GET calendar/TOKEN.ics: the feed, authenticated by the token in its URL only."""

    async def prepare(self) -> None:
        if hasattr(self, "hub_auth"):
            return  # the JupyterHub service: no Hub token is needed (or used) here
        result = super().prepare()
        if inspect.isawaitable(result):
            await result

    def check_xsrf_cookie(self) -> None:
        """A GET with no cookie credentials."""

    @allow_unauthenticated
    @operation(
        "An iCalendar (RFC 5545) feed; the token in the URL is its only credential (no Jupyter "
        "token needed or used)",
        errors=(404,),
        media="text/calendar",
        public=True,
    )
    async def get(self, token: str) -> None:
        body = await self.hive.integrations.feed(token)
        self.set_header("Content-Type", "text/calendar; charset=utf-8")
        self.set_header("Cache-Control", "private, max-age=300")
        self.set_header("Referrer-Policy", "no-referrer")
        self.finish(body)


class FeedsHandler(HiveLogic):
    auth_resource = "gpuhive:feeds"

    @web.authenticated
    @authorized(READ)
    @operation("My calendar feed (without its token) and, for admins, the site feeds")
    async def get(self) -> None:
        feeds = self.hive.integrations.feeds
        self.reply(await self.hive.run(feeds.status, self.who))


class PersonalFeedHandler(HiveLogic):
    auth_resource = "gpuhive:feeds"

    @web.authenticated
    @authorized(WRITE)
    @operation(
        "Make or rotate my calendar feed; the answer's 'url' (shown only now) is the feed, and "
        "the old URL stops working (404)",
        201,
        idempotent=False,  # its answer holds a secret the store never keeps
    )
    async def post(self) -> None:
        """Make or rotate the requester's feed: the URL is shown this once."""
        feeds = self.hive.integrations.feeds
        feed, token = await self.hive.run(feeds.rotate, self.who)
        self.reply({**feed.to_json(), "url": feed_url(self, token)}, status=201)

    @web.authenticated
    @authorized(WRITE)
    @operation("Turn my calendar feed off", errors=(404,))
    async def delete(self) -> None:
        feeds = self.hive.integrations.feeds
        if not await self.hive.run(feeds.stop, self.who):
            raise NotFound(f"{self.who.name} has no calendar feed.")
        self.reply({"deleted": True})


class SiteFeedsHandler(HiveLogic):
    auth_resource = "gpuhive:site-feeds"

    @web.authenticated
    @authorized(WRITE)
    @operation(
        "Publish a site feed (admin): every reservation, or one host's; the answer's 'url' is "
        "shown only now",
        201,
        body=bodies.SiteFeed,
        idempotent=False,  # its answer holds a secret the store never keeps
    )
    async def post(self) -> None:
        host = self.body(bodies.SiteFeed).host
        feeds = self.hive.integrations.feeds
        feed, token = await self.hive.run(feeds.add_site, self.who, host)
        self.reply({**feed.to_json(), "url": feed_url(self, token)}, status=201)


class SiteFeedHandler(HiveLogic):
    auth_resource = "gpuhive:site-feeds"

    @web.authenticated
    @authorized(WRITE)
    @operation("Stop a site feed (admin); its URL then answers 404")
    async def delete(self, feed_id: str) -> None:
        fid = self.id_arg(feed_id, "site feed")
        await self.hive.run(self.hive.integrations.feeds.remove_site, self.who, fid)
        self.reply({"deleted": True})


class WebhooksHandler(HiveLogic):
    auth_resource = "gpuhive:webhooks"

    @web.authenticated
    @authorized(READ)
    @operation("My webhook endpoints (admins: all); URLs masked, secrets never shown")
    async def get(self) -> None:
        hooks = self.hive.integrations.webhooks
        self.reply({"webhooks": await hooks.listed(self.who)})

    @web.authenticated
    @authorized(WRITE)
    @operation(
        "Add a webhook endpoint; the answer holds its full URL and signing secret, shown only "
        "now ('site': true, admins only, gets everyone's events)",
        201,
        body=bodies.NewWebhook,
        idempotent=False,  # its answer holds a secret the store never keeps
    )
    async def post(self) -> None:
        request = self.body(bodies.NewWebhook).value()
        made = await self.hive.integrations.webhooks.add(self.who, request)
        self.set_header("Location", self.request.path.rstrip("/") + f"/{made['id']}")
        self.reply(made, status=201)


class WebhookHandler(HiveLogic):
    auth_resource = "gpuhive:webhooks"

    @web.authenticated
    @authorized(READ)
    @operation("One of my webhook endpoints (URL masked)")
    async def get(self, webhook_id: str) -> None:
        hooks = self.hive.integrations.webhooks
        found = await hooks.owned(self.who, self.id_arg(webhook_id, "webhook"))
        self.reply(describe(found))

    @web.authenticated
    @authorized(WRITE)
    @operation("Remove one of my webhook endpoints", reply=replies.Deleted)
    async def delete(self, webhook_id: str) -> None:
        hooks = self.hive.integrations.webhooks
        await hooks.remove(self.who, self.id_arg(webhook_id, "webhook"))
        self.reply({"deleted": True})


class DeliveriesHandler(HiveLogic):
    auth_resource = "gpuhive:webhooks"

    @web.authenticated
    @authorized(READ)
    @operation(
        "The delivery log of an endpoint: per event its state (pending, delivered, dead) and "
        "every attempt's outcome",
        query=queries.DeliveriesQuery,
    )
    async def get(self, webhook_id: str) -> None:
        hooks = self.hive.integrations.webhooks
        wid = self.id_arg(webhook_id, "webhook")
        limit = self.query(queries.DeliveriesQuery).limit or 100
        self.reply({"deliveries": await hooks.log(self.who, wid, limit)})


class SubscriptionsHandler(HiveLogic):
    auth_resource = "gpuhive:subscriptions"

    @web.authenticated
    @authorized(READ)
    @operation("My availability subscriptions (admins: all)")
    async def get(self) -> None:
        availability = self.hive.integrations.availability
        found = await self.hive.run(availability.listed, self.who)
        self.reply({"subscriptions": [subscription_json(s) for s in found]})

    @web.authenticated
    @authorized(WRITE)
    @operation(
        "Tell me when N GPUs (on a host, or of a model) are free for a duration before a "
        "deadline; fires through the chosen channels (lab, email, webhook) once, or on every "
        "new slot with 'repeat'",
        201,
        body=bodies.NewSubscription,
    )
    async def post(self) -> None:
        """Tell me when GPUs are free; fires at once when they already are."""
        integrations = self.hive.integrations
        policy = self.hive.settings.policy
        request = self.body(bodies.NewSubscription).value()
        channels = await integrations.channels(self.who, request.channels, request.email)
        request = replace(request, channels=channels)
        values = integrations.availability.parse(self.who, request, policy.horizon)
        made = await self.hive.run(integrations.availability.add, values, self.errand)
        integrations.subscribed()
        self.set_header("Location", self.request.path.rstrip("/") + f"/{made.id}")
        self.reply(subscription_json(made), status=201)


class SubscriptionHandler(HiveLogic):
    auth_resource = "gpuhive:subscriptions"

    @web.authenticated
    @authorized(READ)
    @operation("One of my subscriptions, with its last offer")
    async def get(self, sub_id: str) -> None:
        availability = self.hive.integrations.availability
        sid = self.id_arg(sub_id, "subscription")
        self.reply(subscription_json(await self.hive.run(availability.owned, self.who, sid)))

    @web.authenticated
    @authorized(WRITE)
    @operation("End one of my subscriptions", reply=replies.Deleted)
    async def delete(self, sub_id: str) -> None:
        availability = self.hive.integrations.availability
        sid = self.id_arg(sub_id, "subscription")
        await self.hive.run(availability.remove, self.who, sid)
        self.reply({"deleted": True})


class SubscriptionBookHandler(Shown):
    auth_resource = "gpuhive:subscriptions"

    @web.authenticated
    @authorized(WRITE)
    @operation(
        "Book exactly the slot the subscription last offered, if it is still free",
        201,
        reply=replies.ReservationReply,
        errors=(409, 422),
    )
    async def post(self, sub_id: str) -> None:
        """Book exactly the slot last offered, if it is still free (409 otherwise)."""
        availability = self.hive.integrations.availability
        sid = self.id_arg(sub_id, "subscription")
        booking = await self.hive.run(availability.book, self.who, sid)  # for its subscriber
        made = await self.hive.bookings.create(self.who, booking, self.errand)
        self.reply(self.reservation(made), status=201)


class DigestHandler(HiveLogic):
    auth_resource = "gpuhive:digest"

    @web.authenticated
    @authorized(READ)
    @operation("My daily digest e-mail setting")
    async def get(self) -> None:
        digests = self.hive.integrations.digests
        self.reply(await self.hive.run(digests.setting, self.who))

    @web.authenticated
    @authorized(WRITE)
    @operation(
        "Turn my daily digest e-mail on or off (today's and tomorrow's reservations, GPUs left "
        "idle yesterday, violations on my GPUs)",
        body=bodies.DigestSetting,
    )
    async def put(self) -> None:
        digests = self.hive.integrations.digests
        request = self.body(bodies.DigestSetting).value()
        self.reply(await self.hive.run(digests.configure, self.who, request))
