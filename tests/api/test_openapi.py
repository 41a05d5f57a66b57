"""The generated OpenAPI document: it covers the route table exactly, its schemas are valid
JSON Schema, the handlers read what it documents, and real answers fit its reply models."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from tornado.web import RequestHandler

from jupyter_gpuhive.errors import HiveError
from jupyter_gpuhive.server.api import ENDPOINTS, PUBLIC_PATHS, openapi_document
from jupyter_gpuhive.server.api.openapi import generate
from jupyter_gpuhive.server.api.operations import PATH_PARAMETERS, implemented, operation_of
from jupyter_gpuhive.server.api.schemas import bodies, parse, queries, replies
from tests.api.helpers import booking
from tests.conftest import soon

DOCUMENT = openapi_document("/")


def test_every_route_is_in_the_document_and_nothing_else() -> None:
    routes = {path: handler for path, handler in ENDPOINTS}
    assert len(routes) == len(ENDPOINTS), "a path is in the route table twice"
    assert set(DOCUMENT["paths"]) == set(routes)
    for path, handler in routes.items():
        methods = {m for m in ("get", "head", "options", "post", "put", "patch", "delete")
                   if getattr(handler, m) is not getattr(RequestHandler, m)}  # fmt: skip
        assert set(DOCUMENT["paths"][path]) == methods, path
        braces = re.findall(r"{(\w+)}", path)
        for method, op in DOCUMENT["paths"][path].items():
            named = [p["name"] for p in op.get("parameters", []) if p["in"] == "path"]
            assert named == braces, (method, path)
            assert op["summary"].strip(), (method, path)
            if path in PUBLIC_PATHS:
                assert op["security"] == [], (method, path)
            else:
                assert "security" not in op and {"401", "403"} <= set(op["responses"])


def test_a_method_without_an_operation_is_refused_by_the_generator() -> None:
    class Undocumented(RequestHandler):
        async def get(self) -> None:
            """Not declared."""

    with pytest.raises(TypeError, match="declares no @operation"):
        generate((("/x", Undocumented),), "/")


def test_every_schema_is_valid_and_every_reference_resolves() -> None:
    schemas = DOCUMENT["components"]["schemas"]
    for schema in schemas.values():
        Draft202012Validator.check_schema(schema)
    text = repr(DOCUMENT)
    for ref in set(re.findall(r"#/components/schemas/(\w+)", text)):
        assert ref in schemas, ref
    for path, operations in DOCUMENT["paths"].items():
        for method, op in operations.items():
            for parameter in op.get("parameters", []):
                Draft202012Validator.check_schema(parameter["schema"])
            for code, answer in op["responses"].items():
                assert answer["description"], (method, path, code)


def test_query_parameters_are_the_ones_the_handlers_read() -> None:
    """One declaration: the query model an @operation names is what the handler parses."""
    documented = {
        (path, method): {p["name"] for p in op.get("parameters", []) if p["in"] == "query"}
        for path, ops in DOCUMENT["paths"].items()
        for method, op in ops.items()
    }
    handlers = dict(ENDPOINTS)
    for (path, method), names in documented.items():
        op = operation_of(handlers[path], method)
        assert op is not None
        assert names == (set(op.query.model_fields) if op.query else set()), (path, method)
    assert documented[("/reservations", "get")] == {
        "start", "end", "host", "gpu", "user", "include_cancelled", "limit"
    }  # fmt: skip
    limit = next(
        p for p in DOCUMENT["paths"]["/violations"]["get"]["parameters"] if p["name"] == "limit"
    )
    assert limit["schema"] == {"type": "integer", "minimum": 1, "maximum": 10_000}
    ids = {p["schema"]["maximum"] for ops in DOCUMENT["paths"].values() for op in ops.values()
           for p in op.get("parameters", []) if p["name"] == "id"}  # fmt: skip
    assert ids == {PATH_PARAMETERS["id"][1]["maximum"]}


def test_bodies_and_answers_are_documented_from_the_models() -> None:
    paths = DOCUMENT["paths"]
    body = paths["/reservations"]["post"]["requestBody"]["content"]["application/json"]
    assert body["schema"] == {"$ref": "#/components/schemas/NewReservation"}
    created = paths["/reservations"]["post"]["responses"]["201"]["content"]["application/json"]
    assert created["schema"] == {"$ref": "#/components/schemas/ReservationReply"}
    schemas = DOCUMENT["components"]["schemas"]
    assert schemas["NewReservation"] == _without_titles(bodies.NewReservation.model_json_schema())
    # the webhook events come from where they are defined
    from jupyter_gpuhive.integrations.webhooks import EVENTS

    events = schemas["NewWebhook"]["properties"]["events"]["items"]["enum"]
    assert events == [*EVENTS, "*"]
    assert schemas["RuleBody"]["properties"]["windows"]["anyOf"][0]["items"] == {
        "$ref": "#/components/schemas/RuleWindow"
    }


def _without_titles(schema: Any) -> Any:
    from jupyter_gpuhive.server.api.openapi import _without_titles as strip

    return strip(schema)


@pytest.mark.parametrize(
    ("model", "data", "status", "message"),
    [
        (bodies.NewReservation, {"gpus": ["gpu1:0"]}, 422, "'title' is required."),
        (bodies.NewReservation, {"title": 5, "gpus": ["a"]}, 400, "'title' must be a string."),
        (bodies.NewReservation, {"title": " ", "gpus": ["a"]}, 422, "'title' must not be empty."),
        (bodies.NewReservation, {"title": "t", "gpus": ["a"], "start": "noon"}, 422,
         "'start' is not a date-time I can read: 'noon'. Use ISO 8601 with an offset, e.g. "
         "2026-05-04T09:00:00+02:00."),
        (bodies.ReservationChange, {"owner": "x", "colour": 1}, 400,
         "Cannot change colour, owner of a reservation."),
        (bodies.NewSubscription, {"duration": "1h", "gpus": 65}, 422,
         "'gpus' must be a whole number from 1 to 64."),
        (bodies.NewSubscription, {"duration": "1h", "channels": ["lab", 7]}, 400,
         "'channels[1]' must be one of lab, email, webhook (a string)."),
        (bodies.NewSubscription, {"duration": "1h", "channels": []}, 422,
         "'channels' must not be empty."),
        (bodies.NewSubscription, {"duration": "1h", "x": 1, "y": 2}, 400,
         "Unknown field(s): x, y."),
        (bodies.RuleBody, {"users": ["*"], "windows": [{"start": 8}]}, 400,
         "'windows[0].start' must be a string."),
        (bodies.NewJob, {"name": "n", "command": "c", "queued": "yes"}, 400,
         "'queued' must be true or false."),
        (bodies.DigestSetting, {}, 422, "'enabled' is required."),
        (queries.ReservationsQuery, {"limit": "²"}, 422, "'limit' must be a whole number, got '²'."),
    ],
)  # fmt: skip
def test_each_refusal_is_one_sentence(
    model: type[Any], data: dict[str, Any], status: int, message: str
) -> None:
    with pytest.raises(HiveError) as refused:
        parse(model, data)
    assert (refused.value.status, refused.value.message) == (status, message)


def test_text_is_trimmed_except_code() -> None:
    job = parse(bodies.NewJob, {"name": " n ", "command": "  echo hi\n", "description": " d "})
    assert (job.name, job.command, job.description) == ("n", "  echo hi\n", "d")
    booked = parse(bodies.NewReservation, {"title": " t ", "gpus": [" gpu1:0 "]}).value()
    assert (booked.title, booked.gpus, booked.description) == ("t", ("gpu1:0",), "")


def test_a_handler_reads_only_what_its_operation_declares() -> None:
    handler = dict(ENDPOINTS)["/reservations"]
    op = operation_of(handler, "post")
    assert op is not None and op.body is bodies.NewReservation and op.status == 201
    assert operation_of(handler, "get").query is queries.ReservationsQuery  # type: ignore[union-attr]
    assert implemented(handler) == ["get", "post"]


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_real_answers_fit_the_reply_models(api: Any) -> None:
    alice, boss = api("alice"), api("boss")
    t = soon(days=2)

    def fits(model: type[Any], reply: Any, status: int = 200) -> dict[str, Any]:
        assert reply.status == status, reply
        model.model_validate(reply.body)
        return reply.body  # type: ignore[no-any-return]

    fits(replies.IdentityReply, await alice("GET", "me"))
    made = fits(replies.ReservationReply,
                await alice("POST", "reservations", booking(["gpu1:0"], t, t + timedelta(hours=1))),
                201)  # fmt: skip
    fits(replies.ReservationList, await boss("GET", "reservations"))
    fits(replies.ReservationReply, await alice("GET", f"reservations/{made['id']}"))
    rule = fits(replies.RuleChanged, await boss("POST", "rules", {"name": "all", "users": ["*"]}),
                201)  # fmt: skip
    fits(replies.RuleList, await alice("GET", "rules"))
    job = fits(replies.JobReply,
               await alice("POST", "jobs", {"name": "j", "gpus": ["gpu2:0"], "command": "true"}),
               201)  # fmt: skip
    fits(replies.JobList, await boss("GET", "jobs"))
    fits(replies.Preview, await alice("POST", "jobs/preview",
                                       {"name": "j", "gpus": ["gpu2:0"], "command": "true"}))  # fmt: skip
    fits(replies.Deleted, await alice("DELETE", f"jobs/{job['id']}"))
    fits(replies.RuleDeleted, await boss("DELETE", f"rules/{rule['id']}"))
    fits(replies.ErrorReply, await alice("GET", "reservations/424242"), 404)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_a_feed_is_served_as_the_calendar_the_document_states(
    api: Any, http_server_client: Any
) -> None:
    """Jupyter's APIHandler labelled every answer application/json, feeds included."""
    documented = DOCUMENT["paths"]["/calendar/{token}.ics"]["get"]["responses"]["200"]["content"]
    assert set(documented) == {"text/calendar"}
    made = await api("alice")("POST", "feeds/personal")
    assert made.status == 201, made
    path = "/" + made.body["url"].split("://", 1)[1].split("/", 1)[1]
    response = await http_server_client.fetch(path, raise_error=False)
    assert response.code == 200, response.body
    assert response.headers["Content-Type"] == "text/calendar; charset=utf-8"
    assert response.body.startswith(b"BEGIN:VCALENDAR")


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_a_log_no_host_can_read_is_the_documented_503(api: Any) -> None:
    """alice has no account on the simulated hosts; her log is a 503 with the host's reason."""
    alice = api("alice")
    job = await alice("POST", "jobs", {"name": "j", "gpus": ["gpu2:0"], "command": "true"})
    assert job.status == 201, job
    documented = DOCUMENT["paths"]["/jobs/{id}/log"]["get"]["responses"]
    for params in ({}, {"tail": "0"}, {"offset": "0", "tail": "10"}):
        reply = await alice("GET", f"jobs/{job.body['id']}/log", params=params)
        assert str(reply.status) in documented, reply
        assert reply.status == 503, reply
        assert "Cannot read the log on gpu2" in reply.message, reply
