"""The accounting view: a month's bars per user, group and host, the cross-check, my limits,
and the admin section that sets limits (a real server, through HiveClient)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from jupyter_gpuhive import widgets
from jupyter_gpuhive.widgets.accounting_model import AccountingModel


def test_bars_check_limits_and_the_admin_form(as_user: Any) -> None:
    start = (datetime.now(timezone.utc) + timedelta(days=3)).replace(
        hour=6, minute=0, second=0, microsecond=0
    )
    month = f"{start.year:04d}-{start.month:02d}"
    carol = as_user("carol")
    carol.reserve(title="acc", gpus=["gpu09:0", "gpu09:1"], start=start.isoformat(),
                  duration="3h")  # fmt: skip

    boss_view = widgets.accounting(as_user("boss"), month=month, zone="UTC")
    assert boss_view.admin.layout.display is None  # admins see the limits form
    boss_view.scope.value, boss_view.metric.value = "host", "reserved_gpu_hours"
    names, values = list(boss_view.bars.x), list(boss_view.bars.y)
    assert values[names.index("gpu09")] >= 6
    assert "Per-user totals add up to the site total" in boss_view.check.value

    boss_view.limit_scope.value, boss_view.limit_name.value = "user", "carol"
    boss_view.limit_fields["gpus"].value = "2"
    boss_view.limit_fields["longest"].value = "4h"
    boss_view.save_limits()
    assert boss_view.admin_message.value.startswith("Saved."), boss_view.admin_message.value

    mine = AccountingModel(carol, month=month, zone="UTC")
    mine.load()
    assert not mine.admin and mine.error == ""
    assert [(n, v, s) for n, v, s, _ in mine.my_limits()] == [
        ("gpus", 2, "carol's own limit"), ("longest", 14400.0, "carol's own limit")
    ]  # fmt: skip
    view = widgets.accounting(carol, month=month, zone="UTC")
    assert view.admin.layout.display == "none"
    assert "carol&#x27;s own limit" in view.limit_table.value
    names, values = view.model.bars("user", "reserved_gpu_hours")
    assert names == ["carol"] and values == [6.0]  # her own row only
    assert not mine.save_limits("user", "carol", gpus=10)
    assert "admins" in mine.message
