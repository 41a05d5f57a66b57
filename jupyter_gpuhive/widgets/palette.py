"""Colours shared by the views: free, mine, others (one colour per user), allowed windows."""

from __future__ import annotations

import hashlib

FREE = "#f2f2f2"
MINE = "#e6550d"  # saturated orange: own bookings stand out against the pastels of others
MINE_STROKE = "#7f2704"
OTHERS_STROKE = "#6b6b6b"
ALLOWED = "#e5f5e0"  # the windows in which I may book
NOW = "#c00000"
UNBOOKABLE = "#d0d0d0"  # the lane of a failed or drained GPU: never free
UNBOOKABLE_HATCH = "#8a8a8a"
SELECTION = "#3182bd"

# Pastels for other people, none of them close to MINE.
_USER_COLOURS = (
    "#9ecae1",
    "#a1d99b",
    "#bcbddc",
    "#c7c7c7",
    "#9edae5",
    "#dbdb8d",
    "#c5b0d5",
    "#c49c94",
    "#f7b6d2",
    "#aec7e8",
)
OTHERS = _USER_COLOURS[0]


def user_colour(user: str, me: str | None = None) -> str:
    """The fill of a user's bookings: MINE for me, else a stable pastel per user name."""
    if user == me:
        return MINE
    digest = hashlib.sha1(user.encode(), usedforsecurity=False).digest()
    return _USER_COLOURS[digest[0] % len(_USER_COLOURS)]
