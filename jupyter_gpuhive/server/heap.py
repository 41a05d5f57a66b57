"""The objects a server has once it is up, taken out of the cycle collector's full passes.

A full (generation 2) collection walks every tracked object, and a Jupyter server with
gpuhive holds a great many once its modules are imported. Measured in the server process
during `benchmarks/integrations.py --quick` (gc.callbacks): without this, a full pass in the
middle of the paced bookings paused the server for 190 ms; with it, no pass after startup took
over 5 ms. `gc.freeze()` after a last collection moves what exists at startup to the
permanent generation: those objects are still freed by reference counting, only no longer
walked; full passes then cover what the server made since. Once per process: a test process
starts many servers.
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger(__name__)
_frozen = False


def freeze_startup_heap() -> None:
    """Collect once, then freeze what is left (the first call in a process only)."""
    global _frozen
    if _frozen:
        return
    _frozen = True
    gc.collect()
    gc.freeze()
    log.debug("gpuhive: %d startup objects frozen out of full collections", gc.get_freeze_count())
