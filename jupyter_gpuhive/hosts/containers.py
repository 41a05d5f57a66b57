"""Which container a GPU process runs in, and who answers for it.

The container comes from ``/proc/PID/cgroup``, which the kernel writes: a rootful engine puts
each container in a cgroup of its own at a fixed place (Docker: ``/docker/<id>`` with the
cgroupfs driver, ``/system.slice/docker-<id>.scope`` with systemd; Podman:
``/machine.slice/libpod-<id>.scope`` or ``/libpod_parent/libpod-<id>``), and rootless Podman
under the user's own slice (``/user.slice/user-<uid>.slice/user@<uid>.service/…/
libpod-<id>.scope``). Only these places count, matched on the whole path. Below
``user@<uid>.service`` a user may create cgroups with any name (systemd delegates that tree),
and a name may hold a line break that passes for another hierarchy's line: so a text that
names a user slice never names a rootful container, a rootless one only counts in the slice
of its own uid, and a text that names one hierarchy or controller twice names none.

Who answers for a container (`attribute`): gpuhive's own containers by the job table (a
running task of that host whose container name it has: names are unique per engine, labels
are not proof: anyone who may run containers sets any label); rootless Podman by the uid of
its slice; any other container by a label only when the site names one it trusts, else it is
"unattributed" and the site chooses whether that is a violation (blamed on the engine's owner,
root: never on the uid a container picked) or exempt.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from ..model import HostDecl
from .engines import DEFAULT_BINARY, engine_of
from .framing import HEX_AWK, unframe

_ID = r"[0-9a-f]{64}"
_ROOTFUL = (
    ("docker", re.compile(rf"/docker/({_ID})")),
    ("docker", re.compile(rf"/system\.slice/docker-({_ID})\.scope")),
    ("podman", re.compile(rf"/machine\.slice/libpod-({_ID})\.scope(?:/container)?")),
    ("podman", re.compile(rf"/libpod_parent/libpod-({_ID})(?:/container)?")),
)
_ROOTLESS = re.compile(
    rf"/user\.slice/user-(\d+)\.slice/user@\1\.service(?:/[^/]+)*/libpod-({_ID})\.scope"
    r"(?:/container)?"
)
_SLICE = re.compile(r"/user\.slice/user-(\d+)\.slice")
# A user name a trusted label may give (the POSIX portable set; no leading '-').
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}\Z")

# Who answered for a container (Container.source). SUBUID: a process whose uid lies in a
# user's subordinate range (/etc/subuid, root's file): a rootless container where the engine
# made no cgroup of its own (cgroup v1 without systemd), or any user namespace of that user.
GPUHIVE, ROOTLESS, LABEL, UNATTRIBUTED = "gpuhive", "rootless", "label", "unattributed"
SUBUID = "subuid"
# What an unattributed container is (the site's choice).
UNATTRIBUTED_LEVELS = ("violation", "exempt")
ENGINE_OWNER = "root"  # who runs a rootful engine's containers, whatever uid they show


@dataclass(frozen=True)
class Container:
    """The container a process runs in: from its cgroup (engine, id, the rootless uid), then
    from the engine (image, name, labels) and the attribution (owner, source)."""

    engine: str
    id: str
    rootless_uid: int | None = None
    image: str | None = None
    name: str | None = None
    labels: dict[str, str] = field(default_factory=dict, compare=False, hash=False)
    source: str | None = None  # GPUHIVE, ROOTLESS, LABEL, UNATTRIBUTED once attributed
    owner: str | None = None  # the user it is charged to (None: exempt)
    process_user: str | None = None  # the UNIX user the process runs as (never trusted)

    @property
    def short_id(self) -> str:
        return self.id[:12]

    def describe(self) -> str:
        """'container NAME (ID12, image IMAGE; owner: SOURCE)' for violation details."""
        if not self.id:
            return f"a user namespace of {self.owner} (uid {self.rootless_uid}; {SUBUID})"
        what = f"{self.name} ({self.short_id}" if self.name else f"{self.short_id} ("
        image = f"image {self.image}" if self.image else "image unknown"
        sep = ", " if self.name else ""
        return f"container {what}{sep}{image}; {self.source or UNATTRIBUTED})"

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "engine": self.engine,
            "image": self.image,
            "name": self.name,
            "owner": self.owner,
            "source": self.source,
        }


def container_of(cgroup: str) -> Container | None:
    """The container named by a ``/proc/PID/cgroup`` text, or None (none, or not trusted)."""
    hierarchies: set[str] = set()
    controllers: set[str] = set()
    found: set[tuple[str, str, int | None]] = set()
    slices: set[str] = set()  # the uids of the user slices the text names
    for line in cgroup.split("\n"):
        if not line:
            continue
        hid, sep1, rest = line.partition(":")
        names, sep2, path = rest.partition(":")
        if not (sep1 and sep2 and hid.isdigit()):
            return None  # not a line the kernel wrote: part of a forged name
        if hid in hierarchies or (names and names in controllers):
            return None
        hierarchies.add(hid)
        controllers.add(names)
        slices.update(_SLICE.findall(path))
        for engine, pattern in _ROOTFUL:
            match = pattern.fullmatch(path)
            if match:
                found.add((engine, match.group(1), None))
        rootless = _ROOTLESS.fullmatch(path)
        if rootless:
            found.add(("podman", rootless.group(2), int(rootless.group(1))))
    if len(found) != 1:
        return None  # none, or two that disagree
    ((engine, cid, uid),) = found
    # A rootful container is never in a user's slice, and a rootless one only in its own: a
    # line break in a name the user chose under their slice cannot add another's container.
    if (uid is None and slices) or (uid is not None and slices != {str(uid)}):
        return None
    return Container(engine, cid, uid)


def cgroups_after_ps(text: str) -> dict[int, str]:
    """The probe's cgroup files, each framed on one line ('=x' and hex, `HEX_AWK`'s `cg`)
    after its process's `ps` line, as {pid: text}. An unframed line counts for nothing; a
    PID that comes twice has none."""
    found: dict[int, list[str]] = {}
    twice: set[int] = set()
    pid = None
    for line in text.split("\n"):
        if line.startswith("="):
            cgroup = unframe(line[1:])
            if pid is not None and cgroup is not None:
                found.setdefault(pid, []).append(cgroup)
            continue
        parts = line.split(None, 2)
        pid = int(parts[0]) if len(parts) >= 2 and parts[0].isdigit() else None
        if pid is not None and pid in found:
            twice.add(pid)
    return {p: "".join(texts) for p, texts in found.items() if p not in twice}


@dataclass(frozen=True)
class SiteRule:
    """The site's rule for rootful containers gpuhive did not start."""

    trusted_label: str | None = None  # e.g. 'gpuhive.owner'; None: no label is trusted
    unattributed: str = "violation"  # or 'exempt'

    def __post_init__(self) -> None:
        if self.unattributed not in UNATTRIBUTED_LEVELS:
            raise ValueError(
                f"unattributed containers must be one of {', '.join(UNATTRIBUTED_LEVELS)}, "
                f"not {self.unattributed!r}"
            )


