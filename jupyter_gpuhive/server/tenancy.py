"""TenancyConfig: the settings of approvals (issue #46, item 4), a part of GpuHiveConfig.

Bookings above a host's or host group's threshold wait for an administrator's approval
(model/approvals.py; docs/how-to/approvals.md). Who administers a host group is
`host_groups` (server/config.py).
"""

from __future__ import annotations

from traitlets import Dict, Unicode
from traitlets.config import LoggingConfigurable


class TenancyConfig(LoggingConfigurable):
    """The approvals' traits (`c.GpuHiveApp.approvals`, `c.GpuHiveApp.approval_hold`)."""

    approvals = Dict(
        help="Bookings that wait for approval, by host or host group: {'physics': {'gpu_hours': "
        "24, 'gpus': 4}}. A booking above either figure (GPU-hours weigh shares) on those hosts "
        "is tentative until an administrator of their group (or a site admin) approves it; "
        "its slot is held meanwhile, but no job or kernel may run on it "
        "(docs/how-to/approvals.md).",
    ).tag(config=True)
    approval_hold = Unicode(
        "48h",
        help="How long a tentative booking holds its slot unanswered; then it is released "
        "(cancelled) and its holder told.",
    ).tag(config=True)
