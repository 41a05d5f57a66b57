"""%gpufeed: my reservations' calendar feed."""

from __future__ import annotations

from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from .client import HiveClientError
from .magics import GpuHiveMagics
from .magicviews import Notice


@magics_class
class GpuFeedMagics(GpuHiveMagics):
    """%gpufeed: the secret URL of my reservations' calendar feed (the client is the base's)."""

    @magic_arguments()
    @argument("--new", action="store_true", help="Make a new feed URL (the old one stops)")
    @argument("--off", action="store_true", help="Turn my feed off (its URL stops working)")
    @argument("-h", "--help", action="store_true", help="Show this help")
    @line_magic
    def gpufeed(self, line: str) -> Any:
        """My reservations as a calendar feed (iCal) for Google, Outlook or Apple calendars."""
        args = parse_argstring(self.gpufeed, line)
        if args.help:
            return self._help(self.gpufeed)
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
