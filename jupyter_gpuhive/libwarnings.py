"""Warnings that third-party libraries print about themselves, kept off gpuhive users' terminals.

A library's warning about its own dependencies (asyncssh importing cryptography's deprecated DSA
names, for one) tells a gpuhive user nothing they can act on, and it reached every CLI command's
stderr. The filters are installed when the package is imported, before any of those libraries, and
match only warnings attributed to those libraries' own modules: a user's code and gpuhive's own
warnings are untouched. `make test-latest` shows a new one; add its library here.
"""

from __future__ import annotations

import warnings

# Libraries whose import-time warnings gpuhive users have seen, by top-level module name.
QUIETED = ("asyncssh",)


def quiet_third_party() -> None:
    """Ignore warnings raised from within the QUIETED libraries' modules."""
    for name in QUIETED:
        warnings.filterwarnings("ignore", module=rf"{name}(\..*)?$")
