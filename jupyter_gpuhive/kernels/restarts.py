"""A kernel that ended for good is not restarted: the provisioner says so, the restarter obeys.

jupyter_client's auto-restarter restarts any kernel whose process is gone, up to its
`restart_limit`. A reservation kernel may end for good (its reservation ended, its host
was lost, a restart was refused): then no restart may follow, and the kernel's model says
why. The kernel manager's restarter, of the class the server is configured with
(`restarter_class`, mixed with `FinalEnds` by server/kernel_manager.py), makes itself known
to the kernel's provisioner when it starts; `end_for_good` sets that restarter's
`restart_limit` to 0, so its next poll declares the kernel dead without a restart. Nothing
of jupyter_client's private state is read or written.
"""

from __future__ import annotations

from typing import Any

FINAL = "gpuhive_final_end"  # the provisioner's attribute: why the kernel ended for good
RESTARTER = "gpuhive_restarter"  # the provisioner's attribute: its kernel's FinalEnds


def end_for_good(provisioner: Any, reason: str) -> None:
    """Mark the kernel ended for good: the restarter's next poll declares it dead, with no
    restart, and its model says why."""
    setattr(provisioner, FINAL, reason)
    restarter = getattr(provisioner, RESTARTER, None)
    if restarter is not None:
        restarter.restart_limit = 0  # a public trait of gpuhive's own restarter class
    km = provisioner.parent
    if km is not None:
        km.reason = f"Kernel dead: {reason}."  # ServerKernelManager.reason, a public trait


class FinalEnds:
    """Mixed into the kernel manager's restarter class: it makes itself known to the
    kernel's provisioner, which ends its restarts when the kernel ended for good."""

    kernel_manager: Any
    restart_limit: int

    def start(self) -> None:
        super().start()  # type: ignore[misc]
        provisioner = getattr(self.kernel_manager, "provisioner", None)
        if provisioner is None:
            return
        setattr(provisioner, RESTARTER, self)
        if getattr(provisioner, FINAL, None) is not None:  # marked before this start
            self.restart_limit = 0
