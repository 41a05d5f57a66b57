"""REST handlers of the integrations: calendar feeds and webhooks (docs/integrations.md)."""

from __future__ import annotations

import inspect

from jupyter_server.auth.decorator import allow_unauthenticated
from tornado import web

from ...errors import BadRequest, NotFound
from ...integrations.digests import setting_json
from ...integrations.subscriptions import subscription_json
from ...integrations.webhooks import describe
from .base import HiveLogic
from .handlers import Shown


def feed_url(handler: HiveLogic, token: str) -> str:
    """The absolute URL of a feed (the token is its only credential)."""
    base = handler.request.path.split("/gpuhive/api/")[0]
    return f"{handler.request.protocol}://{handler.request.host}{base}/gpuhive/api/calendar/{token}.ics"


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
    async def get(self, token: str) -> None:
        body = await self.hive.run(self.hive.integrations.feeds.render, token)
        self.set_header("Content-Type", "text/calendar; charset=utf-8")
        self.set_header("Cache-Control", "private, max-age=300")
        self.set_header("Referrer-Policy", "no-referrer")
        self.finish(body)


class FeedsHandler(HiveLogic):
    @web.authenticated
    async def get(self) -> None:
        feeds = self.hive.integrations.feeds
        self.reply(await self.hive.run(feeds.status, self.who))


class PersonalFeedHandler(HiveLogic):
    @web.authenticated
    async def post(self) -> None:
        """Make or rotate the requester's feed: the URL is shown this once."""
        feeds = self.hive.integrations.feeds
        feed, token = await self.hive.run(feeds.rotate, self.who)
        self.reply({**feed.to_json(), "url": feed_url(self, token)}, status=201)

    @web.authenticated
    async def delete(self) -> None:
        feeds = self.hive.integrations.feeds
        if not await self.hive.run(feeds.stop, self.who):
            raise NotFound(f"{self.who.name} has no calendar feed.")
        self.reply({"deleted": True})


class SiteFeedsHandler(HiveLogic):
    @web.authenticated
    async def post(self) -> None:
        body = self.json_body()
        unknown = set(body) - {"host"}
        if unknown:
            raise BadRequest(f"Unknown field(s): {', '.join(sorted(unknown))}.")
        host = body.get("host")
        if host is not None and not isinstance(host, str):
            raise BadRequest("'host' must be a host name (or absent for every host).")
        feeds = self.hive.integrations.feeds
        feed, token = await self.hive.run(feeds.add_site, self.who, host or None)
        self.reply({**feed.to_json(), "url": feed_url(self, token)}, status=201)


class SiteFeedHandler(HiveLogic):
    @web.authenticated
    async def delete(self, feed_id: str) -> None:
        fid = self.id_arg(feed_id, "site feed")
        await self.hive.run(self.hive.integrations.feeds.remove_site, self.who, fid)
        self.reply({"deleted": True})


class WebhooksHandler(HiveLogic):
    @web.authenticated
    async def get(self) -> None:
        hooks = self.hive.integrations.webhooks
        self.reply({"webhooks": await hooks.listed(self.who)})

    @web.authenticated
    async def post(self) -> None:
        made = await self.hive.integrations.webhooks.add(self.who, self.json_body())
        self.set_header("Location", self.request.path.rstrip("/") + f"/{made['id']}")
        self.reply(made, status=201)


class WebhookHandler(HiveLogic):
    @web.authenticated
    async def get(self, webhook_id: str) -> None:
        hooks = self.hive.integrations.webhooks
        found = await hooks.owned(self.who, self.id_arg(webhook_id, "webhook"))
        self.reply(describe(found))

    @web.authenticated
    async def delete(self, webhook_id: str) -> None:
        hooks = self.hive.integrations.webhooks
        await hooks.remove(self.who, self.id_arg(webhook_id, "webhook"))
        self.reply({"deleted": True})


class DeliveriesHandler(HiveLogic):
    @web.authenticated
    async def get(self, webhook_id: str) -> None:
        hooks = self.hive.integrations.webhooks
        wid = self.id_arg(webhook_id, "webhook")
        limit = self.int_arg("limit", 100, 1, 1000)
        self.reply({"deliveries": await hooks.log(self.who, wid, limit)})


class SubscriptionsHandler(HiveLogic):
    @web.authenticated
    async def get(self) -> None:
        rows = self.hive.integrations.availability.rows
        owner = None if self.who.is_admin else self.who.name
        found = await self.hive.run(rows.all, owner)
        self.reply({"subscriptions": [subscription_json(s) for s in found]})

    @web.authenticated
    async def post(self) -> None:
        """Tell me when GPUs are free; fires at once when they already are."""
        integrations = self.hive.integrations
        policy = self.hive.settings.policy
        values = integrations.availability.parse(self.who, self.json_body(), policy.horizon)
        made = await self.hive.run(integrations.availability.rows.add, values)
        integrations.subscribed()
        self.set_header("Location", self.request.path.rstrip("/") + f"/{made.id}")
        self.reply(subscription_json(made), status=201)


class SubscriptionHandler(HiveLogic):
    @web.authenticated
    async def get(self, sub_id: str) -> None:
        availability = self.hive.integrations.availability
        sid = self.id_arg(sub_id, "subscription")
        self.reply(subscription_json(await self.hive.run(availability.owned, self.who, sid)))

    @web.authenticated
    async def delete(self, sub_id: str) -> None:
        availability = self.hive.integrations.availability
        sid = self.id_arg(sub_id, "subscription")
        await self.hive.run(availability.owned, self.who, sid)
        await self.hive.run(availability.rows.delete, sid)
        self.reply({"deleted": True})


class SubscriptionBookHandler(Shown):
    @web.authenticated
    async def post(self, sub_id: str) -> None:
        """Book exactly the slot last offered, if it is still free (409 otherwise)."""
        availability = self.hive.integrations.availability
        sid = self.id_arg(sub_id, "subscription")
        body = await self.hive.run(availability.book, self.who, sid)
        sub = await self.hive.run(availability.owned, self.who, sid)
        if sub.owner != self.who.name:
            body["owner"] = sub.owner
        made = await self.hive.create_reservation(self.who, body)
        self.reply(self.reservation(made), status=201)


class DigestHandler(HiveLogic):
    @web.authenticated
    async def get(self) -> None:
        digests = self.hive.integrations.digests
        found = await self.hive.run(digests.rows.get, self.who.name)
        self.reply(setting_json(found, self.who.name))

    @web.authenticated
    async def put(self) -> None:
        digests = self.hive.integrations.digests
        self.reply(await self.hive.run(digests.configure, self.who, self.json_body()))
