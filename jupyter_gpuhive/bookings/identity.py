"""Who is asking: a user's groups (from the login and from configuration), admin rights (of the
site, or of host groups: model/authority.py), and the Idempotency-Keys of their requests
(`keys`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from ..model import Identity
from ..model.authority import Authority
from ..model.errand import Errand
from ..store import Store
from .keys import RequestKeys


class Identities:
    """Turns user names into Identities, and remembers the users and groups seen."""

    def __init__(
        self,
        store: Store,
        run: Callable[..., Awaitable[Any]],
        authority: Authority | None = None,
        groups: Mapping[str, Iterable[str]] | None = None,
    ) -> None:
        self.store = store
        self.authority = authority or Authority()  # who administers the site, which hosts
        self.run = run
        self.keys = RequestKeys(store, run)  # each requester's Idempotency-Keys
        self._member_of: dict[str, set[str]] = {}
        for group, members in (groups or {}).items():
            for member in members:
                self._member_of.setdefault(member, set()).add(group)

    def identify(self, name: str, groups: Iterable[str] | None) -> Identity:
        """The Identity of a requester: provider groups plus configured ones, admin flag.

        `groups=None` means the source does not know the user's groups ("unknown" is not
        "none"): the groups last seen count, so such a request never erases them.
        """
        known = self.store.users.groups_of(name) if groups is None else frozenset(groups)
        all_groups = known | frozenset(self._member_of.get(name, ()))
        authority = self.authority
        admin = authority.site_admin(name, all_groups)
        return Identity(name, all_groups, admin, authority.admin_hosts(name, all_groups))

    def identity_of(self, name: str) -> Identity:
        """The Identity of a stored user name (groups as last seen)."""
        return self.identify(name, self.store.users.groups_of(name))

    async def remember(self, who: Identity, errand: Errand | None = None) -> None:
        """Store the user and their groups, unless stored as they are; for an API request
        (`errand`) only once the Hub confirmed who it is (it takes no Idempotency-Key: that
        is its booking's own transaction's)."""
        if not self.store.users.known(who):
            await self.run(self._touch, who, errand)

    def _touch(self, who: Identity, errand: Errand | None) -> None:
        if errand is not None:
            errand.confirmed()
        self.store.users.touch(who)

    async def me(self, who: Identity) -> dict[str, Any]:
        """The requester as gpuhive sees them (and now remembers them)."""
        await self.remember(who)
        return who.to_json()
