"""Handler bases: who is asking, JSON in and out, domain errors → HTTP in one place.

`HiveLogic` holds everything an endpoint needs and works on any tornado RequestHandler
that can tell who is asking (`requester()`). `HiveHandler` is the base inside a Jupyter
server (identity from its IdentityProvider); the JupyterHub service has its own base
(identity from the Hub) in `jupyter_gpuhive.hub`.
"""

from __future__ import annotations

import getpass
import inspect
import json
import logging
import re
from typing import Any, TypeVar

from jupyter_server.base.handlers import APIHandler
from pydantic import BaseModel
from tornado.web import RequestHandler

try:
    import orjson

    def dumps(data: Any) -> bytes:
        return orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS)

except ImportError:  # pragma: no cover - orjson is a dependency; stay correct without it

    def dumps(data: Any) -> bytes:
        return json.dumps(data).encode()


from ...errors import (
    BadRequest,
    HiveError,
    MethodNotAllowed,
    NotFound,
    TooLarge,
    Unauthorized,
)
from ...hive import Hive
from ...model import ID_MAX, Identity
from ...model.errand import ERRAND, Errand, KeyAnswered
from ..kernel_tokens import SETTING as KERNEL_TOKENS
from ..kernel_tokens import KernelTokens, KernelUser
from . import idempotency
from .admission import SETTING as ADMISSION
from .admission import Intake, client_deadline
from .authorization import RouteAuthorizer
from .inputs import (
    DIGITS,
    MAX_BODY_BYTES,
    NO_CREDENTIALS,
    TOO_DEEP,
    check_json,
    shown,
)
from .operations import operation_of
from .schemas import Query, parse

M = TypeVar("M", bound=BaseModel)
Q = TypeVar("Q", bound=Query)

log = logging.getLogger(__name__)

# Identity providers of jupyter_server itself hand out random anonymous ids for the
# server token; for those the owner is the OS user running the server.
_ANONYMOUS_PROVIDERS = ("jupyter_server.auth.identity",)
# What IdentityProvider.generate_anonymous_user makes (a uuid4 hex id named 'Anonymous …'):
# any provider that falls back to it for the server's own token hands out such users.
_ANONYMOUS_ID = re.compile(r"[0-9a-f]{32}")


def _is_anonymous(user: object) -> bool:
    name = getattr(user, "username", None)
    if not name:
        return True
    return bool(_ANONYMOUS_ID.fullmatch(name)) and str(getattr(user, "name", "")).startswith(
        "Anonymous "
    )


