"""Driver generations the stand-in can be: what each one's nvidia-smi knows, prints and fails with.

A simulated host's ``driver_version`` picks its generation (418, 470, 535 or 570+ style, by the
major version). The generation decides:

- the ``--query-gpu`` fields it accepts (`unknown_field`): a field newer than the driver is
  refused as a real one refuses it (``Field "x" is not a valid field to query.``, on stdout,
  exit 2), and its ``--help-query-gpu`` list (`help_query_gpu`) leaves it out;
- the ``-q -x`` element names (`xml_names`): ``power_readings`` before 530 and
  ``gpu_power_readings`` after, ``power_draw`` before 570 and ``instant_power_draw`` after,
  ``clocks_throttle_reasons`` before 535 and ``clocks_event_reasons`` after, no ``mig_mode``
  nor ``remapped_rows`` before 450, and the DTD version (v10 to v13);
- the failure a host's driver is in (`failure`, the config's ``driver_failure``): the driver not
  loaded, an NVML/driver mismatch or no devices, each printed on stdout with its exit status.

Where the facts come from (../shared/smi-corpus, read, never copied): the ``--help-query-gpu``
lists of drivers 466, 535, 590, 595 and 610 (``mig.*`` in 466; ``clocks_event_reasons.*`` and
``power.draw.instant`` from 535; ``remapped_rows.*`` from 590, none in 535; ``memory.reserved``
not in 466) and the ``-q -x`` logs of drivers 384 to 595 (the element names above and their
DTD versions). Inferred: the exact majors between two captures (mig at 450, the R450 branch that
brought MIG; ``memory.reserved`` at 510), and the exit statuses of the failures (NVML's return
codes: 9 driver not loaded, 18 library/driver mismatch, 6 not found).

Standard library only and light: the stand-in imports this on every call.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

# (first major of the generation, its name): a driver is the last generation it reaches.
GENERATIONS = ((0, "418"), (450, "470"), (530, "535"), (570, "570"))
# Field families (a prefix, or a whole name) a driver before this major does not know.
FIELDS_SINCE = {
    "mig.": 450,
    "memory.reserved": 510,
    "power.draw.instant": 530,
    "power.draw.average": 530,
    "clocks_event_reasons.": 535,
    "remapped_rows.": 590,
}
# A description line per field in --help-query-gpu (only its form matters to a reader).
_ALIASES = {
    "name": "gpu_name",
    "uuid": "gpu_uuid",
    "pci.bus_id": "gpu_bus_id",
    "persistence_mode": "persistence.mode",
    "clocks.sm": "clocks.current.sm",
}
_HELP_HEAD = 'List of valid properties to query for the switch "--query-gpu":\n\n'

# failure -> (what nvidia-smi prints on stdout, its exit status)
FAILURES = {
    "not_loaded": (
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running.\n\n",
        9,
    ),
    "nvml_mismatch": ("Failed to initialize NVML: Driver/library version mismatch\n", 18),
    "no_devices": ("No devices were found\n", 6),
}


def major(driver: object) -> int:
    """The major version of a driver version string ('535.129.03' -> 535; 0 if none)."""
    head = str(driver or "").split(".", 1)[0]
    return int(head) if head.isdigit() else 0


def generation(driver: object) -> str:
    """The generation a driver version belongs to ('418', '470', '535' or '570')."""
    found = GENERATIONS[-1][1] if not major(driver) else GENERATIONS[0][1]
    for since, name in GENERATIONS:
        if major(driver) >= since:
            found = name
    return found


def unknown_field(key: str, driver: object) -> bool:
    """Whether a driver of this version refuses the ``--query-gpu`` field `key` (a driver
    without a version knows every field)."""
    at = major(driver)
    return bool(at) and any(
        (key.startswith(family) if family.endswith(".") else key == family) and at < since
        for family, since in FIELDS_SINCE.items()
    )


def help_query_gpu(keys: Iterable[str], driver: object, aliases: Iterable[str] = ()) -> str:
    """``nvidia-smi --help-query-gpu`` of this driver: each field it knows (`keys`, and the
    `aliases` the stand-in answers that are not a field's second name), quoted, with its alias,
    and a description line."""
    out = [_HELP_HEAD]
    names = [*keys, *(a for a in aliases if a not in _ALIASES.values())]
    for key in names:
        if unknown_field(key, driver):
            continue
        alias = _ALIASES.get(key)
        out.append(f'"{key}"' + (f' or "{alias}"' if alias else "") + "\n")
        out.append(f"The {key.replace('.', ' ').replace('_', ' ')} of the GPU.\n\n")
    return "".join(out)


def xml_names(driver: object) -> dict[str, object]:
    """The ``-q -x`` names of this driver: the power block and its draw element, the
    slowdown reasons' word, whether mig_mode and remapped_rows are printed, the DTD."""
    at = major(driver) or 570
    dtd = 13 if at >= 590 else 12 if at >= 525 else 11 if at >= 450 else 10
    return {
        "power": "gpu_power_readings" if at >= 530 else "power_readings",
        "draw": "instant_power_draw" if at >= 570 else "power_draw",
        "reasons": "event" if at >= 535 else "throttle",
        "mig_mode": at >= 450,
        "remapped_rows": at >= 450,
        "dtd": f"nvsmi_device_v{dtd}.dtd",
    }


def failure(knob: object) -> tuple[str, int] | None:
    """(stdout, exit status) of the config's `driver_failure` (True: the driver not loaded)."""
    if not knob:
        return None
    return FAILURES.get(str(knob), FAILURES["not_loaded"])
