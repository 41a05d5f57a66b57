"""NVIDIA's checks for `jupyter gpuhive doctor`: every nvidia-smi query the probe sends, the
MIG listing and `topo -m`, each run alone and read by gpuhive's own parsers; GPU health as the
monitor judges it, from the probe's own `--query-gpu` health fields and parser (never from
`-q -x`, which carries process names).
"""

from __future__ import annotations

from dataclasses import replace

from .nvidia_fields import help_fields
from .nvidia_health import DEGRADED, FAILED, health_from_csv, lost_gpus, without_lost
from .nvidia_probe import (
    APPS_QUERY,
    GPU_FIELDS,
    HEALTH_FIELDS,
    HEALTH_ONCE,
    HEALTH_QUERY,
    HELP_QUERY,
    LIST_QUERY,
    ROW_FIELDS,
    XML_QUERY,
)
from .nvidia_probe import GPU_QUERY_KNOWN as GPU_QUERY
from .nvidia_read import without_process_names
from .nvidia_smi import (
    NvsmiDriverError,
    NvsmiParseError,
    NvsmiReport,
    check_driver,
    parse_compute_apps,
    parse_gpu_list,
    parse_query_gpu,
    parse_query_xml,
)
from .nvidia_topology import COMMAND as TOPO_QUERY
from .nvidia_topology import TopologyError, parse_topology
from .vendor import DoctorCheck as Check
from .vendor import DoctorOutput as Output

OK, WARN, FAIL = "ok", "warn", "fail"
# (the check's name, the file its raw output is saved as, the command): named by the query.
QUERIES = (
    ("query-gpu", "query-gpu.csv", GPU_QUERY),
    ("query-compute-apps", "query-compute-apps.csv", APPS_QUERY),
    ("mig", "L.txt", LIST_QUERY),
    ("q-x", "q-x.xml", XML_QUERY),
    ("health", "query-gpu-health.csv", HEALTH_ONCE),
    ("topo", "topo-m.txt", TOPO_QUERY),
    ("fields", "help-query-gpu.txt", HELP_QUERY),
)
# What gpuhive loses where the driver does not list a field it would ask for.
FIELD_USE = {"mig.mode.current": "MIG mode", "remapped_rows.pending": "row remapping health"}
SLOW_S = 1.0  # `-q -x` slower than this: nvidia-smi initialises the GPUs on every call
PERSISTENCE = (
    "turn persistence mode on, as root: `systemctl enable --now nvidia-persistenced` (kept "
    "across reboots) or `nvidia-smi -pm 1` (until the next reboot); without it every "
    "nvidia-smi call initialises the GPUs, and each probe waits for it."
)
ISSUE = "gpuhive cannot read this driver's output: paste this report into an issue with the "
ISSUE += "files of `jupyter gpuhive doctor --save DIR`."
FIND = 'command -v nvidia-smi || { printf "PATH=%s\\n" "$PATH"; exit 127; }'


def _n(count: int, what: str) -> str:
    """'1 GPU', '2 GPUs', '3 processes'."""
    return (
        f"{count} {what}" if count == 1 else f"{count} {what}{'es' if what.endswith('s') else 's'}"
    )


def tool(host: str, status: int, text: str) -> Check:
    """Whether nvidia-smi is on the PATH gpuhive uses there."""
    if status == 0:
        return Check(host, "nvidia-smi", OK, text.strip().splitlines()[-1])
    path = next((ln[5:] for ln in text.splitlines() if ln.startswith("PATH=")), "?")
    return Check(
        host,
        "nvidia-smi",
        FAIL,
        f"there is no nvidia-smi on the PATH gpuhive uses on {host} ({path}), so gpuhive "
        "sees no GPUs there",
        "install the NVIDIA driver there, or set the host's env PATH in the hosts file to the "
        "folder that holds nvidia-smi.",
    )


