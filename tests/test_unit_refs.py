"""One unit-reference pattern (issue #42 item 6): the server's `parse_ref` and the client-mode
kernelspecs' `gpu_of` read 'host:index[/migGI[.CI]]' alike. They disagreed on host names
with ':', '/' or spaces (the hosts file allows them: the server refused what the client read)
and on a slice's compute instance (0 against None)."""

from __future__ import annotations

import pytest

from jupyter_gpuhive.hosts.config import parse_host
from jupyter_gpuhive.model import Gpu, UnitRef, parse_ref
from jupyter_gpuhive.server.client_specs import gpu_of

CASES = [
    ("gpu1:0", UnitRef("gpu1", 0)),
    (" gpu1:3 ", UnitRef("gpu1", 3)),
    ("node1.example.org:7", UnitRef("node1.example.org", 7)),
    ("gpu1:0/mig5", UnitRef("gpu1", 0, 5, 0)),  # the client said CI None
    ("gpu1:0/mig5.1", UnitRef("gpu1", 0, 5, 1)),
    ("rack:a:2", UnitRef("rack:a", 2)),  # the server refused these three
    ("rack/a:2/mig3", UnitRef("rack/a", 2, 3, 0)),
    ("rack 1:3", UnitRef("rack 1", 3)),
    ("GPU-8a1e0c2e-0000-4000-8000-000000000000", None),  # a UUID
    ("MIG-GPU-8a1e0c2e-0000-4000-8000-000000000000/1/0", None),  # an old-style MIG UUID
    ("gpu1:x", None),
    ("gpu1:0/mig", None),
    (":0", None),
]


@pytest.mark.parametrize(("text", "parts"), CASES)
def test_server_and_client_read_a_ref_alike(text: str, parts: UnitRef | None) -> None:
    assert parse_ref(text) == parts
    gpu = gpu_of(text.strip(), "uuid")
    if parts is None:
        assert (gpu.host, gpu.index, gpu.is_slice) == (text.strip(), 0, False)
        return
    assert (gpu.host, gpu.index) == (parts.host, parts.index)
    assert (gpu.gpu_instance_id, gpu.compute_instance_id) == (
        parts.gpu_instance_id,
        parts.compute_instance_id,
    )
    assert gpu.ref == text.strip()


@pytest.mark.parametrize("name", ["rack:a", "rack/a", "rack 1", "gpu-1"])
def test_every_host_name_the_hosts_file_takes_makes_a_ref_that_reads_back(name: str) -> None:
    host = parse_host({"name": name, "address": "127.0.0.1"}).name
    for unit in (
        Gpu(1, host, 2, "u"),
        Gpu(2, host, 2, "m", parent_id=1, gpu_instance_id=4, compute_instance_id=1),
    ):
        parts = parse_ref(unit.ref)
        assert parts is not None, unit.ref
        assert (parts.host, parts.index, parts.gpu_instance_id) == (
            host,
            2,
            unit.gpu_instance_id,
        )
        assert gpu_of(unit.ref).ref == unit.ref
