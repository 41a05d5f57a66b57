"""The kernel side: the REST client, the magics and what they show; no server module here."""

from __future__ import annotations

from typing import Any


def load_ipython_extension(ipython: Any) -> None:
    """`%load_ext jupyter_gpuhive` registers the magics (and `%%gpujob -h`'s help cell)."""
    from .args import help_cell
    from .feedmagics import GpuFeedMagics
    from .jobmagics import GpuJobMagics
    from .magics import GpuHiveMagics

    ipython.register_magics(GpuHiveMagics, GpuJobMagics, GpuFeedMagics)
    if help_cell not in ipython.input_transformers_cleanup:
        ipython.input_transformers_cleanup.append(help_cell)
