"""DashboardModel: live metric series, the process table and a reservation's usage."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..notebook.client import HiveClientError
from ..notebook.clock import UTC, iso
from .messages import hosts_notice

# chart title -> (kind, field of the metrics endpoint)
CHARTS: dict[str, tuple[str, str]] = {
    "GPU utilization (%)": ("gpu", "util"),
    "GPU memory (MiB)": ("gpu", "mem_used_mib"),
    "GPU temperature (°C)": ("gpu", "temperature_c"),
    "GPU power (W)": ("gpu", "power_w"),
    "Host CPU (%)": ("host", "cpu_percent"),
    "Host memory (MiB)": ("host", "mem_used_mib"),
}


@dataclass(frozen=True)
class ProcessRow:
    """One process on one GPU, and whether it breaks the GPU's reservation."""

    host: str
    gpu: str
    pid: int
    user: str
    command: str
    memory_mib: int | None
    holder: str | None
    violation: bool
    container: str = ""  # 'NAME (IMAGE)' when it runs in a container (its owner is `user`)


class Series:
    """One source's points: timestamps and a column per field, trimmed to `keep` points."""

    def __init__(self, fields: Sequence[str], keep: int) -> None:
        self.fields = list(fields)
        self.keep = keep
        self.t: list[float] = []
        self.values: dict[str, list[float | None]] = {f: [] for f in self.fields}

    def extend(self, points: Iterable[Sequence[float | None]]) -> int:
        added = 0
        last = self.t[-1] if self.t else float("-inf")
        for point in points:
            t = float(point[0])  # type: ignore[arg-type]
            if t <= last:
                continue
            last = t
            self.t.append(t)
            for name, value in zip(self.fields, point[1:], strict=False):
                self.values[name].append(value)
            added += 1
        if len(self.t) > self.keep:
            cut = len(self.t) - self.keep
            del self.t[:cut]
            for column in self.values.values():
                del column[:cut]
        return added


class DashboardModel:
    """What the dashboard shows for chosen hosts/GPUs (all when none chosen)."""

    def __init__(
        self,
        client: Any,
        *,
        hosts: Sequence[str] = (),
        gpus: Sequence[str] = (),
        keep: int = 720,
        unix_user: Callable[[str], str] = lambda name: name,
    ) -> None:
        self.client = client
        self.hosts = list(hosts)
        self.gpus = list(gpus)
        self.keep = keep
        self.unix_user = unix_user  # gpuhive user -> the UNIX account their processes run as
        self.gpu_series: dict[str, Series] = {}
        self.host_series: dict[str, Series] = {}
        self.processes: list[ProcessRow] = []
        self.state: list[dict[str, Any]] = []
        self.usage_id: int | None = None
        self.usage: dict[str, Any] | None = None
        self.last_t: float | None = None
        self.notice = ""  # HTML: what to do with no hosts, or about hosts that are down

    def wants_gpu(self, ref: str) -> bool:
        host = ref.split(":")[0]
        if not self.hosts and not self.gpus:
            return True
        return ref in self.gpus or host in self.hosts

    def wants_host(self, name: str) -> bool:
        chosen = set(self.hosts) | {g.split(":")[0] for g in self.gpus}
        return not chosen or name in chosen

    # --- metrics -------------------------------------------------------------------

    def poll_metrics(self) -> int:
        """Fetch points newer than the last seen and append them; returns how many came."""
        params = {}
        if self.last_t is not None:
            params["since"] = iso(datetime.fromtimestamp(self.last_t, UTC))
        if len(self.hosts) == 1 and not self.gpus:
            params["host"] = self.hosts[0]
        data = self.client.request("GET", "metrics", params=params)
        return self.apply_metrics(data)

    def apply_metrics(self, data: dict[str, Any]) -> int:
        added = 0
        for kind, store, wants in (
            ("gpus", self.gpu_series, self.wants_gpu),
            ("hosts", self.host_series, self.wants_host),
        ):
            for name, block in data.get(kind, {}).items():
                if not wants(name):
                    continue
                series = store.get(name)
                if series is None:
                    series = store[name] = Series(block["fields"][1:], self.keep)
                added += series.extend(block["points"])
                if series.t:
                    self.last_t = max(self.last_t or 0.0, series.t[-1])
        return added

    def chart(self, title: str) -> dict[str, tuple[list[float], list[float | None]]]:
        """Per source (GPU ref or host name), its timestamps and values for one chart."""
        kind, field = CHARTS[title]
        store = self.gpu_series if kind == "gpu" else self.host_series
        return {name: (s.t, s.values.get(field, [])) for name, s in sorted(store.items())}

    # --- processes -------------------------------------------------------------------

    def poll_state(self) -> list[ProcessRow]:
        """Fetch the live host state and rebuild the process table."""
        reply = self.client.request("GET", "hosts")
        self.state = reply["hosts"]
        self.notice = hosts_notice(reply)
        self.processes = self.process_rows(self.state)
        return self.processes

    def process_rows(self, hosts: Sequence[dict[str, Any]]) -> list[ProcessRow]:
        """A row per GPU process; a violation is a process not run by the GPU's holder."""
        rows = []
        for h in hosts:
            for g in h.get("gpus", []):
                if not self.wants_gpu(g["id"]):
                    continue
                holder = (g.get("reservation") or {}).get("owner")
                held = {s["id"]: (s.get("reservation") or {}).get("owner")
                        for s in g.get("slices", [])}  # fmt: skip
                for p in g.get("processes", []):
                    user = p.get("user") or "?"
                    on = p.get("slice")  # the MIG slice it runs on: that slice's holder counts
                    who = (held.get(on) or holder) if on else holder
                    bad = who is not None and user != self.unix_user(who)
                    box = p.get("container") or {}
                    name = box.get("name") or str(box.get("id") or "")[:12]
                    image = f" ({box['image']})" if box.get("image") else ""
                    rows.append(
                        ProcessRow(h["name"], on or g["id"], int(p["pid"]), user,
                                   p.get("command") or "", p.get("used_memory_mib"), who, bad,
                                   f"{name}{image}" if box else "")
                    )  # fmt: skip
        return rows

    # --- reservation usage ---------------------------------------------------------------

    def watch_usage(self, reservation_id: int | None) -> dict[str, Any] | None:
        """Follow one reservation's usage (refreshed with every poll while it runs)."""
        self.usage_id = reservation_id
        self.usage = None
        return self.poll_usage()

    def poll_usage(self) -> dict[str, Any] | None:
        if self.usage_id is None:
            return None
        try:
            self.usage = self.client.request("GET", f"reservations/{self.usage_id}/usage")
        except HiveClientError as error:
            if error.status != 403:
                raise
            # someone else's reservation on a site that keeps usage private: say so
            self.usage = {"reservation": self.usage_id, "message": error.message}
        return self.usage

    def poll(self) -> None:
        """One refresh: new metric points, the process table, the watched usage."""
        self.poll_metrics()
        self.poll_state()
        self.poll_usage()
