"""What a host group's administrators set for their group's hosts only: the limits of each
user's bookings there, and the no-show times there (the site's apply where a group sets
none). Site admins set them too; nobody else (model/authority.py, `gpuhive:host-groups`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from .core import describe_duration, isoformat
from .limits import Limits


@dataclass(frozen=True)
class NoShowTimes:
    """No-show times: after how long a booking nobody used is a no-show (None: the site's;
    zero: not watched), and how much later it is released (None: the site's)."""

    after: timedelta | None = None
    release_after: timedelta | None = None

    @classmethod
    def of_seconds(cls, after: float | None, release_after: float | None) -> NoShowTimes:
        return cls(_span(after), _span(release_after))

    @property
    def empty(self) -> bool:
        return self.after is None and self.release_after is None

    def over(self, site: NoShowTimes) -> NoShowTimes:
        """These times, the site's where these leave one open."""
        return NoShowTimes(
            self.after if self.after is not None else site.after,
            self.release_after if self.release_after is not None else site.release_after,
        )

    def seconds(self) -> tuple[float | None, float | None]:
        """(after, release_after) in seconds (None: the site's)."""
        return _seconds(self.after), _seconds(self.release_after)

    def to_json(self) -> dict[str, Any]:
        after, release_after = self.seconds()
        return {"after_s": after, "release_after_s": release_after}

    def words(self) -> str:
        """'a no-show after 15min, released 30min later' (or 'not watched')."""
        if self.after is None or not self.after:
            return "no-shows are not watched"
        release = describe_duration(self.release_after or timedelta())
        return f"a no-show after {describe_duration(self.after)}, released {release} later"


@dataclass(frozen=True)
class HostGroupSettings:
    """One host group's settings as stored (empty ones: none stored)."""

    group: str
    limits: Limits = field(default_factory=Limits)
    noshow: NoShowTimes = field(default_factory=NoShowTimes)
    updated_by: str | None = None
    updated_at: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "limits": self.limits.to_json(),
            "noshow": self.noshow.to_json(),
            "updated_by": self.updated_by,
            "updated_at": isoformat(self.updated_at),
        }


def _span(seconds: float | None) -> timedelta | None:
    return None if seconds is None else timedelta(seconds=seconds)


def _seconds(value: timedelta | None) -> float | None:
    return None if value is None else value.total_seconds()
