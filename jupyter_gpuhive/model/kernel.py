"""What a kernel is told by the server that starts it: the names of its environment variables.

The server (`server.kernel_tokens`) sets them, the kernel's client (`notebook.client`) reads
them; both import the names from here. `KernelState` is a kernel record's state.
"""

from enum import StrEnum


class KernelState(StrEnum):
    """Where a gpuhive kernel is in its life (`kernels.registry` moves it)."""

    STARTING = "starting"
    RUNNING = "running"
    RESTARTING = "restarting"
    DEAD = "dead"
    ENDED = "ended"


ENV_URL = "GPUHIVE_URL"  # the gpuhive server's base URL
# A kernel token: gpuhive's API as the user who started the kernel.
ENV_TOKEN = "GPUHIVE_TOKEN"  # noqa: S105 - the variable's name, not a secret

# Kernelspecs of kernels on reservations are named gpuhive-r<reservation id> (kernels.specs);
# %gpureserve --kernel asks the labextension to switch to one over this comm target.
SPEC_PREFIX = "gpuhive-r"
SWITCH_TARGET = "gpuhive.kernel"
