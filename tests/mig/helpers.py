"""A host with MIG slices for the store and API tests (no probe needed)."""

from __future__ import annotations

from jupyter_gpuhive.model import Gpu, GpuDecl, HostDecl, SliceDecl
from jupyter_gpuhive.store import Store

A100 = "NVIDIA A100-SXM4-80GB"
# GPU 0 of 'mig1' split as in the real sample (3g.40gb GI 1, 2g.20gb GI 5, 1g.10gb GI 13).
SLICES = (
    SliceDecl(1, 0, "3g.40gb", "MIG-f9a16904-b58e-d520-c431-96244c7fdfaf", 40192),
    SliceDecl(5, 0, "2g.20gb", "MIG-5ebf3fb5-5ae3-1fb3-d239-40e3e35ae671", 19968),
    SliceDecl(13, 0, "1g.10gb", "MIG-dbbf4f9e-de61-bf85-9e9e-8d6d5f61c39a", 9728),
)


def mig_host(name: str = "mig1", slices: tuple[SliceDecl, ...] = SLICES) -> HostDecl:
    """A host with GPU 0 split into `slices` and GPU 1 whole."""
    return HostDecl(
        name,
        "127.0.0.1",
        transport="local",
        gpus=(
            GpuDecl(0, f"GPU-{name}-0000-0000-0000-000000000000", A100, 81920, slices),
            GpuDecl(1, f"GPU-{name}-0001-0000-0000-000000000000", A100, 81920, ()),
        ),
    )


def unit(store: Store, ref: str) -> Gpu:
    """A GPU or slice of the store's inventory by its reference ('mig1:0/mig1')."""
    found = store.inventory.gpu(ref)
    assert found is not None, ref
    return found
