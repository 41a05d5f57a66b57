"""Domain errors; the web layer maps each to one HTTP status in one place."""

from __future__ import annotations

from typing import Any


class HiveError(Exception):
    """Base of all errors a person should read: `message` is a full sentence."""

    status = 400

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details


class BadRequest(HiveError):
    """The request itself is malformed (not JSON, wrong types, missing fields)."""

    status = 400


class Forbidden(HiveError):
    """The requester may not do this."""

    status = 403


class NotFound(HiveError):
    """The named thing does not exist."""

    status = 404


class MethodNotAllowed(HiveError):
    """The resource exists but does not answer this HTTP method."""

    status = 405


class Conflict(HiveError):
    """The request clashes with the current state (e.g. an overlapping reservation)."""

    status = 409


class Invalid(HiveError):
    """Well-formed but unacceptable values (end before start, unknown GPU, too long)."""

    status = 422


class TooLarge(HiveError):
    """The request body is larger than the API accepts."""

    status = 413


class Unauthorized(HiveError):
    """No valid credentials were sent."""

    status = 401


class Unavailable(HiveError):
    """A host or service needed for the request cannot be reached now."""

    status = 503


class Unconfirmed(Unavailable):
    """The Hub did not confirm the identity a request ran on: nothing was committed."""

    retry_after = 1
