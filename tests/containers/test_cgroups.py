"""Which container a process runs in, from /proc/PID/cgroup: what a user cannot forge (#29)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

import pytest

from jupyter_gpuhive.hosts.containers import (
    CGROUPS_OF,
    GPUHIVE,
    LABEL,
    ROOTLESS,
    UNATTRIBUTED,
    Container,
    SiteRule,
    attribute,
    cgroups_after_ps,
    container_of,
    parse_inspect,
    subuid_owner,
    subuid_ranges,
)
from jupyter_gpuhive.sim.users import ensure_user, is_root

A = "a" * 64
B = "b" * 64
V1 = "\n".join(f"{i}:{c}:/docker/{A}" for i, c in enumerate(["", "cpu", "memory", "pids"]))


def test_the_engines_own_cgroups_name_the_container() -> None:
    assert container_of(V1) == Container("docker", A)
    assert container_of(f"0::/system.slice/docker-{A}.scope\n") == Container("docker", A)
    assert container_of(f"0::/machine.slice/libpod-{A}.scope/container") == Container("podman", A)
    rootless = f"0::/user.slice/user-1001.slice/user@1001.service/user.slice/libpod-{A}.scope"
    assert container_of(rootless) == Container("podman", A, rootless_uid=1001)
    assert container_of("0::/user.slice/user-1001.slice/session-3.scope") is None
    assert container_of(f"0::/docker/{A[:12]}") is None  # only the full id at the fixed place


def test_a_user_cannot_name_a_rootful_container_from_their_own_cgroups() -> None:
    """Below user@UID.service a user creates cgroups with any name (systemd delegates it)."""
    mine = "0::/user.slice/user-1000.slice/user@1000.service/app.slice"
    assert container_of(f"{mine}/docker/{A}") is None  # not at the root: not the engine's
    # A name with a line break that passes for another hierarchy's line:
    assert container_of(f"{mine}/x\n7:memory:/docker/{A}") is None
    assert container_of(f"{mine}/x\n0::/docker/{A}") is None  # a hierarchy twice
    # ... or for another user's rootless container:
    other = f"/user.slice/user-1001.slice/user@1001.service/libpod-{A}.scope"
    assert container_of(f"{mine}/x\n9:zz:{other}") is None
    assert container_of(f"{V1}\n9:x:/docker/{B}") is None  # two containers: neither


def test_cgroup_lines_follow_their_ps_line() -> None:
    text = f"  12 12 root sleep 1\n={V1.replace(chr(10), chr(10) + '=')}\n  13 13 bob python\n"
    assert cgroups_after_ps(text) == {12: V1}
    assert cgroups_after_ps(text + f"  12 12 root x\n=0::/docker/{B}\n") == {}  # a pid twice


def test_inspect_lines_and_owner_rules() -> None:
    line = f'"{A}"\t"/train-1"\t"lab/torch:2"\t{{"gpuhive.owner":"alice","x":"1"}}'
    text = f"{line}\nnot json\t1\t2\t3\n@@rc 1\n@@uids\nbob:x:1001:1001::/home/bob:/bin/sh\n"
    found, names = parse_inspect(text, "docker")
    seen = found[A]
    assert (seen.name, seen.image, seen.labels["gpuhive.owner"]) == (
        "train-1",
        "lab/torch:2",
        "alice",
    )
    assert names == {1001: "bob"}

    raw = Container("docker", A)
    plain = SiteRule()
    assert (attribute(raw, seen, {}, plain, {}).source, attribute(raw, seen, {}, plain, {}).owner) == (
        UNATTRIBUTED, "root"
    )  # fmt: skip
    assert attribute(raw, seen, {}, SiteRule(unattributed="exempt"), {}).owner is None
    trusting = SiteRule("gpuhive.owner")
    assert (attribute(raw, seen, {}, trusting, {}).owner, attribute(raw, seen, {}, trusting, {}).source) == (
        "alice", LABEL
    )  # fmt: skip
    own = attribute(raw, seen, {"train-1": "carol"}, trusting, {})  # the job table wins
    assert (own.owner, own.source) == ("carol", GPUHIVE)
    gone = attribute(raw, None, {}, trusting, {})  # the engine did not know it
    assert (gone.owner, gone.source) == ("root", UNATTRIBUTED)
    rootless = attribute(Container("podman", B, 1001), None, {}, plain, {1001: "bob"})
    assert (rootless.owner, rootless.source) == ("bob", ROOTLESS)


def test_a_subordinate_uid_is_its_users_only_when_one_range_holds_it() -> None:
    ranges = subuid_ranges("alice:100000:65536\nbob:165536:65536\n# x\nmallory:165536:10\n")
    assert subuid_owner(100999, ranges) == "alice"
    assert subuid_owner(165540, ranges) is None  # two users' ranges: nobody's
    assert subuid_owner(231071, ranges) == "bob"
    assert subuid_owner(231072, ranges) is None
    assert subuid_owner(99999, ranges) is None


CGROUP2 = next(
    (
        p
        for p in (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup"))
        if (p / "cgroup.procs").exists()
    ),
    None,
)
# The user creates the cgroups after the '/': below her own user@UID.service, as systemd lets her.
HER_NAMES = {
    "not-at-the-root": "app.slice/docker/{a}",
    "a-system-scope": "app.slice/system.slice/docker-{a}.scope",
    "a-machine-scope": "machine.slice/libpod-{a}.scope",
    "anothers-slice": "user.slice/user-{other}.slice/user@{other}.service/libpod-{a}.scope",
}

# Prints its pid, waits until root moved it into her delegated cgroup, then (as her) makes the
# cgroup named $2 there, moves itself into it and sleeps.
MOVE_IN = 'echo $$; read go; mkdir -p -- "$1/$2" && echo $$ > "$1/$2/cgroup.procs" && echo moved && exec sleep 600'


@pytest.mark.parametrize("case", sorted(HER_NAMES))
def test_her_own_cgroups_named_like_an_engines_name_no_rootful_container_for_real(
    case: str,
) -> None:
    """A real process of a second user in cgroups she made and named herself. (Line breaks in
    a cgroup's name, the forgeries above, this kernel refuses: mkdir gives EINVAL; they stay
    text checks for kernels that allow them.)"""
    if not is_root() or CGROUP2 is None:
        pytest.skip("needs root and a writable cgroup2 hierarchy")
    her = ensure_user("cgmal")
    uid = her.pw_uid
    top = CGROUP2 / "user.slice"
    delegated = top / f"user-{uid}.slice" / f"user@{uid}.service"  # what systemd hands her
    made = [p for p in (top, delegated.parent, delegated) if not p.exists()]  # ours to remove
    delegated.mkdir(parents=True, exist_ok=True)
    for path in (delegated, delegated / "cgroup.procs", delegated / "cgroup.subtree_control"):
        os.chown(path, uid, her.pw_gid)
    name = HER_NAMES[case].format(a=A, other=uid + 1)
    proc = subprocess.Popen(
        ["runuser", "-u", her.pw_name, "--", "sh", "-c", MOVE_IN, "sh", str(delegated), name],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        assert proc.stdin is not None and proc.stdout is not None
        pid = int(proc.stdout.readline())
        (delegated / "cgroup.procs").write_text(f"{pid}\n")  # her login, as systemd does
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "moved"
        assert os.stat(f"/proc/{pid}").st_uid == uid
        # What the kill handler and the container owners read, as root, from /proc.
        out = subprocess.run(["sh", "-c", CGROUPS_OF, "sh", str(pid)], capture_output=True,
                             text=True, check=True).stdout  # fmt: skip
        text = cgroups_after_ps(out)[pid]
        assert f"/user.slice/user-{uid}.slice/user@{uid}.service/{name}" in text  # hers, named
        found = container_of(text)
        assert found is None or found.rootless_uid == uid, found  # never rootful, never another's
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        mine = [
            delegated.joinpath(*name.split("/")[:n]) for n in range(len(name.split("/")), 0, -1)
        ]
        for path in [*mine, *reversed(made)]:  # hers, deepest first, then what we made
            with contextlib.suppress(OSError):
                path.rmdir()
