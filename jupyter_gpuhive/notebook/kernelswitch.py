"""`%gpureserve … --kernel`: ask the notebook's front-end to switch to a kernel on the booking.

The kernel cannot move itself: it asks over a comm (target `gpuhive.kernel`), and the
labextension (JupyterLab, Notebook 7) changes the notebook's kernel to the reservation's
kernelspec. The classic notebook has no such listener; there the kernel is chosen by hand.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from ..model.kernel import SPEC_PREFIX, SWITCH_TARGET

HELP = (
    "Book, then switch this notebook to a kernel on the booked GPUs (JupyterLab and Notebook "
    "7; in the classic notebook choose 'Python on my reservation …' under Kernel > Change "
    "kernel). The variables of this kernel do not move to the new one."
)


def switch_to(reservation: dict[str, Any]) -> str:
    """Ask the front-end to switch this notebook to the reservation's kernel; say what happens."""
    rid = int(reservation["id"])
    name = f"{SPEC_PREFIX}{rid}"
    gpus = ", ".join(reservation["gpus"])
    start = datetime.fromisoformat(reservation["start"])
    if start > datetime.now(timezone.utc) + timedelta(seconds=30):
        return (
            f"It starts later: then choose the kernel 'Python on my reservation: {gpus} …' "
            f"(kernelspec {name}) for this notebook."
        )
    try:
        from comm import create_comm

        create_comm(
            target_name=SWITCH_TARGET,
            data={"kernel_name": name, "reservation_id": rid, "display_name": gpus},
        )
    except Exception as error:  # no kernel (a terminal IPython): nothing to switch
        return f"Could not ask the notebook to switch kernels ({error}); choose {name} by hand."
    return (
        f"This notebook switches to a kernel on {gpus} (kernelspec {name}); run your cells "
        "there. In the classic notebook, choose it under Kernel > Change kernel."
    )
