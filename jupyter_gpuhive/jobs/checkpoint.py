"""Checkpoints for jobs that may be preempted: save every N steps and on the signal, resume.

Standard library only, and no syntax newer than Python 3.8: the `resume` option of the pytorch
and tensorflow templates ships this file to the GPU host as the module `gpuhive_checkpoint`
(see `jobs/resume.py`), so a job imports it with whatever Python it runs on. Where
jupyter_gpuhive is installed it is also `jupyter_gpuhive.jobs.checkpoint`.

    from gpuhive_checkpoint import Checkpoint

    ckpt = Checkpoint(every=100)
    state = ckpt.resume({"step": 0, "total": 0})
    while state["step"] < 10000:
        state["total"] += work(state["step"])
        state["step"] += 1
        ckpt.step(state)

`step` saves every `every` steps and, once the preemption signal has arrived, saves at once and
exits with status 128 + the signal's number. A save writes a temporary file in the same
directory and renames it over the last checkpoint, so a kill in the middle of a save leaves the
previous checkpoint whole. The signal handler only sets a flag: the state is saved between two
steps, never half-updated. A step should therefore take less than the grace time.

Environment (gpuhive sets these for preemptible jobs; any command may read them):
`GPUHIVE_CHECKPOINT_DIR` (where; default `./gpuhive-checkpoints`), `GPUHIVE_PREEMPT_SIGNAL`
(`SIGTERM`, `SIGINT`, `SIGUSR1` or `SIGUSR2`; default `SIGTERM`), `GPUHIVE_GRACE_S` (seconds
between the signal and the kill), `GPUHIVE_RESTARTS` (how often the job was preempted and
restarted) and `GPUHIVE_CHECKPOINT_EVERY` (the template option's step count).
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any, BinaryIO

SIGNALS = ("SIGTERM", "SIGINT", "SIGUSR1", "SIGUSR2")
DEFAULT_DIR = "gpuhive-checkpoints"
TEMP_SUFFIX = ".partial"


def signal_number(name: str) -> int:
    """The number of one of the signals a job may be preempted with (`SIGTERM` or `TERM`)."""
    wanted = name.strip().upper()
    if not wanted.startswith("SIG"):
        wanted = "SIG" + wanted
    if wanted not in SIGNALS:
        raise ValueError(
            "preemption signal must be one of {}, not {!r}".format(", ".join(SIGNALS), name)
        )
    return int(getattr(signal, wanted))


def first_process() -> bool:
    """Whether this process writes the checkpoints of its job (all processes load them).

    In a distributed job only one does: rank 0 (`RANK`, set by torchrun and the pytorch
    template), or TF_CONFIG's chief (worker 0 when there is no chief); otherwise every process.
    """
    rank = os.environ.get("RANK", "").strip()
    if rank:
        return rank == "0"
    config = os.environ.get("TF_CONFIG", "").strip()
    if config:
        try:
            task = json.loads(config).get("task", {})
            cluster = json.loads(config).get("cluster", {})
        except (ValueError, AttributeError):
            return True
        if task.get("type") == "chief":
            return True
        return task.get("type") == "worker" and task.get("index") == 0 and "chief" not in cluster
    return True


def _env_int(name: str, default: int) -> int:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name} must be a whole number, not {text!r}") from None


def _pickle_dump(state: Any, stream: BinaryIO) -> None:
    pickle.dump(state, stream, protocol=pickle.HIGHEST_PROTOCOL)


def _pickle_load(stream: BinaryIO) -> Any:
    return pickle.load(stream)  # noqa: S301 - the job's own file, read by the job's owner


class Checkpoint:
    """Saves a job's state atomically every N steps and when the preemption signal arrives."""

    def __init__(
        self,
        every: int | None = None,
        *,
        every_s: float | None = None,
        directory: str | None = None,
        name: str = "checkpoint",
        dump: Callable[[Any, BinaryIO], Any] | None = None,
        load: Callable[[BinaryIO], Any] | None = None,
        writer: bool | None = None,
        signal_name: str | None = None,
    ) -> None:
        if every is None:
            every = _env_int("GPUHIVE_CHECKPOINT_EVERY", 0) or None
        if every is not None and every < 1:
            raise ValueError(f"every must be at least 1 step, not {every!r}")
        if not name or "/" in name or name.startswith("."):
            raise ValueError(f"name must be a plain file name, not {name!r}")
        self.every = every
        self.every_s = every_s
        self.directory = os.path.abspath(
            directory or os.environ.get("GPUHIVE_CHECKPOINT_DIR") or DEFAULT_DIR
        )
        self.path = os.path.join(self.directory, name)
        self.restarts = _env_int("GPUHIVE_RESTARTS", 0)
        grace = os.environ.get("GPUHIVE_GRACE_S", "").strip()
        self.grace_s = float(grace) if grace else None
        self.signal = signal_number(
            signal_name or os.environ.get("GPUHIVE_PREEMPT_SIGNAL") or "SIGTERM"
        )
        self.writer = first_process() if writer is None else writer
        self.preempted = False
        self.resumed = False
        self.steps = 0
        self.saves = 0
        self.last_save_s: float | None = None
        self._dump = dump or _pickle_dump
        self._load = load or _pickle_load
        self._saved_at = time.monotonic()
        self._warned = False
        signal.signal(self.signal, self._on_signal)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.preempted = True

    def resume(self, default: Any = None) -> Any:
        """The last saved state, or `default` when there is none yet."""
        if self.writer:
            self._sweep()
        if not os.path.exists(self.path):
            return default
        with open(self.path, "rb") as stream:
            state = self._load(stream)
        self.resumed = True
        return state

    def step(self, state: Any) -> None:
        """Count one step; save when due; after the signal, save and exit."""
        self.steps += 1
        due = self.preempted
        if self.every is not None and self.steps % self.every == 0:
            due = True
        if self.every_s is not None and time.monotonic() - self._saved_at >= self.every_s:
            due = True
        if due:
            self.save(state)
        if self.preempted:
            self.exit()

    def save(self, state: Any) -> None:
        """Write `state` to a temporary file, then rename it over the checkpoint."""
        self._saved_at = time.monotonic()
        if not self.writer:
            return
        began = time.monotonic()
        os.makedirs(self.directory, exist_ok=True)
        prefix = "." + os.path.basename(self.path) + "."
        handle, temporary = tempfile.mkstemp(prefix=prefix, suffix=TEMP_SUFFIX, dir=self.directory)
        try:
            with os.fdopen(handle, "wb") as stream:
                self._dump(state, stream)
                stream.flush()
                os.fsync(stream.fileno())
            os.replace(temporary, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
        self._sync_directory()
        self.saves += 1
        self.last_save_s = time.monotonic() - began
        self._warn_if_slow()

    def exit(self) -> None:
        """Leave as a process stopped by the signal would: status 128 + its number."""
        sys.stdout.flush()
        sys.exit(128 + self.signal)

    def _sync_directory(self) -> None:
        try:
            handle = os.open(self.directory, os.O_RDONLY)
        except OSError:
            return
        try:
            os.fsync(handle)
        except OSError:
            pass
        finally:
            os.close(handle)

    def _sweep(self) -> None:
        """Remove temporary files that a killed save left behind (they are never read)."""
        prefix = "." + os.path.basename(self.path) + "."
        try:
            names = os.listdir(self.directory)
        except OSError:
            return
        for entry in names:
            if entry.startswith(prefix) and entry.endswith(TEMP_SUFFIX):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(self.directory, entry))

    def _warn_if_slow(self) -> None:
        if self._warned or self.grace_s is None or self.last_save_s is None:
            return
        if self.last_save_s > self.grace_s / 2:
            self._warned = True
            sys.stderr.write(
                f"gpuhive_checkpoint: a save took {self.last_save_s:.1f} s, more than half "
                f"the {self.grace_s:.0f} s grace time; a save after the preemption signal "
                "may not finish in time\n"
            )
