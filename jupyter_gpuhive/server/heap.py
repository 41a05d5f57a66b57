"""The objects a server has once it is up, taken out of the cycle collector's full passes.

A full (generation 2) collection walks every tracked object, and a Jupyter server with
gpuhive holds a great many once its modules are imported. Measured in the server process
during `benchmarks/integrations.py --quick` (gc.callbacks): without this, a full pass in the
middle of the paced bookings paused the server for 190 ms; with it, no pass after startup took
over 5 ms. `gc.freeze()` after a last collection moves what exists at startup to the
permanent generation: those objects are still freed by reference counting, only no longer
walked; full passes then cover what the server made since. Once per process: a test process
starts many servers.

After the freeze, the collector's default thresholds (700, 10, 10) ran a full pass every 2 to
3 s under load, since little that is not frozen counts as old: measured in both replicas of
`benchmarks/replicas.py` at 100 requests/s, 5 to 9 passes of 6 to 28 ms each per 16 s, every
request in flight stalled meanwhile. A young generation of 20,000 objects (a request makes a
few thousand) makes every pass rarer: 1 to 2 pauses over 5 ms per 16 s (the mix's p99 in
that window: 100 ms, against 121-150 ms in three windows before). Cyclic garbage waits a
little longer for its pass (a few MB at most).
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger(__name__)
_frozen = False
THRESHOLDS = (20_000, 10, 10)  # the young generation's size, then gc's usual ratios


def freeze_startup_heap() -> None:
    """Collect once, freeze what is left, collect less often after (the first call in a
    process only)."""
    global _frozen
    if _frozen:
        return
    _frozen = True
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
    log.debug("gpuhive: %d startup objects frozen out of full collections", gc.get_freeze_count())