def judge(host: str, outputs: dict[str, Output]) -> list[Check]:
    """Read each nvidia-smi output with gpuhive's parsers: the checks (`outputs` by file)."""
    lost = tuple(dict.fromkeys(lost_gpus("\n".join(o.text for o in outputs.values()))))
    texts = {f: without_lost(o.text) if lost else o.text for f, o in outputs.items()}
    status = {f: 0 if lost and f != "topo-m.txt" else o.status for f, o in outputs.items()}
    checks: list[Check] = []
    xml = without_process_names(texts["q-x.xml"])
    try:
        check_driver(xml, status["q-x.xml"])
        report = parse_query_xml(xml)
    except NvsmiDriverError as error:  # a known state's sentence says what to do
        fix = "" if error.state else "load the NVIDIA driver (after an update: reboot)."
        checks.append(Check(host, "driver", FAIL, str(error), fix, XML_QUERY))
        return checks
    except NvsmiParseError as error:  # the other queries are read all the same
        checks.append(Check(host, "driver", FAIL, f"-q -x: {error}", ISSUE, XML_QUERY))
        checks += _queries(host, texts, status, None)
        checks += [_mig(host, texts["L.txt"], status["L.txt"], None)]
        checks += [_topo(host, texts["topo-m.txt"], status["topo-m.txt"])]
        return _timed([*checks, _health(host, texts, status, lost)], outputs)
    checks.append(_driver(host, report, outputs))
    checks.append(
        Check(
            host,
            "q-x",
            OK,
            f"{_n(len(report.gpus), 'GPU')}, {_n(len(report.processes), 'process')}",
            "",
            XML_QUERY,
        )
    )
    checks += _queries(host, texts, status, {g.uuid for g in report.gpus})
    checks.append(_mig(host, texts["L.txt"], status["L.txt"], report))
    checks.append(_topo(host, texts["topo-m.txt"], status["topo-m.txt"]))
    checks.append(_health(host, texts, status, lost))
    return _timed(checks, outputs)


def _timed(checks: list[Check], outputs: dict[str, Output]) -> list[Check]:
    """`checks` with how long each one's command took (where it was timed)."""
    took = {o.command: o.seconds for o in outputs.values() if o.seconds is not None}
    if HEALTH_ONCE in took:  # the health check names the query it runs first
        took[HEALTH_QUERY] = took[HEALTH_ONCE]
    return [
        replace(c, detail=f"{c.detail} [{took[c.command]:.2f} s]")
        if c.command in took and c.name != "driver"  # the driver's line says -q -x's time
        else c
        for c in checks
    ]


def not_listed(text: str) -> list[str]:
    """The fields gpuhive asks for that a driver's `--help-query-gpu` does not list (none
    when it lists nothing: then the probe asks and falls back)."""
    listed = help_fields(text)
    wanted = (*GPU_FIELDS, *HEALTH_FIELDS[1:], *ROW_FIELDS)
    return [f for f in wanted if listed and f not in listed]


def _driver(host: str, report: NvsmiReport, outputs: dict[str, Output]) -> Check:
    """The driver found, the fields it will not give, persistence mode and `-q -x`'s time."""
    off = [str(g.index) for g in report.gpus if g.persistence_mode is False]
    detail = f"driver {report.driver_version}, CUDA {report.cuda_version}"
    listing = outputs.get("help-query-gpu.txt")
    missing = not_listed(listing.text) if listing is not None and listing.status == 0 else []
    if missing:
        lost = sorted({FIELD_USE[f] for f in missing if f in FIELD_USE})
        detail += f"; this driver does not report {', '.join(missing)}"
        detail += f" (gpuhive shows them as not reported: no {', '.join(lost)})" if lost else ""
    xml = outputs.get("q-x.xml")
    took = xml.seconds if xml is not None and xml.seconds is not None else 0.0
    if off:
        detail += f"; persistence mode is off on GPU {', '.join(off)}"
        detail += f", and nvidia-smi -q -x took {took:.1f} s" if took >= SLOW_S else ""
        return Check(host, "driver", WARN, detail, PERSISTENCE, XML_QUERY)
    if took >= SLOW_S:
        detail += f"; persistence mode on, but nvidia-smi -q -x took {took:.1f} s"
        return Check(host, "driver", WARN, detail, "look at the host's load and dmesg.", XML_QUERY)
    return Check(host, "driver", OK, f"{detail}; persistence mode on", "", XML_QUERY)


def _queries(
    host: str, texts: dict[str, str], status: dict[str, int], uuids: set[str] | None
) -> list[Check]:
    checks = []
    try:
        check_driver(texts["query-gpu.csv"], status["query-gpu.csv"])
        gpus = parse_query_gpu(texts["query-gpu.csv"])
        models = sorted({g.name or "?" for g in gpus})
        if not gpus:
            raise NvsmiParseError("nvidia-smi listed no GPUs")
        other = {g.uuid for g in gpus} ^ uuids if uuids is not None else set()
        if other:
            checks.append(
                Check(
                    host,
                    "query-gpu",
                    WARN,
                    f"the GPUs differ from -q -x's: {', '.join(sorted(other))}",
                    ISSUE,
                    GPU_QUERY,
                )
            )
        else:
            checks.append(
                Check(
                    host,
                    "query-gpu",
                    OK,
                    f"{_n(len(gpus), 'GPU')} ({', '.join(models)})",
                    "",
                    GPU_QUERY,
                )
            )
    except NvsmiParseError as error:
        checks.append(Check(host, "query-gpu", FAIL, str(error), ISSUE, GPU_QUERY))
    try:
        check_driver(texts["query-compute-apps.csv"], status["query-compute-apps.csv"])
        procs = parse_compute_apps(texts["query-compute-apps.csv"])
        checks.append(
            Check(
                host, "query-compute-apps", OK, f"{_n(len(procs), 'GPU process')}", "", APPS_QUERY
            )
        )
    except NvsmiParseError as error:
        checks.append(Check(host, "query-compute-apps", FAIL, str(error), ISSUE, APPS_QUERY))
    return checks


