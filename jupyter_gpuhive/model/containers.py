"""What a container job asks for: its image, the allowed mounts it picked, and the reservation
it was created from (named in the container's labels)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ContainerSpec:
    """A job's container: image reference, host paths to mount, its reservation (if any)."""

    image: str
    mounts: tuple[str, ...] = ()
    reservation: int | None = None
    host_network: bool = False  # the distributed templates' tasks reach each other's ports

    def to_json(self) -> dict[str, Any]:
        return {
            "image": self.image,
            "mounts": list(self.mounts),
            "reservation": self.reservation,
            "host_network": self.host_network,
        }

    def dumps(self) -> str:
        """The stored form (the jobs row's `container` column)."""
        return json.dumps(self.to_json(), sort_keys=True)

    @classmethod
    def loads(cls, text: str | None) -> ContainerSpec | None:
        """The spec of a stored `container` column (None for a bare job)."""
        if not text:
            return None
        data = json.loads(text)
        return cls(
            str(data["image"]),
            tuple(data.get("mounts") or ()),
            data.get("reservation"),
            bool(data.get("host_network")),
        )
