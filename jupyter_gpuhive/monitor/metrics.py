"""Time-series ring buffers of GPU and host metrics, kept in memory."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

GPU_FIELDS = ("util", "mem_used_mib", "temperature_c", "power_w")
HOST_FIELDS = ("cpu_percent", "mem_used_mib", "mem_total_mib")

Point = tuple[float, ...]


class MetricsBuffer:
    """A bounded series per key: (timestamp, value, value, …) tuples, oldest dropped."""

    def __init__(self, length: int) -> None:
        self.length = length
        self._series: dict[str, deque[Point]] = {}

    def add(self, key: str, timestamp: float, values: Iterable[float | None]) -> None:
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = deque(maxlen=self.length)
        series.append((timestamp, *values))  # type: ignore[arg-type]

    def since(self, key: str, timestamp: float = 0.0) -> list[Point]:
        """Points newer than `timestamp`, oldest first."""
        series = self._series.get(key)
        if not series:
            return []
        if series[0][0] > timestamp:
            return list(series)
        return [p for p in series if p[0] > timestamp]

    def keys(self) -> list[str]:
        return list(self._series)

    def to_json(self, key: str, fields: tuple[str, ...], since: float) -> dict[str, Any]:
        return {"fields": ["t", *fields], "points": self.since(key, since)}
