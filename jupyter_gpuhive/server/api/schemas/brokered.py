"""Bodies and answers of brokered kernels: the team-mode service runs a server's kernel."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from ....kernels.broker import MAX_ENV, SIGNALS
from ....model import ID_MAX
from .bodies import HOST_MAX, Closed
from .fields import Check, Flag, choice, maybe, refuse, text, whole
from .replies import Reply

ENV_VALUE_MAX = 4096


def _env(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise refuse("{field} must be an object of names to string values.", 400)
    if len(value) > MAX_ENV:
        raise refuse(f"{{field}} has {len(value)} variables; the limit is {MAX_ENV}.")
    for name, item in value.items():
        if not name or "=" in name or "\0" in name or "\0" in item or len(item) > ENV_VALUE_MAX:
            raise refuse(f"{{field}}: {name[:40]!r} is not a usable environment variable.")
    return dict(value)


Env = Annotated[dict[str, str], Check(_env, {"anyOf": [{"type": "object"}, {"type": "null"}]})]


class LaunchBody(Closed):
    """Start (or, for a kernel already started, restart) a kernel on my reservation."""

    unknown = "Unknown field(s): {names}; a launch has 'reservation_id', 'host' and 'env'."

    reservation_id: Annotated[int, whole(0, ID_MAX)] = Field(
        description="The reservation whose host and GPUs the kernel uses"
    )
    host: Annotated[str | None, maybe(text(HOST_MAX, required=True))] = Field(
        None, description="Which host of a reservation on several (default: most GPUs)"
    )
    env: Env = Field(
        default_factory=dict,
        description="The kernelspec's environment variables (the service sets the host's GPU "
        "pinning variables itself)",
    )


class SignalBody(Closed):
    """A signal for the kernel's process group on its host."""

    unknown = "Unknown field(s): {names}; a signal has only 'signal'."

    signal: Annotated[str, choice(SIGNALS)] = Field(description="e.g. SIGINT (interrupt)")


class CleanupBody(Closed):
    """The kernel's process ended (or is to end now): drop what it used."""

    unknown = "Unknown field(s): {names}; a cleanup has only 'restart'."

    restart: Flag = Field(False, description="true: it starts again at once (keep its sockets)")


class Connection(Reply):
    """How the kernel manager reaches the kernel: Unix sockets PREFIX-1 … PREFIX-5."""

    transport: str = Field(description="Always 'ipc'")
    ip: str = Field(description="The sockets' prefix, in a 0700 directory of the owner")
    shell_port: int
    iopub_port: int
    stdin_port: int
    control_port: int
    hb_port: int
    key: str = Field(description="The kernel's HMAC key (only ever sent to its owner)")
    signature_scheme: str


class LaunchReply(Reply):
    """The kernel runs: where to connect, and the registry's record of it."""

    connection: Connection
    kernel: dict[str, Any] | None = Field(description="The kernel's record (owner, host, GPUs)")


class ProcessReply(Reply):
    """The kernel's process as the service sees it."""

    running: bool
    exit_status: int | None = Field(description="null while it runs")
    state: str = Field(description="starting, running, restarting, dead or ended")
    reason: str | None = Field(description="Why it died or ended")
