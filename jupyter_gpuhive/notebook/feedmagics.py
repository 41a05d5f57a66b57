"""%gpufeed (my calendar feed) and what %gpureserve --notify does when GPUs are not free."""

from __future__ import annotations

import html
from datetime import datetime, timezone
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from ..model import describe_duration
from .client import HiveClient, HiveClientError

UTC = timezone.utc


class Notice(dict):  # type: ignore[type-arg]
    """An API answer shown as a short message (text and HTML)."""

    def __init__(self, data: dict[str, Any], message: str) -> None:
        super().__init__(data)
        self.message = message

    def __repr__(self) -> str:
        return self.message

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(self.message)

    def _repr_html_(self) -> str:
        lines = "<br>".join(html.escape(line) for line in self.message.splitlines())
        return f"<div class='gpuhive-notice'>{lines}</div>"


def _client(magics: Any) -> HiveClient:
    client: HiveClient = magics.client
    return client


def reserve_or_notify(magics: Any, args: Any) -> Any:
    """Book now if the GPUs are free; otherwise subscribe to be told when they are."""
    from .magics import parse_gpu_args, parse_when

    try:
        return magics._reserve(args)
    except UsageError as error:
        reason = str(error)
    gpus, count = parse_gpu_args(args.gpus)
    hosts = sorted({g.split(":")[0] for g in gpus})
    if gpus and len(hosts) != 1:
        raise UsageError(f"{reason} (--notify needs GPUs of one host, or a count.)")
    host = args.host or (hosts[0] if hosts else None)
    start, end = magics._span(args)
    length = end - start
    body: dict[str, Any] = {"gpus": count or len(gpus), "duration": length.total_seconds()}
    if host:
        body["host"] = host
    if args.before:
        body["deadline"] = parse_when(args.before, datetime.now(UTC)).isoformat()
    try:
        made = _client(magics).request("POST", "subscriptions", body)
    except HiveClientError as error:
        raise UsageError(f"{reason} Nor can gpuhive watch for them: {error.message}") from None
    where = f"on {host}" if host else "on one host"
    message = (
        f"Not booked now: {reason}\n"
        f"gpuhive will tell you when {body['gpus']} GPU(s) {where} are free for "
        f"{describe_duration(length)} (subscription {made['id']}; by "
        f"{', '.join(made['channels'])}), with a line that books them."
    )
    return Notice(made, message)


@magics_class
class GpuFeedMagics(Magics):
    """%gpufeed: the secret URL of my reservations' calendar feed."""

    _client: HiveClient | None = None

    @property
    def client(self) -> HiveClient:
        if self._client is None:
            try:
                self._client = HiveClient()
            except HiveClientError as error:
                raise UsageError(error.message) from None
        return self._client

    @magic_arguments()
    @argument("--new", action="store_true", help="Make a new feed URL (the old one stops)")
    @argument("--off", action="store_true", help="Turn my feed off (its URL stops working)")
    @argument("-h", "--help", action="store_true", help="Show this help")
    @line_magic
    def gpufeed(self, line: str) -> Any:
        """My reservations as a calendar feed (iCal) for Google, Outlook or Apple calendars."""
        args = parse_argstring(self.gpufeed, line)
        if args.help:
            text = self.gpufeed.parser.format_help().removeprefix("::\n\n")
            print("usage: " + text.strip())
            return None
        try:
            if args.off:
                self.client.request("DELETE", "feeds/personal")
                return Notice({}, "Your calendar feed is off; its URL no longer works.")
            if args.new:
                made = self.client.request("POST", "feeds/personal")
                return Notice(
                    made,
                    f"Your calendar feed (subscribe to it in your calendar; keep it secret):\n"
                    f"{made['url']}\nAny earlier feed URL of yours stopped working.",
                )
            status = self.client.request("GET", "feeds")
        except HiveClientError as error:
            raise UsageError(error.message) from None
        mine = status.get("personal")
        if not mine:
            return Notice(status, "You have no calendar feed yet: %gpufeed --new makes one.")
        return Notice(
            status,
            f"Your calendar feed exists since {mine['created_at'][:16]} UTC (URL ending "
            f"{mine['token_hint']}.ics). Its URL is shown only when made: %gpufeed --new makes "
            "a new one (the old one stops), %gpufeed --off turns it off.",
        )
