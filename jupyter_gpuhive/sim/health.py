"""GPU failures of the stand-in: a `fault` per simulated GPU and what nvidia-smi then prints.

Standard library only (copied onto simulated hosts). Presets (`SimGpu.fault`):

- ``ecc``: uncorrectable (double-bit) DRAM ECC errors since the driver loaded (volatile) and
  over the GPU's life (aggregate), as after Xid 48; a page pending retirement.
- ``retired``: pages retired for double-bit errors and one pending (the GPU needs a reset).
- ``remapped``: row remapping failed (``remapped_row_failure`` Yes): the GPU needs service.
- ``thermal``: 95 C against a slowdown threshold of 89 C; HW and SW thermal slowdown active.
- ``lost``: the GPU fell off the bus: nvidia-smi prints "Unable to determine the device handle
  for GPU 0000:07:00.0: GPU is lost.  Reboot the system to recover this GPU" in place of its row
  and leaves it out of every listing.
- ``xid``: Xid 79 ("GPU has fallen off the bus") as nvidia-smi then shows it: "Unable to
  determine the device handle for GPU0000:07:00.0: Unknown Error".

Where the formats come from: the element names (``ecc_errors`` with ``volatile``/``aggregate``
and ``sram_``/``dram_`` counters of drivers >= 510, ``retired_pages``, ``remapped_rows``,
``clocks_event_reasons`` from driver 535 and ``clocks_throttle_reasons`` before it,
``gpu_temp_slow_threshold``) and the two "device handle" messages follow public captures of real
``nvidia-smi -q -x`` and CSV output; the project's samples hold none of them, so they are
inferred, as are the exit status with a lost GPU (15, NVML's GPU_IS_LOST) and where the message
stands (stdout, in place of the GPU's row). A real driver also logs each Xid in the kernel log
(``NVRM: Xid (PCI:0000:07:00): 79, ...``), which the stand-in does not simulate.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at run time: the CSV fast path imports this
if TYPE_CHECKING:
    from typing import Any

GPU_FAULTS = ("ecc", "retired", "remapped", "thermal", "lost", "xid")
LOST_FAULTS = ("lost", "xid")
LOST_EXIT = 15
SLOWDOWN_C = 89
SHUTDOWN_C = 92
HOT_C = 95


def lost_message(gpu: Any) -> str:
    """The line nvidia-smi prints for a GPU it cannot reach (a `lost` or `xid` fault)."""
    bus = str(gpu.pci_bus_id)[-12:]  # '00000000:07:00.0' -> '0000:07:00.0'
    if gpu.fault == "xid":
        return f"Unable to determine the device handle for GPU{bus}: Unknown Error"
    return (
        f"Unable to determine the device handle for GPU {bus}: GPU is lost.  "
        "Reboot the system to recover this GPU"
    )


def temperature(gpu: Any, current: int | None) -> int | None:
    """The GPU's temperature as the fault makes it."""
    return HOT_C if getattr(gpu, "fault", None) == "thermal" else current


def health_nodes(gpu: Any, driver_major: int) -> list[Any]:
    """The ``-q -x`` elements about ECC, retired pages, row remapping and slowdown reasons."""
    fault = getattr(gpu, "fault", None)
    dbe = "2" if fault == "ecc" else "0"
    counts = [
        ("sram_correctable", "0"),
        ("sram_uncorrectable", "0"),
        ("dram_correctable", "0"),
        ("dram_uncorrectable", dbe),
    ]
    retired = "3" if fault == "retired" else "0"
    pending = "Yes" if fault in ("retired", "ecc") else "No"
    hot = "Active" if fault == "thermal" else "Not Active"
    word = "event" if driver_major >= 535 else "throttle"
    reasons = [
        (f"clocks_{word}_reason_gpu_idle", "Not Active"),
        (f"clocks_{word}_reason_sw_power_cap", "Not Active"),
        (f"clocks_{word}_reason_hw_slowdown", hot),
        (f"clocks_{word}_reason_hw_thermal_slowdown", hot),
        (f"clocks_{word}_reason_sw_thermal_slowdown", hot),
    ]
    nodes = [
        ("ecc_mode", [("current_ecc", "Enabled"), ("pending_ecc", "Enabled")]),
        ("ecc_errors", [("volatile", counts), ("aggregate", counts)]),
        (
            "retired_pages",
            [
                ("multiple_single_bit_retirement", [("retired_count", "0")]),
                ("double_bit_retirement", [("retired_count", retired)]),
                ("pending_blacklist", pending),
                ("pending_retirement", pending),
            ],
        ),
        (
            "remapped_rows",
            [
                ("remapped_row_corr", "0"),
                ("remapped_row_unc", "1" if fault == "remapped" else "0"),
                ("remapped_row_pending", "No"),
                ("remapped_row_failure", "Yes" if fault == "remapped" else "No"),
            ],
        ),
        (f"clocks_{word}_reasons", reasons),
    ]
    if driver_major and driver_major < 450:  # no row remapping before R450 (A100's)
        nodes = [node for node in nodes if node[0] != "remapped_rows"]
    return nodes


# `--query-gpu` health fields (the names of the corpus's field lists) and what a fault makes
# them; `clocks_event_reasons.*` are the 535+ names of `clocks_throttle_reasons.*`.
_SLOWDOWN_FIELDS = ("hw_slowdown", "hw_thermal_slowdown", "sw_thermal_slowdown")


def health_field(gpu: Any, name: str) -> str | None:
    """The value of a ``--query-gpu`` health field on `gpu` (None: not a health field)."""
    fault = getattr(gpu, "fault", None)
    if name in ("ecc.errors.uncorrected.volatile.total", "ecc.errors.uncorrected.aggregate.total"):
        return "2" if fault == "ecc" else "0"
    if name in ("ecc.errors.corrected.volatile.total", "ecc.errors.corrected.aggregate.total"):
        return "0"
    if name == "retired_pages.pending":
        return "Yes" if fault in ("retired", "ecc") else "No"
    if name == "retired_pages.double_bit.count":
        return "3" if fault == "retired" else "0"
    if name == "retired_pages.single_bit_ecc.count":
        return "0"
    if name == "remapped_rows.pending":
        return "No"
    if name == "remapped_rows.failure":
        return "Yes" if fault == "remapped" else "No"
    word, _, reason = name.partition(".")
    if word in ("clocks_throttle_reasons", "clocks_event_reasons") and reason in _SLOWDOWN_FIELDS:
        return "Active" if fault == "thermal" else "Not Active"
    return None


HEALTH_FIELDS = (
    "ecc.errors.uncorrected.volatile.total",
    "ecc.errors.uncorrected.aggregate.total",
    "ecc.errors.corrected.volatile.total",
    "ecc.errors.corrected.aggregate.total",
    "retired_pages.pending",
    "retired_pages.double_bit.count",
    "retired_pages.single_bit_ecc.count",
    "remapped_rows.pending",
    "remapped_rows.failure",
    *(f"clocks_{w}_reasons.{r}" for w in ("throttle", "event") for r in _SLOWDOWN_FIELDS),
)
# Field families a driver before this major version does not know (an unknown field fails the
# whole query). The corpus's field list of 535.129.03 has no remapped_rows.*, 590.48.01's has;
# clocks_event_reasons.* appear in 535's list, not in 466's.
FIELDS_SINCE = {"remapped_rows.": 590, "clocks_event_reasons.": 535}
