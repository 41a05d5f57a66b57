"""Where webhook endpoints may point, and the addresses their deliveries connect to.

Users are legitimate but not trusted with the server's network position: their own endpoints
must resolve only to global addresses (no loopback, private, link-local such as
169.254.169.254, or reserved ones). That is checked when an endpoint is added, and for every
attempt by `PinnedResolver`: an endpoint's host is looked up at most every RESOLVE_TTL
seconds, the answer is checked, and the transport (transport.py) connects only to those
checked addresses (a name cannot resolve to a public address for the check and to an
inside one for the connection). Site endpoints, which only admins add, may point anywhere.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from urllib.parse import urlsplit

from .transport import Address

RESOLVE_TTL = 30.0  # seconds an endpoint's checked addresses are used before a new lookup


def host_port(url: str) -> tuple[str, int]:
    """The host and port a URL connects to."""
    parts = urlsplit(url)
    return parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)


async def lookup(host: str, port: int, timeout: float) -> list[Address]:
    """The addresses `host` resolves to (OSError or TimeoutError when it does not)."""
    async with asyncio.timeout(timeout):
        found = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [(family, address) for family, _, _, _, address in found]


IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_NAT64 = ipaddress.ip_network("64:ff9b::/96")  # RFC 6052's well-known prefix
_COMPATIBLE = ipaddress.ip_network("::/96")  # deprecated IPv4-compatible IPv6 (RFC 4291)
_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")  # SIIT IPv4-translated (RFC 2765)
# Local-use NAT64 (RFC 8215): the IPv4 address sits where the operator chose; never global.
_LOCAL_NAT64 = ipaddress.ip_network("64:ff9b:1::/48")


def embedded(ip: IPAddress) -> IPAddress:
    """The IPv4 address an IPv6 one stands for (IPv4-mapped, IPv4-compatible, 6to4, NAT64),
    else the address itself."""
    if isinstance(ip, ipaddress.IPv4Address):
        return ip
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in _NAT64 or ip in _COMPATIBLE or ip in _TRANSLATED:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip


def routable(ip: IPAddress) -> bool:
    """Whether `ip` is a globally routable unicast address; an IPv6 form that carries an IPv4
    address (mapped, compatible, translated, 6to4, NAT64) is judged by that address."""
    if isinstance(ip, ipaddress.IPv6Address) and ip in _LOCAL_NAT64:
        return False
    inner = embedded(ip)
    # A wrapper is judged by the IPv4 address it carries alone: Python's own verdict on the
    # IPv6 prefixes changed within 3.11 (2002::/16 is global in 3.11.7, not in 3.11.2).
    return inner.is_global and not inner.is_multicast


def not_public(host: str, found: list[Address]) -> str | None:
    """Why these addresses may not receive a user's webhook (one is not global), or None."""
    for _, address in found:
        ip = ipaddress.ip_address(str(address[0]).split("%", 1)[0])
        if not routable(ip):
            inner = embedded(ip)
            shown = f"{ip}" if inner == ip else f"{ip}, that is {inner}"
            return (
                f"{host} is a loopback, private or link-local address, or another that is not "
                f"globally routable unicast ({shown})"
            )
    return None


async def public_only(url: str, timeout: float = 5.0) -> str | None:
    """Why a user's endpoint may not get this URL (a non-public address), or None."""
    host, port = host_port(url)
    try:
        found = await lookup(host, port, timeout)
    except (OSError, TimeoutError, UnicodeError):
        return f"{host} cannot be resolved"
    return not_public(host, found)


class NotSent(ValueError):
    """The endpoint's host resolves to addresses it may not be sent to (or none)."""


class PinnedResolver:
    """One endpoint's addresses: looked up at most every RESOLVE_TTL s, checked, and the only
    ones its transport connects to (the transport calls `resolve`)."""

    def __init__(self, timeout: float, public_only: bool) -> None:
        self.timeout = timeout
        self.public_only = public_only  # a user's own endpoint (unless allow_private)
        self._known: dict[tuple[str, int], tuple[float, list[Address], str | None]] = {}

    async def addresses(self, host: str, port: int) -> list[Address]:
        """The checked addresses of `host` (NotSent with the reason when there are none)."""
        now = time.monotonic()
        known = self._known.get((host, port))
        if known is None or known[0] <= now:
            try:
                found = await lookup(host, port, self.timeout)
            except (OSError, TimeoutError, UnicodeError):
                raise NotSent(f"not sent: {host} cannot be resolved") from None
            problem = not_public(host, found) if self.public_only else None
            known = self._known[(host, port)] = (now + RESOLVE_TTL, found, problem)
        if known[2]:
            raise NotSent(f"not sent: {known[2]}")
        return known[1]

    async def resolve(
        self, host: str, port: int, family: socket.AddressFamily = socket.AF_UNSPEC
    ) -> list[Address]:
        """The checked addresses of `host` in `family` (transport.Resolve)."""
        found = await self.addresses(host, port)
        return [a for a in found if family in (socket.AF_UNSPEC, a[0])]
