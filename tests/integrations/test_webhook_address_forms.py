"""Only globally routable unicast addresses receive users' webhooks, IPv6 forms that carry an
IPv4 address (mapped, compatible, 6to4, NAT64) judged by that address (issue #27, finding 6)."""

from __future__ import annotations

from typing import Any

import pytest

from jupyter_gpuhive.integrations.addresses import NotSent, PinnedResolver
from jupyter_gpuhive.integrations.webhooks import public_only

REPORTED = ["::127.0.0.1", "64:ff9b::7f00:1", "2002:7f00:1::", "224.0.0.1"]
REFUSED = [
    *REPORTED,
    "::ffff:127.0.0.1",  # IPv4-mapped loopback
    "::ffff:0:7f00:1",  # IPv4-translated loopback
    "64:ff9b::a9fe:a9fe",  # NAT64 of the cloud metadata address
    "2002:a9fe:a9fe::1",  # 6to4 of the same
    "2002:a00:1::",  # 6to4 of 10.0.0.1
    "::10.0.0.1",  # IPv4-compatible private
    "64:ff9b:1::a00:1",  # local-use NAT64
    "ff0e::1",  # global-scope IPv6 multicast
    "239.255.255.250",  # IPv4 multicast (SSDP)
    "255.255.255.255",
    "100.64.0.1",  # carrier-grade NAT
]
ACCEPTED = [
    "93.184.215.14",
    "2001:4860:4860::8888",
    "::ffff:93.184.215.14",  # mapped public
    "2002:5db8:d70e::1",  # 6to4 of 93.184.215.14
    "64:ff9b::5db8:d70e",  # NAT64 of the same
]


def url(address: str) -> str:
    return f"http://[{address}]:8080/hook" if ":" in address else f"http://{address}:8080/hook"


@pytest.mark.parametrize("address", REFUSED)
async def test_addresses_that_are_not_global_unicast_are_refused(address: str) -> None:
    problem = await public_only(url(address))
    assert problem is not None and "not globally routable" in problem, problem
    resolver = PinnedResolver(timeout=5.0, public_only=True)
    with pytest.raises(NotSent):
        await resolver.resolve(address, 8080)


@pytest.mark.parametrize("address", ACCEPTED)
async def test_global_unicast_addresses_are_accepted(address: str) -> None:
    assert await public_only(url(address)) is None
    resolver = PinnedResolver(timeout=5.0, public_only=True)
    assert await resolver.resolve(address, 8080)


async def test_the_api_refuses_the_reported_forms(api: Any) -> None:
    alice = api("alice")
    for address in REPORTED:
        refused = await alice("POST", "webhooks", {"url": url(address)})
        assert refused.status == 422, (address, refused)
    assert (await alice("GET", "webhooks")).body == {"webhooks": []}
