"""When a GPU counts as busy: the one rule usage, accounting and idle protection share."""

from __future__ import annotations

IDLE_UTIL = 5.0  # % utilisation below which a GPU with no process is idle (the default)


def gpu_busy(has_processes: bool, util: float | None, idle_util: float = IDLE_UTIL) -> bool | None:
    """Whether a GPU is busy: a process on it, or `util` at least `idle_util` percent; None
    (not known) with no process and no utilisation reported (MIG slices report none).

    Usage and accounting charge a GPU as used only when it is known busy (`is True`);
    protection calls a reservation idle only when each GPU is known idle (`is False`).
    """
    if has_processes:
        return True
    if util is None:
        return None
    return util >= idle_util
