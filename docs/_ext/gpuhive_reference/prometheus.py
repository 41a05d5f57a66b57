"""The Prometheus metrics reference, from the collector itself (one family per row)."""

from __future__ import annotations

from types import SimpleNamespace as NS

from .text import one_line

CARDINALITY = {
    "host": "one per configured host",
    "gpu": "one per GPU or MIG slice of the inventory (`host:index`, `host:index/migGI`)",
    "uuid": "as `gpu` (the GPU's or slice's UUID)",
    "model": "as `gpu`",
    "state": "ok, degraded, failed (health); active, upcoming (reservations)",
    "user": "one per user with a live reservation or a waiting job",
    "reservation": "one per active reservation, only on `gpuhive_gpu_reservation_info`",
    "kind": "one per violation kind (a fixed list)",
    "route": "one per path of the REST route table",
    "method": "GET, POST, PUT, PATCH, DELETE",
    "le": "the histogram's buckets",
}


def _families() -> list[tuple[str, str, str, list[str]]]:
    """(name, type, help, labels) of every family, from a collector over a tiny live state."""
    from jupyter_gpuhive.monitor.prometheus import Exposition, Holding, LiveCounts, Sources

    gpu = NS(uuid="GPU-1", util_gpu=1, mem_used_mib=1, mem_total_mib=2, power_w=1.0,
             temperature_c=30)  # fmt: skip
    host = NS(name="gpu1", gpus=[NS(uuid="GPU-1", ref="gpu1:0", model="A100")], slices=[])
    counts = LiveCounts({("alice", "active"): 1}, (Holding("GPU-1", 1, "alice"),),
                        {"alice": 1}, 1.0, {"foreign-process": 1})  # fmt: skip
    exposition = Exposition()
    exposition.use(
        Sources(
            live=lambda: [NS(host="gpu1", gpus=[gpu], slices={})],
            inventory=lambda: [host],
            host_state=lambda: {"gpu1": "up"},
            latency=lambda: {"gpu1": 0.1},
            counts=lambda: counts,
        )
    )
    exposition.api_seconds.labels("/me", "GET").observe(0.01)
    exposition.sweep_seconds.observe(0.5)
    out = []
    for family in exposition.registry.collect():
        labels = sorted({k for s in family.samples for k in s.labels})
        out.append((family.name, family.type, family.documentation, labels))
    return sorted(out)


def prometheus_page() -> str:
    """The metrics of GET prometheus as MyST Markdown."""
    out = [
        "# Prometheus metrics",
        "",
        "What `GET {base_url}gpuhive/api/prometheus` exposes (see the "
        "[how-to](../how-to/prometheus.md)). Generated at build time from the collector "
        "(`jupyter_gpuhive/monitor/prometheus.py`). Histograms add `_bucket`, `_sum` and "
        "`_count` series.",
        "",
        "| metric | type | labels | meaning |",
        "| --- | --- | --- | --- |",
    ]
    for name, kind, doc, labels in _families():
        shown = ", ".join(f"`{label}`" for label in labels)
        out.append(f"| `{name}` | {kind} | {shown} | {one_line(doc)} |")
    out += ["", "## Cardinality", "", "Every label is bounded:", "",
            "| label | values |", "| --- | --- |"]  # fmt: skip
    out += [f"| `{label}` | {values} |" for label, values in CARDINALITY.items()]
    return "\n".join(out) + "\n"