def attribute(
    found: Container,
    inspected: Container | None,
    own: Mapping[str, str],
    rule: SiteRule,
    uid_names: Mapping[int, str],
) -> Container:
    """Who answers for a container: `found` from the cgroup, `inspected` from the engine (None
    when it could not tell), `own` gpuhive's running containers on the host by name -> owner,
    `uid_names` the host's user names of rootless uids."""
    seen = replace(found, image=inspected.image, name=inspected.name, labels=inspected.labels) if (
        inspected is not None
    ) else found  # fmt: skip
    if found.rootless_uid is not None:
        name = uid_names.get(found.rootless_uid, str(found.rootless_uid))
        return replace(seen, source=ROOTLESS, owner=name)
    if seen.name is not None and seen.name in own:
        return replace(seen, source=GPUHIVE, owner=own[seen.name])
    label = seen.labels.get(rule.trusted_label) if rule.trusted_label else None
    if label is not None and _USER.match(label):
        return replace(seen, source=LABEL, owner=label)
    owner = ENGINE_OWNER if rule.unattributed == "violation" else None
    return replace(seen, source=UNATTRIBUTED, owner=owner)


# One line per container: tab-separated JSON values (JSON strings hold no raw tab or newline).
INSPECT_FORMAT = "{{json .Id}}\t{{json .Name}}\t{{json .Config.Image}}\t{{json .Config.Labels}}"


