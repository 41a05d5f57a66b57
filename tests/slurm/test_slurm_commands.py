"""The command lines gpuhive gives Slurm >= 23.11 (no such Slurm here: Debian 12 has 22.05), run
against a stand-in `scontrol` that records its words and answers as 23.11 documents; and the
words no booking may put into a command line."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from jupyter_gpuhive.hosts.backends.slurm import Cluster, SlurmReservations
from jupyter_gpuhive.model.engines import EngineRefused, Held

STAND_IN = """#!/bin/sh
for word in "$@"; do printf '%s\\n' "$word"; done >> "$(dirname "$0")/words"
echo --- >> "$(dirname "$0")/words"
case "$1" in
  --version) echo "slurm 23.11.4" ;;
  create) echo "Reservation created: $3" | sed 's/reservationname=//' ;;
esac
"""
START = datetime(2030, 1, 2, 3, 4, 5, 250_000, tzinfo=timezone.utc)


def stand_in(tmp_path: Path) -> SlurmReservations:
    script = tmp_path / "scontrol"
    script.write_text(STAND_IN)
    script.chmod(0o755)
    return SlurmReservations(Cluster(str(tmp_path / "slurm.conf"), str(tmp_path)))


def said(tmp_path: Path) -> list[list[str]]:
    text = (tmp_path / "words").read_text()
    return [call.strip("\n").split("\n") for call in text.split("---\n") if call.strip()]


def test_slurm_23_11_holds_the_booked_gpu_count(tmp_path: Path) -> None:
    engine = stand_in(tmp_path)
    held = Held("gpuhive-5", START, START + timedelta(hours=2), (("n1", 2),), ("gh-alice",))

    async def book() -> str | None:
        why = await engine.why_not({"n1": (2, 4)})  # a partial node is fine on 23.11
        await engine.hold(held, START - timedelta(days=1))
        await engine.change(held, START - timedelta(days=1))
        await engine.release("gpuhive-5")
        return why

    assert asyncio.run(book()) is None
    assert engine.label == "Slurm 23.11.4"
    version, create, update, delete = said(tmp_path)
    assert version == ["--version"]
    assert create == [
        "create",
        "reservation",
        "reservationname=gpuhive-5",
        "users=gh-alice",
        "nodes=n1",
        "starttime=2030-01-02T03:04:06",
        "endtime=2030-01-02T05:04:06",
        "TRES=gres/gpu=2",
    ]  # fmt: skip  (both rounded up to whole seconds: back to back stays so)
    assert update[:2] == ["update", "reservationname=gpuhive-5"]
    assert "TRES=gres/gpu=2" in update
    assert delete == ["delete", "reservationname=gpuhive-5"]


def test_words_no_booking_may_put_into_a_command(tmp_path: Path) -> None:
    engine = stand_in(tmp_path)
    now = START - timedelta(days=1)
    bad_user = Held("gpuhive-5", START, START, (("n1", 4),), ("alice; rm -rf /",))
    with pytest.raises(EngineRefused, match="cannot be a Slurm user account"):
        asyncio.run(engine.hold(bad_user, now))
    not_ours = Held("maintenance", START, START, (("n1", 4),), ("gh-alice",))
    with pytest.raises(EngineRefused, match="not a reservation name of gpuhive's"):
        asyncio.run(engine.hold(not_ours, now))
    with pytest.raises(EngineRefused, match="not a reservation name of gpuhive's"):
        asyncio.run(engine.release("root_maintenance"))
    assert not (tmp_path / "words").exists()  # nothing reached scontrol


def test_a_conf_path_with_spaces_stays_one_word(tmp_path: Path) -> None:
    cluster = Cluster("/etc/slurm/slurm.conf", "/usr/bin")
    line = cluster.line("scontrol", "show", "reservation", "-o")
    assert line == "SLURM_CONF=/etc/slurm/slurm.conf /usr/bin/scontrol show reservation -o"
    odd = Cluster("/etc/sl urm/$(x).conf", "/usr/bin").line("scontrol", "a b")
    assert odd == "SLURM_CONF='/etc/sl urm/$(x).conf' /usr/bin/scontrol 'a b'"
