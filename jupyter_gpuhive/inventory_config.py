"""Hosts and GPUs as written in configuration."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from .errors import Invalid
from .model import GpuDecl, HostDecl

TRANSPORTS = ("ssh", "local")


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
    transport = spec.get("transport", "ssh")
    if transport not in TRANSPORTS:
        raise Invalid(f"Host {name}: transport must be one of {TRANSPORTS}, not {transport!r}.")
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
            )
        )
    for index in range(len(gpus), int(spec.get("gpu_count", 0))):
        gpus.append(GpuDecl(index, stable_uuid(name, index), spec.get("gpu_model")))
    known = {k for k in spec if k not in {"name", "address", "port", "user", "transport"}}
    return HostDecl(
        name=name,
        address=str(spec.get("address", name if transport == "ssh" else "localhost")),
        port=int(spec.get("port", 22)),
        user=spec.get("user"),
        transport=transport,
        gpus=tuple(gpus),
        extra={k: spec[k] for k in known - {"gpus", "gpu_count", "gpu_model"}},
    )


def parse_hosts(specs: Iterable[Any]) -> list[HostDecl]:
    """Validate the host list; names must be unique."""
    hosts = [parse_host(spec) for spec in specs]
    seen: set[str] = set()
    for host in hosts:
        if host.name in seen:
            raise Invalid(f"Host {host.name!r} is configured twice.")
        seen.add(host.name)
    return hosts
