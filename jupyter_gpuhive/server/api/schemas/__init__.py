"""Request and response models of the REST API, and reading a request into them.

`bodies`: what each POST/PUT/PATCH takes and the typed value the domain gets; `queries`: the
query parameters of each GET; `replies`: the main answers; `fields`: the field kinds they are
made of; `refusals`: pydantic's errors as one sentence each. The OpenAPI document
(`..openapi`) is generated from these models and the route table.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from .bodies import BODIES, Body
from .queries import Query
from .refusals import refusal
from .replies import REPLIES, ErrorReply, Reply

M = TypeVar("M", bound=BaseModel)


def parse(model: type[M], data: Any) -> M:
    """`data` (a JSON body or query parameters) as `model`, or the HiveError that says why not."""
    try:
        return model.model_validate(data)
    except ValidationError as error:
        unknown = getattr(model, "unknown", "Unknown field(s): {names}.")
        raise refusal(error, unknown) from None


__all__ = ["BODIES", "REPLIES", "Body", "ErrorReply", "Query", "Reply", "parse"]