class HiveLogic(RequestHandler):
    """What every endpoint uses; mixed into a deployment-specific base handler."""

    _who: Identity | None = None
    endpoints: tuple[tuple[str, type], ...] = ()  # the route table it is served in (routes())
    route = ""  # its path in that table (the API latency histogram's label)
    admitted = True  # counted against max_requests_in_flight (False: metrics scrapes)
    runs_to_the_end = False  # True: it reaches hosts; once its work started, none is dropped
    # True: its writes change only the database (nothing on hosts, nothing sent before they
    # commit), so in team mode they may run on the Hub's last answer about the token while
    # the Hub is asked afresh, committing only once it confirms (server/hub.py)
    confirms_identity_late = False
    errand: Errand | None = None  # what its database work may still do (model/errand.py)
    _admission: Intake | None = None  # the bound it was counted in, until it finishes
    _key: idempotency.KeyUse | None = None  # its Idempotency-Key, until its answer is stored

    async def prepare(self) -> None:
        """Admit the request (or 503 at once), authenticate it, bind its Idempotency-Key."""
        self.admit()
        result = super().prepare()
        if inspect.isawaitable(result):
            await result
        await self.claim_key()

    def admit(self) -> None:
        """Count the request in flight, or refuse it (503, Retry-After) before any work."""
        admission: Intake | None = self.settings.get(ADMISSION)
        if admission is None or not self.admitted or self._admission is not None:
            return
        admission.enter()
        self._admission = admission
        self.errand = Errand.starting(admission.deadline, self.runs_to_the_end)
        self.errand.client_deadline = client_deadline(self.request)
        ERRAND.set(self.errand)

    async def claim_key(self) -> None:
        """A creating POST with an Idempotency-Key: its first write takes the key, or finds
        it used and the request is answered from it instead (`write_error`)."""
        raw = self.request.headers.get(idempotency.HEADER)
        method = (self.request.method or "").lower()
        declared = operation_of(type(self), method)
        if raw is None or declared is None or not declared.keyed or self.current_user is None:
            return
        key = idempotency.valid_key(raw)
        path = self.request.path.rsplit("/api/", 1)[-1]
        admission: Intake | None = self.settings.get(ADMISSION)
        deadline = admission.deadline if admission is not None else 60.0
        print_ = idempotency.fingerprint(method, path, self.request.body)
        use = idempotency.KeyUse(self.hive, self.who.name, key, print_, deadline)
        await use.ready()
        if self.runs_to_the_end:
            await use.peek()  # a retry must not reach hosts again before its write finds it
        if self.errand is None:  # no admission control configured: an errand without deadline
            self.errand = Errand.starting(float("inf"))
            self.errand.client_deadline = client_deadline(self.request)
            ERRAND.set(self.errand)
        use.bind(self.errand)
        self._key = use

    def on_connection_close(self) -> None:
        """The client has gone: its request starts no more database work."""
        if self.errand is not None:
            self.errand.closed = True
        if self._admission is not None:
            self._admission.gone += 1
        super().on_connection_close()

    def finish(self, chunk: Any = None, **kwargs: Any) -> Any:
        """Finish; with an Idempotency-Key, an answer below 500 is stored right after it
        went out (it costs the client no wait)."""
        use, self._key = self._key, None
        if use is not None:
            if chunk is not None:
                self.write(chunk)
                chunk = None
            status = self.get_status()
            if status < 500:
                wrote = self.errand is not None and self.errand.took_key
                body = b"".join(self._write_buffer)
                use.settle_after(status, body, self._headers.get("Location"), wrote)
        return super().finish(chunk, **kwargs)

    @property
    def hive(self) -> Hive:
        return self.settings["gpuhive"]  # type: ignore[no-any-return]

    @property
    def authorizer(self) -> RouteAuthorizer:
        """What `@authorized` asks: gpuhive's policy, then the site's authorizer."""
        return RouteAuthorizer(self.site_authorizer(), self.hive.bookings.authority)

    def site_authorizer(self) -> Any:
        """The deployment's own authorizer (None: none beyond gpuhive's policy)."""
        return None

    def requester(self) -> Identity:
        """The authenticated requester; each deployment base says how it knows."""
        raise NotImplementedError

    def public_api_url(self) -> str:
        """This API's absolute URL (ending in 'api/') as its caller reached it."""
        base = self.request.path.split("/gpuhive/api/")[0]
        return f"{self.request.protocol}://{self.request.host}{base}/gpuhive/api/"

    @property
    def who(self) -> Identity:
        """The requester as gpuhive sees them (name, groups, admin)."""
        if self._who is None:
            self._who = self.requester()
        return self._who

    # --- input ---------------------------------------------------------------------

    def json_body(self) -> dict[str, Any]:
        """The request body as a JSON object, or a 400/413/422 that says what is wrong."""
        raw = self.request.body
        if len(raw) > MAX_BODY_BYTES:
            raise TooLarge(
                f"The request body is {len(raw)} bytes; the limit is {MAX_BODY_BYTES} bytes "
                f"({MAX_BODY_BYTES // 1024} KiB)."
            )
        if not raw:
            raise BadRequest("The request needs a JSON object as its body.")
        try:
            data = json.loads(raw)
        except RecursionError:
            raise BadRequest(TOO_DEEP) from None
        except (ValueError, UnicodeDecodeError) as error:
            raise BadRequest(f"The request body is not valid JSON: {error}.") from None
        if not isinstance(data, dict):
            raise BadRequest("The request body must be a JSON object.")
        check_json(data)
        return data

    def body(self, model: type[M]) -> M:
        """The request body read as `model`, which this method declares (see operations)."""
        self._declared("body", model)
        return parse(model, self.json_body())

    def query(self, model: type[Q]) -> Q:
        """The query parameters read as `model`, which this method declares."""
        self._declared("query", model)
        repeated = model.repeated()
        given = self.request.query_arguments
        data = {
            name: (self.get_query_arguments if name in repeated else self.get_query_argument)(name)
            for name in model.model_fields
            if name in given
        }
        return parse(model, data)

    def _declared(self, part: str, model: type[BaseModel]) -> None:
        """Refuse to read a body or query the method's @operation does not document."""
        method = (self.request.method or "").lower()
        declared = operation_of(type(self), method)
        if declared is None or getattr(declared, part) is not model:
            raise TypeError(f"{type(self).__name__}.{method} reads a {part} it does not declare")

    def decode_argument(self, value: bytes, name: str | None = None) -> str:
        """Path arguments (ids) never fail to decode; query arguments must be UTF-8."""
        if name is None:  # a path argument: id_arg refuses what is not an id
            return value.decode("utf-8", errors="replace")
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise BadRequest(f"The query parameter {shown(name)} is not valid UTF-8.") from None

    def id_arg(self, value: str, what: str) -> int:
        """An id from the path: ASCII digits up to ID_MAX, otherwise nothing has it (404)."""
        if not DIGITS.fullmatch(value):
            raise NotFound(f"There is no {what} {shown(value)}; ids are numbers.")
        if len(value) > len(str(ID_MAX)) or int(value) > ID_MAX:
            raise NotFound(f"There is no {what} {shown(value)}; ids go up to {ID_MAX}.")
        return int(value)

    # --- output --------------------------------------------------------------------

    def reply(self, data: Any, status: int = 200) -> None:
        self.reply_encoded(dumps(data), status)

    def reply_encoded(self, body: bytes, status: int = 200) -> None:
        """Answer with JSON already encoded (an answer shared by many requests)."""
        self.set_status(status)
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.finish(body)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        error = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(error, KeyAnswered):  # its write found the key used before
            self._key = None  # answered from the key's row: nothing to store
            claim = error.claim
            if claim.outcome == "replay" and claim.status is not None:
                self.set_status(claim.status)
                self.set_header("Content-Type", "application/json; charset=UTF-8")
                self.set_header(idempotency.REPLAYED, "true")
                if claim.location:
                    self.set_header("Location", claim.location)
                self.finish(claim.body or "")
                return
            error = idempotency.refusal(error)
        if status_code == 403 and not isinstance(error, HiveError) and self._anonymous():
            # jupyter_server answers 403 when no credentials came; this API says 401 (as in
            # team mode), and keeps 403 for what an authenticated user may not do.
            error = Unauthorized(NO_CREDENTIALS)
        if status_code == 405 and not isinstance(error, HiveError):
            allowed = self.allowed_methods()
            self.set_header("Allow", ", ".join(allowed))
            error = MethodNotAllowed(
                f"{self.request.method} is not allowed here; this resource answers "
                f"{', '.join(allowed)}."
            )
        if isinstance(error, HiveError):
            self.set_status(error.status)
            self.set_header("Content-Type", "application/json; charset=UTF-8")
            if error.status == 401:
                self.set_header("WWW-Authenticate", "token")
            retry_after = getattr(error, "retry_after", None)
            if retry_after is not None:
                self.set_header("Retry-After", str(retry_after))
            self.finish(json.dumps({"message": error.message, **error.details}))
            return
        super().write_error(status_code, **kwargs)

    def allowed_methods(self) -> list[str]:
        """The HTTP methods this resource answers (for 405's Allow header)."""
        return [
            method
            for method in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
            if getattr(type(self), method.lower()) is not getattr(RequestHandler, method.lower())
        ]

    def _anonymous(self) -> bool:
        """Whether authentication ran and found nobody (no or unknown credentials)."""
        return "_current_user" in vars(self) and self._current_user is None

    def on_finish(self) -> None:
        """Count the request's latency per route and method (GET prometheus); out of flight."""
        if self._admission is not None:
            self._admission.leave()
            self._admission = None
        if self.errand is not None:
            self.errand.finished = True
        hive = self.settings.get("gpuhive")
        if hive is not None and self.route:
            histogram = hive.monitor.exposition.api_seconds
            histogram.labels(self.route, self.request.method or "").observe(
                self.request.request_time()
            )
        super().on_finish()

    def log_exception(self, typ: Any, value: Any, tb: Any) -> None:
        if isinstance(value, HiveError):
            log.debug("gpuhive: %s %s", value.status, value.message)
            return
        super().log_exception(typ, value, tb)


