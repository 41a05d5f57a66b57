"""Hosts and GPUs as written in configuration."""

from __future__ import annotations

import re
import socket
import uuid
from collections.abc import Iterable
from typing import Any

from ..errors import Invalid
from ..model import GpuDecl, HostDecl
from .backends import DEFAULT, backend_class
from .engines import parse_engine
from .environment import SAFE_PATH
from .vendors import default_vendor, vendor_named, vendor_of


def stable_uuid(host: str, index: int) -> str:
    """A deterministic GPU UUID for a declared GPU that names none."""
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"gpuhive:{host}:{index}"))


def parse_host(spec: Any) -> HostDecl:
    """Validate one host entry of the configuration."""
    if isinstance(spec, str):
        spec = {"name": spec}
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str) or not spec["name"]:
        raise Invalid(f"A host needs a 'name': {spec!r}")
    name = spec["name"]
    transport = spec.get("transport", DEFAULT)
    try:
        backend = backend_class(str(transport))
    except Invalid as error:
        raise Invalid(f"Host {name}: {error}") from None
    gpus: list[GpuDecl] = []
    for i, gpu in enumerate(spec.get("gpus") or []):
        gpu = gpu if isinstance(gpu, dict) else {"model": str(gpu)}
        index = int(gpu.get("index", i))
        gpus.append(
            GpuDecl(
                index=index,
                uuid=str(gpu.get("uuid") or stable_uuid(name, index)),
                model=gpu.get("model"),
                memory_mib=gpu.get("memory_mib"),
                shareable=_gpu_shareable(name, index, gpu.get("shareable")),
            )
        )
    for index in range(len(gpus), int(spec.get("gpu_count", 0))):
        gpus.append(GpuDecl(index, stable_uuid(name, index), spec.get("gpu_model")))
    vendor_of(spec)  # an unknown vendor shows when config is read
    if spec.get("containers") is not None:
        parse_engine(name, spec["containers"])  # a site's mistake shows when config is read
    known = {k for k in spec if k not in {"name", "address", "port", "user", "transport"}}
    return HostDecl(
        name=name,
        address=str(spec.get("address", name if backend.needs_address else "localhost")),
        port=int(spec.get("port", 22)),
        user=spec.get("user"),
        transport=transport,
        gpus=tuple(gpus),
        extra={k: spec[k] for k in known - {"gpus", "gpu_count", "gpu_model", "shareable"}},
        shareable=_host_shareable(name, spec.get("shareable", False)),
    )


def _host_shareable(host: str, value: Any) -> bool | frozenset[int]:
    """A host's `shareable`: true (all its GPUs), false, or a list of GPU indexes."""
    if isinstance(value, bool):
        return value
    if isinstance(value, list) and all(
        isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value
    ):
        return frozenset(value)
    raise Invalid(
        f"Host {host}: 'shareable' must be true, false or a list of GPU indexes such as "
        f"[0, 1], not {value!r}."
    )


def _gpu_shareable(host: str, index: int, value: Any) -> bool | None:
    """A GPU entry's own `shareable` (None: as its host says)."""
    if value is None or isinstance(value, bool):
        return value
    raise Invalid(f"Host {host}, GPU {index}: 'shareable' must be true or false, not {value!r}.")


def parse_hosts(specs: Iterable[Any]) -> list[HostDecl]:
    """Validate the host list; names must be unique."""
    hosts = [parse_host(spec) for spec in specs]
    seen: set[str] = set()
    for host in hosts:
        if host.name in seen:
            raise Invalid(f"Host {host.name!r} is configured twice.")
        seen.add(host.name)
    return hosts


def local_host_name() -> str:
    """This machine's short host name, as a gpuhive host name ('localhost' if it has none)."""
    name = socket.gethostname().split(".")[0]
    name = re.sub(r"[^A-Za-z0-9_-]", "-", name).strip("-")
    return name or "localhost"


def local_gpu_host(
    search_path: str | None = None, timeout: float = 15.0, vendor: str | None = None
) -> tuple[dict[str, Any] | None, str]:
    """This machine as a host entry when its GPU tool runs here, and why (or why not).

    The entry uses the local transport, is named by the host name, lists the GPUs the
    vendor's tool names, and carries the PATH where the tool was found (local commands run
    with a minimal environment of their own, not the server's).
    """
    chosen = vendor_named(vendor) if vendor else default_vendor()
    folder, gpus, said = chosen.local_gpus(search_path, timeout)
    if folder is None:
        return None, said
    path = SAFE_PATH if folder in SAFE_PATH.split(":") else f"{folder}:{SAFE_PATH}"
    spec = {"name": local_host_name(), "address": "localhost", "transport": "local",
            "gpus": gpus, "env": {"PATH": path}}  # fmt: skip
    if vendor:
        spec["vendor"] = vendor
    return spec, said
