"""What one nvidia-smi knows and says it cannot: its query fields, placeholders and failures.

Drivers differ: a field one knows another refuses (`Field "x" is not a valid field to query.`,
on stdout, exit 2: the whole query fails), a value one reports another prints as a bracketed
placeholder, and a driver in trouble prints a sentence, sometimes on stdout with a non-zero
status. `help_fields` reads `--help-query-gpu` (what to ask), `placeholder_reason` what a
placeholder means, `driver_state` which state a failure output is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# A placeholder where a value should be, and what it means for that value.
PLACEHOLDERS = {
    "N/A": "not available on this GPU",
    "Not Supported": "not supported by this GPU or driver",
    "Insufficient Permissions": "needs root to read",
    "Unknown Error": "the driver reported an error",
    "Requested functionality has been deprecated": "deprecated by this driver",
    "Function Not Found": "not in this driver",
}
NOT_KNOWN = "not known to this driver"  # a field the host's nvidia-smi does not list
_HELP_NAME = re.compile(r"[\"\u201c\u201d]([a-z][A-Za-z0-9_.]*)[\"\u201c\u201d]")
UNKNOWN_FIELD = re.compile(
    r"Field [\"\u201c\u201d]([^\"\u201c\u201d]+)[\"\u201c\u201d] is not a valid field"
)


def placeholder_reason(value: str | None) -> str | None:
    """What a placeholder cell or element says ('[N/A]', 'Not Supported', ''), or None for a
    value."""
    if value is None:
        return None
    text = value.strip()
    if not text:
        return PLACEHOLDERS["N/A"]
    return PLACEHOLDERS.get(text[1:-1] if text[:1] == "[" and text[-1:] == "]" else text)


def help_fields(text: str) -> frozenset[str]:
    """Every field (and alias) `nvidia-smi --help-query-gpu` or `--help-query-compute-apps`
    lists: the lines that start with a quoted name (`"a" or "b"`)."""
    names: set[str] = set()
    for line in text.splitlines():
        if line[:1] in ('"', "\u201c", "\u201d"):
            names.update(_HELP_NAME.findall(line.split(" or ", 1)[0]))
            for alias in line.split(" or ")[1:]:
                names.update(_HELP_NAME.findall(alias))
    return frozenset(names)


def known(wanted: tuple[str, ...], listed: frozenset[str]) -> tuple[str, ...]:
    """The fields of `wanted` the host lists (all of them when it listed none)."""
    return wanted if not listed else tuple(f for f in wanted if f in listed)


@dataclass(frozen=True)
class DriverState:
    """A failure output as a state a person understands: its name and a sentence."""

    state: str  # gpu_lost, nvml_mismatch, no_devices, driver_not_loaded, unknown_field, ...
    message: str


_STATES = (
    (
        re.compile(r"Unable to determine the device handle for GPU ?\S+: GPU is lost"),
        "gpu_lost",
        "a GPU is lost (fallen off the bus): reboot the host to recover it",
    ),
    (
        re.compile(r"Unable to determine the device handle for GPU ?\S+: Unknown Error"),
        "gpu_lost",
        "a GPU does not answer (Unknown Error, often Xid 79): reset or reboot to recover it",
    ),
    (
        re.compile(r"Driver/library version mismatch"),
        "nvml_mismatch",
        "the NVIDIA driver loaded differs from its library (updated without a reboot): "
        "reboot the host or reload the nvidia kernel modules",
    ),
    (
        re.compile(r"^No devices were found", re.MULTILINE),
        "no_devices",
        "the NVIDIA driver runs but sees no GPU",
    ),
    (
        re.compile(r"couldn't communicate with the NVIDIA driver|Failed to initialize NVML"),
        "driver_not_loaded",
        "the NVIDIA driver is not loaded or does not answer: check `lsmod | grep nvidia` "
        "and `dmesg`",
    ),
    (
        UNKNOWN_FIELD,
        "unknown_field",
        "this driver does not know a field it was asked for",
    ),
    (
        re.compile(r"Insufficient Permissions"),
        "insufficient_permissions",
        "this query needs root on this host",
    ),
    (
        re.compile(r"Please run 'nvidia-smi -h' for help|Invalid combination of input arguments"),
        "usage_error",
        "this nvidia-smi does not take the command it was given (an older or a Windows "
        "nvidia-smi?)",
    ),
)


def driver_state(text: str) -> DriverState | None:
    """The state a failure output names, or None when it names none."""
    for pattern, state, message in _STATES:
        found = pattern.search(text)
        if found:
            start = text.rfind("\n", 0, found.start()) + 1  # the whole line it said
            detail = text[start:].splitlines()[0].strip()
            return DriverState(state, f"{message} (nvidia-smi: {detail})")
    return None