def _mig(host: str, text: str, status: int, report: NvsmiReport | None) -> Check:
    try:
        check_driver(text, status)
        listings = parse_gpu_list(text)
    except NvsmiParseError as error:
        return Check(host, "mig", FAIL, f"-L: {error}", ISSUE, LIST_QUERY)
    xml = {g.uuid: len(g.mig) for g in report.gpus} if report else None
    split = [
        f"GPU {g.index}: {len(g.mig)} slices ({', '.join(str(m.profile) for m in g.mig)})"
        for g in listings
        if g.mig
    ]
    differ = [
        str(g.index)
        for g in listings
        if g.mig and xml is not None and xml.get(g.uuid) != len(g.mig)
    ]
    if differ:
        return Check(
            host,
            "mig",
            WARN,
            f"-L and -q -x list different MIG slices on GPU {', '.join(differ)}",
            ISSUE,
            LIST_QUERY,
        )
    seen = "; ".join(split) if split else f"{_n(len(listings), 'GPU')}, MIG off"
    return Check(host, "mig", OK, seen, "", LIST_QUERY)


def _topo(host: str, text: str, status: int) -> Check:
    try:
        if status:
            raise TopologyError(f"exit status {status}: {text.strip()[:200] or 'no output'}")
        topology = parse_topology(text)
    except TopologyError as error:
        return Check(
            host,
            "topo",
            WARN,
            f"{error}; gpuhive places GPUs without topology",
            ISSUE if not status else "",
            TOPO_QUERY,
        )
    kinds = sorted(set(topology.links.values()))
    return Check(
        host,
        "topo",
        OK,
        f"{_n(len(topology.gpus), 'GPU')}, links {', '.join(kinds) or 'none'}",
        "",
        TOPO_QUERY,
    )


def _health(
    host: str, texts: dict[str, str], status: dict[str, int], lost: tuple[tuple[str, str], ...]
) -> Check:
    """GPU health as the probe reads it: its `--query-gpu` health fields, its parser."""
    try:
        gpus = parse_query_gpu(texts["query-gpu.csv"])
    except NvsmiParseError:
        gpus = []
    answer, ok = texts["query-gpu-health.csv"], status["query-gpu-health.csv"] == 0
    temperatures = {g.uuid: g.temperature_c for g in gpus}
    found = health_from_csv(answer, set(temperatures), temperatures) if ok else {}
    failed = [f"GPU at {bus}: {message}" for bus, message in lost]
    degraded: list[str] = []
    for gpu in gpus:
        health = found.get(gpu.uuid)
        if health is None or health.state not in (FAILED, DEGRADED):
            continue
        line = f"GPU {gpu.index} ({gpu.uuid}) {health.state}: {'; '.join(health.reasons)}"
        (failed if health.state == FAILED else degraded).append(line)
    if failed:
        return Check(
            host,
            "health",
            FAIL,
            " | ".join(failed + degraded),
            "gpuhive refuses bookings on a failed GPU; reset or service it (its holders "
            "are told); once healthy it is bookable again at the next sweep.",
            HEALTH_QUERY,
        )
    unread = [str(g.index) for g in gpus if g.uuid not in found]
    if unread:
        said = answer.strip().splitlines()[0] if answer.strip() else "no output"
        return Check(
            host, "health", WARN, f"no health fields for GPU {', '.join(unread)}: {said[:200]}",
            ISSUE, HEALTH_QUERY,
        )  # fmt: skip
    if degraded:
        return Check(
            host,
            "health",
            WARN,
            " | ".join(degraded),
            "still bookable; look at it (nvidia-smi -q), or drain it for maintenance (in "
            "the GPU sidebar, or through the REST API: POST /gpuhive/api/health/drain).",
            HEALTH_QUERY,
        )
    return Check(host, "health", OK, f"{_n(len(gpus), 'GPU')}: ok", "", HEALTH_QUERY)
