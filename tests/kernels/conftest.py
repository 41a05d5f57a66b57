"""The fixture of the kernel tests that run kernels as real UNIX users on this machine."""

from __future__ import annotations

import pytest

from jupyter_gpuhive.sim.users import ensure_user, is_root
from tests.kernels.remote_helpers import UNIX
from tests.support.kernel_python import kernel_python


@pytest.fixture(scope="session")
def python() -> str:
    """The interpreter kernels run under, once the UNIX users of UNIX exist (root only)."""
    if not is_root():
        pytest.skip("kernels as other UNIX users need root")
    for name in UNIX.values():
        ensure_user(name)
    return kernel_python()
