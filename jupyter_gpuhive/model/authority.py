"""Who may do what: gpuhive's one declared authorization policy.

Every REST route declares a resource and an action (`auth_resource` and jupyter_server's
`@authorized`); `POLICY` says, for each pair, who may at all. The request then goes on to
the server's own Authorizer (a site's, or in team mode the Hub's scopes), which may refuse
more. What depends on the thing itself (its owner, its hosts) is decided by the services
with `Authority.require`, against the same table.

Who may, from the widest to the narrowest:

- `USER`: any authenticated user (a service still limits them to their own things);
- `HOLDER`: the thing's owner, and site admins;
- `OWNER`: the thing's owner, the administrators of its hosts' group, and site admins;
- `GROUP_ADMIN`: site admins, and a host group's administrators on that group's hosts;
- `ADMIN`: site admins only (`admin_users`, `admin_groups`, the Hub's `custom:gpuhive:admin`).

A host belongs to a group by its configuration (`{"name": "gpu7", "group": "physics"}`), and
each group names its administrators (`c.GpuHiveApp.host_groups`). docs/how-to/authorization.md
has the table as a site reads it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from ..errors import Forbidden, Invalid
from .core import HostDecl, Identity

USER, HOLDER, OWNER = "user", "holder", "owner"
GROUP_ADMIN, ADMIN = "group admin", "admin"
# Each in words, as the reference and refusals say it
WHO_MAY = {
    USER: "every user",
    HOLDER: "its owner; site admins",
    OWNER: "its owner; its hosts' group administrators; site admins",
    GROUP_ADMIN: "site admins; a host group's administrators, on its hosts",
    ADMIN: "site admins",
}
READ, WRITE, EXECUTE = "read", "write", "execute"  # jupyter_server's actions
# The resources services name (routes name theirs in `auth_resource`)
RESERVATIONS, RULES, HEALTH = "gpuhive:reservations", "gpuhive:rules", "gpuhive:health"
SITE_FEEDS = "gpuhive:site-feeds"
BUDGETS = "gpuhive:budgets"
HOST_GROUPS = "gpuhive:host-groups"


@dataclass(frozen=True)
class Entry:
    """Who may do an action on a resource, and the action in words (for a refusal)."""

    who: str
    what: str


# (resource, action) -> who may. Resources are what routes declare (`auth_resource`); the
# actions are jupyter_server's: read, write (change), execute (run something on a host).
POLICY: dict[tuple[str, str], Entry] = {
    ("gpuhive:me", READ): Entry(USER, "see who they are"),
    ("gpuhive:hosts", READ): Entry(USER, "see hosts, GPUs and their metrics"),
    ("gpuhive:health", READ): Entry(USER, "see the GPUs' health"),
    ("gpuhive:health", WRITE): Entry(GROUP_ADMIN, "drain a GPU or end its drain"),
    ("gpuhive:metrics", READ): Entry(ADMIN, "read the Prometheus metrics"),
    ("gpuhive:usage", READ): Entry(USER, "see usage and accounting"),
    ("gpuhive:limits", READ): Entry(USER, "see limits"),
    ("gpuhive:limits", WRITE): Entry(ADMIN, "set limits or tiers"),
    ("gpuhive:violations", READ): Entry(USER, "see violations"),
    ("gpuhive:reservations", READ): Entry(USER, "see reservations"),
    ("gpuhive:reservations", WRITE): Entry(USER, "book GPUs"),
    ("gpuhive:reservations", "change"): Entry(HOLDER, "change this reservation"),
    ("gpuhive:reservations", "cancel"): Entry(OWNER, "cancel or end this reservation"),
    ("gpuhive:reservations", "see usage"): Entry(OWNER, "see this reservation's usage"),
    ("gpuhive:reservations", "for another"): Entry(ADMIN, "book for someone else"),
    ("gpuhive:reservations", "lending"): Entry(OWNER, "choose whether this booking lends its GPUs"),
    ("gpuhive:reservations", "approve"): Entry(GROUP_ADMIN, "approve or decline this booking"),
    ("gpuhive:rules", READ): Entry(USER, "see access rules"),
    ("gpuhive:rules", WRITE): Entry(GROUP_ADMIN, "change access rules"),
    ("gpuhive:jobs", READ): Entry(USER, "see jobs and templates"),
    ("gpuhive:jobs", WRITE): Entry(USER, "create or delete jobs"),
    ("gpuhive:jobs", EXECUTE): Entry(USER, "start, stop or queue jobs"),
    ("gpuhive:feeds", READ): Entry(USER, "see calendar feeds"),
    ("gpuhive:feeds", WRITE): Entry(USER, "make or end their calendar feed"),
    ("gpuhive:site-feeds", WRITE): Entry(ADMIN, "publish or stop a site feed"),
    ("gpuhive:webhooks", READ): Entry(USER, "see webhooks"),
    ("gpuhive:webhooks", WRITE): Entry(USER, "add or remove webhooks"),
    ("gpuhive:webhooks", "site"): Entry(ADMIN, "add site webhooks (everyone's events)"),
    ("gpuhive:subscriptions", READ): Entry(USER, "see availability subscriptions"),
    ("gpuhive:subscriptions", WRITE): Entry(USER, "subscribe or book an offer"),
    ("gpuhive:digest", READ): Entry(USER, "see their digest setting"),
    ("gpuhive:digest", WRITE): Entry(USER, "change their digest setting"),
    ("gpuhive:kernels", READ): Entry(USER, "see kernels on reservations"),
    ("gpuhive:kernels", WRITE): Entry(USER, "choose a kernel's end policy"),
    ("gpuhive:kernels", EXECUTE): Entry(USER, "launch, signal or clean up kernels"),
    ("gpuhive:api", READ): Entry(USER, "read the API document"),
    ("gpuhive:budgets", READ): Entry(USER, "see budgets (their own, their groups')"),
    ("gpuhive:budgets", WRITE): Entry(ADMIN, "set, change or remove budgets"),
    ("gpuhive:budgets", "statement"): Entry(OWNER, "read a budget's statement"),
    ("gpuhive:host-groups", READ): Entry(
        USER, "see host groups, their administrators and settings"
    ),
    ("gpuhive:host-groups", WRITE): Entry(
        GROUP_ADMIN, "set a host group's limits or no-show settings"
    ),
}


@dataclass(frozen=True)
class HostGroup:
    """A group of hosts (a lab, a department) and who administers them."""

    name: str
    admins: frozenset[str] = frozenset()  # user names
    admin_groups: frozenset[str] = frozenset()  # members of these groups administer it

    def administered_by(self, name: str, groups: Iterable[str]) -> bool:
        return name in self.admins or bool(self.admin_groups & frozenset(groups))

    def described(self) -> str:
        """Who administers it, in words ('alice, members of lab-heads')."""
        named = sorted(self.admins) + [f"members of {g}" for g in sorted(self.admin_groups)]
        return ", ".join(named) if named else "nobody yet"


def parse_host_groups(
    spec: Mapping[str, object], hosts: Iterable[HostDecl] = ()
) -> dict[str, HostGroup]:
    """`c.GpuHiveApp.host_groups` read: {group: {"admins": [...], "admin_groups": [...]}};
    every group a host names must be one of them (a typo would leave it unadministered)."""
    groups: dict[str, HostGroup] = {}
    for name, value in spec.items():
        if not isinstance(value, Mapping) or set(value) - {"admins", "admin_groups"}:
            raise Invalid(
                f"host_groups[{name!r}] must be {{'admins': [users], 'admin_groups': [groups]}}."
            )
        admins, admin_groups = value.get("admins", ()), value.get("admin_groups", ())
        if isinstance(admins, str) or isinstance(admin_groups, str):
            raise Invalid(f"host_groups[{name!r}]: admins and admin_groups are lists of names.")
        groups[str(name)] = HostGroup(
            str(name),
            frozenset(str(a) for a in admins),  # type: ignore[union-attr]
            frozenset(str(g) for g in admin_groups),  # type: ignore[union-attr]
        )
    for host in hosts:
        named = group_of(host)
        if named is not None and named not in groups:
            known = ", ".join(sorted(groups)) or "none"
            raise Invalid(
                f"Host {host.name} belongs to group {named!r}, which c.GpuHiveApp.host_groups "
                f"does not declare (declared: {known})."
            )
    return groups


def group_of(host: HostDecl) -> str | None:
    """The host group a configured host belongs to (its `group` key), if any."""
    value = host.extra.get("group")
    return str(value) if value else None


@dataclass
class Authority:
    """The declared policy with who administers: the site, and each host group (on the hosts
    as configured now)."""

    admin_users: frozenset[str] = frozenset()
    admin_groups: frozenset[str] = frozenset()
    groups: Mapping[str, HostGroup] = field(default_factory=dict)
    hosts: Callable[[], Iterable[HostDecl]] = tuple

    def site_admin(self, name: str, groups: Iterable[str]) -> bool:
        """Whether a user administers all of gpuhive (admin_users, admin_groups)."""
        return name in self.admin_users or bool(self.admin_groups & frozenset(groups))

    def host_group(self, host: str) -> HostGroup | None:
        for decl in self.hosts():
            if decl.name == host:
                name = group_of(decl)
                return None if name is None else self.groups.get(name, HostGroup(name))
        return None

    def group_name(self, host: str) -> str | None:
        """The name of the host group a configured host belongs to, if any."""
        group = self.host_group(host)
        return None if group is None else group.name

    def admin_hosts(self, name: str, groups: Iterable[str]) -> frozenset[str]:
        """The hosts a user administers as one of their groups' administrators."""
        mine = {g for g, group in self.groups.items() if group.administered_by(name, groups)}
        return self.hosts_of(mine)

    def hosts_of(self, groups: Iterable[str]) -> frozenset[str]:
        """The configured hosts of these host groups."""
        wanted = set(groups)
        return frozenset(h.name for h in self.hosts() if group_of(h) in wanted)

    def with_groups_administered(self, who: Identity, groups: Iterable[str]) -> Identity:
        """`who` administering these host groups too (the Hub's filtered admin scope)."""
        return replace(who, admin_hosts=who.admin_hosts | self.hosts_of(groups))

    # --- decisions -------------------------------------------------------------------

    def route(self, who: Identity, resource: str, action: str) -> None:
        """Refuse (403) what `who` may never do on `resource`, whatever the thing."""
        entry = entry_of(resource, action)
        if who.is_admin or entry.who in (USER, OWNER):
            return
        if entry.who == GROUP_ADMIN and who.admin_hosts:
            return
        also = (
            " (and a host group's administrators, on its hosts)" if entry.who == GROUP_ADMIN else ""
        )
        raise Forbidden(f"Only gpuhive admins may {entry.what}{also}; {who.name} is not one.")

    def require(
        self,
        who: Identity,
        resource: str,
        action: str,
        *,
        owner: str | None = None,
        hosts: Iterable[str] = (),
        thing: str = "",
    ) -> None:
        """Refuse (403) `who` the action on one thing (its owner, the hosts it is on), with
        who may do it instead."""
        entry = entry_of(resource, action)
        if entry.who == USER or who.is_admin:
            return
        if entry.who == ADMIN:
            raise Forbidden(f"Only gpuhive admins may {entry.what}; {who.name} is not one.")
        if entry.who in (HOLDER, OWNER) and owner is not None and owner == who.name:
            return
        on = sorted(set(hosts))
        if entry.who in (OWNER, GROUP_ADMIN) and on and set(on) <= who.admin_hosts:
            return
        raise Forbidden(self.refusal(who, entry, owner, on, thing))

    def refusal(
        self, who: Identity, entry: Entry, owner: str | None, hosts: list[str], thing: str
    ) -> str:
        """Why not, and who may instead: the owner, the hosts' group administrators, admins."""
        instead = [owner] if entry.who in (HOLDER, OWNER) and owner else []
        facts = [thing] if thing else []
        if entry.who in (OWNER, GROUP_ADMIN):
            for host in hosts:
                group = self.host_group(host)
                if host in who.admin_hosts:
                    continue
                if group is None:
                    if self.groups:  # a site without host groups: nothing to say
                        facts.append(f"{host} is in no host group")
                else:
                    facts.append(f"{host} belongs to host group {group.name}")
                    instead.append(f"{group.name}'s administrators ({group.described()})")
        instead.append("gpuhive admins")
        why = f": {'; '.join(facts)}" if facts else ""
        may = ", ".join(dict.fromkeys(instead))
        return f"{who.name} may not {entry.what}{why}. Who may: {may}."


def require(who: Identity, resource: str, action: str, *, owner: str | None = None) -> None:
    """`Authority.require` where no host decides (site admins only; owners and admins)."""
    Authority().require(who, resource, action, owner=owner)


def entry_of(resource: str, action: str) -> Entry:
    """The policy's entry; a route or service naming an undeclared pair is a bug."""
    try:
        return POLICY[(resource, action)]
    except KeyError:
        raise LookupError(f"gpuhive's policy declares no ({resource!r}, {action!r})") from None


def sees_hosts(who: Identity, hosts: Iterable[str]) -> bool:
    """Whether `who` administers every one of these hosts (site admin, or their group's)."""
    on = set(hosts)
    return who.is_admin or (bool(on) and on <= who.admin_hosts)