def inspect_command(words: Sequence[str], ids: Iterable[str], uids: Iterable[int] = ()) -> str:
    """One shell command: the engine's ``inspect`` of `ids` (a line each, the gone left out)
    and its exit status, then ``getent passwd`` of `uids`, behind marks."""
    ids = sorted(set(ids))
    parts = []
    if ids:
        argv = [*words, "inspect", "--type", "container", "--format", INSPECT_FORMAT, *ids]
        parts.append(f'{shlex.join(argv)} 2>/dev/null; echo "@@rc $?"')
    parts.append("echo @@uids")
    uids = sorted(set(uids))
    if uids:
        parts.append(f"getent passwd {' '.join(str(u) for u in uids)}")
    return "; ".join(parts) + "; true"


def _inspected(line: str, engine: str) -> Container | None:
    try:
        cid, name, image, labels = (json.loads(v) for v in line.split("\t"))
    except ValueError:
        return None
    if not isinstance(cid, str) or not re.fullmatch(_ID, cid):
        return None
    if not isinstance(labels, dict):
        labels = {}
    return Container(
        engine,
        cid,
        image=image if isinstance(image, str) and image else None,
        name=name.lstrip("/") or None if isinstance(name, str) else None,
        labels={str(k): str(v) for k, v in labels.items()},
    )


def parse_inspect(text: str, engine: str) -> tuple[dict[str, Container], dict[int, str]]:
    """What `inspect_command` printed: containers by id, user names by uid."""
    data, _, users = f"\n{text}".partition("\n@@uids\n")
    found = {}
    for line in data.splitlines():
        seen = _inspected(line, engine) if line.count("\t") == 3 else None
        if seen is not None:
            found[seen.id] = seen
    names: dict[int, str] = {}
    for line in users.splitlines():
        parts = line.split(":")
        if len(parts) >= 3 and parts[2].isdigit():
            names[int(parts[2])] = parts[0]
    return found, names


def engine_words(decl: HostDecl | None, engine: str) -> list[str]:
    """The command of `decl`'s engine for containers of `engine`: its configured binary and
    socket when the host names that engine, else the engine's usual binary."""
    configured = engine_of(decl) if decl is not None else None
    if configured is not None and configured.engine == engine:
        return configured.words()
    return [DEFAULT_BINARY.get(engine, f"/usr/bin/{engine}")]


# For the kill step: each pid's line, then its cgroup file framed (the form `cgroups_after_ps`
# reads). Only all-digit pids are read.
CGROUPS_OF = (
    "LC_ALL=C awk '"
    + HEX_AWK
    + 'BEGIN { for (a = 1; a < ARGC; a++) if (ARGV[a] ~ /^[0-9]+$/) { print ARGV[a] " 0 -"\n'
    + '  cg(ARGV[a], 1) }\n  exit }\' "$@"'
)


def remove_command(words: Sequence[str], ids: Iterable[str], grace: float = 0.0) -> str:
    """Stop (SIGTERM, then SIGKILL after `grace` seconds) and remove the containers: the
    engine would restart a container whose process alone was killed (``--restart``)."""
    ids = sorted(set(ids))
    stop = shlex.join([*words, "stop", "--time", str(int(grace)), *ids])
    remove = shlex.join([*words, "rm", "-f", *ids])
    return f"{stop} >/dev/null 2>&1; {remove}"


def subuid_ranges(text: str) -> list[tuple[int, int, str]]:
    """``/etc/subuid`` lines (``user:start:count``) as (start, count, user)."""
    ranges = []
    for line in text.splitlines():
        parts = line.strip().split(":")
        if len(parts) == 3 and parts[0] and parts[1].isdigit() and parts[2].isdigit():
            ranges.append((int(parts[1]), int(parts[2]), parts[0]))
    return ranges


def subuid_owner(uid: int, ranges: Sequence[tuple[int, int, str]]) -> str | None:
    """The one user whose subordinate range holds `uid` (None: nobody's, or two users')."""
    owners = {user for start, count, user in ranges if start <= uid < start + count}
    return owners.pop() if len(owners) == 1 else None