class HiveHandler(HiveLogic, APIHandler):  # type: ignore[misc]  # prepare(): as APIHandler
    """Base of the REST handlers inside a Jupyter server.

    Besides Jupyter's own credentials it takes kernel tokens (`Authorization: token
    gpuhive-kernel-…`, see `kernel_tokens`): each stands for the user who started the kernel,
    here and nowhere else in the server.
    """

    _kernel: KernelUser | None = None
    _kernel_looked_up = False

    @property
    def identity_provider(self) -> Any:
        provider = super().identity_provider
        kernel = self._kernel_user()
        return provider if kernel is None else _KernelIdentity(provider, kernel)

    def _kernel_user(self) -> KernelUser | None:
        """The user of the request's kernel token, if it carries one (looked up once)."""
        if not self._kernel_looked_up:
            tokens: KernelTokens | None = self.settings.get(KERNEL_TOKENS)
            found = _BEARER.fullmatch(self.request.headers.get("Authorization", "").strip())
            self._kernel = tokens.user(found[1]) if tokens is not None and found else None
            self._kernel_looked_up = True
        return self._kernel

    def finish(self, *args: Any, **kwargs: Any) -> Any:
        """Keep a Content-Type set before (a calendar feed, a CSV report): Jupyter's
        APIHandler would label every answer application/json."""
        media = self._headers.get("Content-Type", "application/json")
        kwargs.setdefault("set_content_type", media)
        return super().finish(*args, **kwargs)

    def site_authorizer(self) -> Any:
        """The Jupyter server's Authorizer (ServerApp.authorizer_class)."""
        return APIHandler.authorizer.fget(self)  # type: ignore[attr-defined]

    def requester(self) -> Identity:
        user = self.current_user
        if isinstance(user, KernelUser):
            return self.hive.identities.identify(user.username, user.groups)
        name, groups = self.gpuhive_user(user, self.identity_provider)
        return self.hive.identities.identify(name, groups)

    @staticmethod
    def gpuhive_user(user: Any, provider: Any) -> tuple[str, list[str] | None]:
        """Who a Jupyter user is to gpuhive: name and groups (None: unknown)."""
        if type(provider).__module__ in _ANONYMOUS_PROVIDERS or _is_anonymous(user):
            return getpass.getuser(), None
        # A user without a `groups` field says nothing about groups: None keeps the known ones.
        groups = getattr(user, "groups", None)
        return user.username, None if groups is None else list(groups)


_BEARER = re.compile(r"(?:token|bearer)\s+(\S+)", re.IGNORECASE)


class _KernelIdentity:
    """Jupyter's identity provider for one request that carried a kernel token."""

    def __init__(self, provider: Any, user: KernelUser) -> None:
        self._provider = provider
        self._user = user

    def get_user(self, handler: Any) -> KernelUser:
        return self._user

    def is_token_authenticated(self, handler: Any) -> bool:
        return True  # a header token, as Jupyter's own: no XSRF cookie needed

    def __getattr__(self, name: str) -> Any:
        return getattr(self._provider, name)
