"""Which container a process runs in, from /proc/PID/cgroup: what a user cannot forge (#29)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
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
from jupyter_gpuhive.hosts.probe import PROBE_COMMAND, HostSample, parse_probe
from jupyter_gpuhive.model import utcnow
from jupyter_gpuhive.sim.cluster import LocalSimHost
from jupyter_gpuhive.sim.inventory import load_config, preset
from jupyter_gpuhive.sim.users import ensure_user, is_root
from tests.support.hostile import hostile_process, sleeper_argv

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


def framed(cgroup: str) -> str:
    """A cgroup file as the probe sends it: one line, '=x' and its bytes in hex."""
    return "=x" + cgroup.encode().hex()


def test_cgroup_lines_follow_their_ps_line_framed_only() -> None:
    text = f"  12 12 root sleep 1\n{framed(V1)}\n  13 13 bob python\n"
    assert cgroups_after_ps(text) == {12: V1}
    assert cgroups_after_ps(text + f"  12 12 root x\n{framed(V1)}\n") == {}  # a pid twice
    # Unframed text counts for nothing: only the probe's framed field names a container.
    assert cgroups_after_ps(f"  14 14 eve x\n=0::/docker/{B}\n=x{B}zz\n") == {}


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

# Waits until root moved it into her delegated cgroup ($1, as her login would), then (as her)
# makes the cgroup named $2 there, moves itself into it and sleeps.
MOVE_IN = (
    'until grep -q "^0::.*/user@$(id -u)\\.service$" /proc/$$/cgroup; do sleep 0.05; done\n'
    'mkdir -p -- "$1/$2" && echo $$ > "$1/$2/cgroup.procs" && exec sleep 600'
)


@contextlib.contextmanager
def delegated_to(user: str) -> Iterator[tuple[int, Path]]:
    """Her uid and the cgroup systemd would hand her (user@UID.service, hers to write), made
    here and removed after with all she made below it."""
    if not is_root() or CGROUP2 is None:
        pytest.skip("needs root and a writable cgroup2 hierarchy")
    her = ensure_user(user)
    top = CGROUP2 / "user.slice"
    delegated = top / f"user-{her.pw_uid}.slice" / f"user@{her.pw_uid}.service"
    made = [p for p in (top, delegated.parent, delegated) if not p.exists()]  # ours to remove
    delegated.mkdir(parents=True, exist_ok=True)
    for path in (delegated, delegated / "cgroup.procs", delegated / "cgroup.subtree_control"):
        os.chown(path, her.pw_uid, her.pw_gid)
    try:
        yield her.pw_uid, delegated
    finally:
        hers = sorted((p for p in delegated.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
        for path in [*hers, *reversed(made)]:  # hers, deepest first, then what we made
            with contextlib.suppress(OSError):
                path.rmdir()


def moved_in(pid: int, delegated: Path, name: str | bytes) -> str:
    """Put her `pid` into her delegated cgroup and wait until it moved itself into `name`;
    its cgroup file as root reads it."""
    (delegated / "cgroup.procs").write_text(f"{pid}\n")
    wanted = os.fsencode(name).split(b"/")[-1]
    text = b""
    for _ in range(200):
        text = Path(f"/proc/{pid}/cgroup").read_bytes()
        if wanted in text:
            return text.decode(errors="replace")
        time.sleep(0.05)
    raise AssertionError(f"{pid} did not move into {name!r}: {text!r}")


@pytest.mark.parametrize("case", sorted(HER_NAMES))
def test_her_own_cgroups_named_like_an_engines_name_no_rootful_container_for_real(
    case: str,
) -> None:
    """A real process of a second user in cgroups she made and named herself. (Line breaks in
    a cgroup's name, the forgeries above, this kernel refuses: mkdir gives EINVAL; they stay
    text checks for kernels that allow them.)"""
    with delegated_to("cgmal") as (uid, delegated):
        name = HER_NAMES[case].format(a=A, other=uid + 1)
        her = ensure_user("cgmal")
        proc = subprocess.Popen(["sh", "-c", MOVE_IN, "sh", str(delegated), name], cwd="/",
                                env={"PATH": "/usr/bin:/bin"}, user=uid, group=her.pw_gid,
                                extra_groups=[], start_new_session=True)  # fmt: skip
        try:
            moved_in(proc.pid, delegated, name)
            # What the kill handler and the container owners read, as root, from /proc.
            out = subprocess.run(["sh", "-c", CGROUPS_OF, "sh", str(proc.pid)],
                                 capture_output=True, text=True, check=True).stdout  # fmt: skip
            text = cgroups_after_ps(out)[proc.pid]
            assert f"/user.slice/user-{uid}.slice/user@{uid}.service/{name}" in text  # hers
            found = container_of(text)
            assert found is None or found.rootless_uid == uid, found  # never rootful nor another's
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


# Her cgroups' names hold what the probe's answer is made of: a section mark, a `ps` line and a
# cgroup line of their own, a carriage return, bytes that are not UTF-8; 'docker' makes the
# probe send her cgroup file; the last one claims a (rootless) container, of her own uid only.
HOSTILE_CGROUP = (
    b"app.slice/docker @@gpuhive:ps 0/ 1 1 0 root xff\r/=0::\xff\xfe =x30/libpod-"
    + A.encode()
    + b".scope"
)


def test_her_hostile_cgroup_names_leave_the_probes_reading_as_it_was(tmp_path: Path) -> None:
    """A real GPU process of a second user in cgroups she named to look like the probe's own
    lines: the probe sends her cgroup file framed (no byte of her names in its answer), her
    process stays hers with its command line, and a bystander's reading does not change."""
    sim = LocalSimHost("hc1", tmp_path / "sim", preset("a100x4", "hc1"))
    gpus = load_config(sim.config_path).gpus
    with (
        delegated_to("cgmal") as (uid, delegated),
        hostile_process(sim.name, [0], user="gh-alice", argv=sleeper_argv("mine"),
                        config=sim.config_path) as alice,
    ):  # fmt: skip
        before = probe(sim)
        argv = ["sh", "-c", MOVE_IN, "sh", str(delegated), HOSTILE_CGROUP]
        with hostile_process(sim.name, [1], user="cgmal", argv=argv, config=sim.config_path) as her:
            moved_in(her.pid, delegated, HOSTILE_CGROUP)
            raw = probe_bytes(sim)
            after = parse_probe(sim.name, raw.decode(errors="replace"), utcnow())
    for part in HOSTILE_CGROUP.split(b"/"):
        assert part not in raw, part  # framed on the host: none of her bytes as text
    assert b"\n=x" in raw  # ... and sent (her cgroup names 'docker')
    mine = next(p for p in after.processes if p.pid == her.pid)
    assert (mine.user, mine.command, mine.pgid, mine.gpu_uuid) == (
        "cgmal", "sleep 600", her.pid, gpus[1].uuid
    )  # fmt: skip
    assert mine.container in (None, Container("podman", A, rootless_uid=uid))  # hers at most
    assert [p for p in after.processes if p.pid == alice.pid] == [
        p for p in before.processes if p.pid == alice.pid
    ]
    assert len(after.processes) == len(before.processes) + 1
    assert after.gpu_error is None and after.lost == () and len(after.gpus) == 4


def probe(sim: LocalSimHost) -> HostSample:
    """One run of the real probe command on the simulated host, parsed."""
    return parse_probe(sim.name, probe_bytes(sim).decode(errors="replace"), utcnow())


def probe_bytes(sim: LocalSimHost) -> bytes:
    """The real probe command's answer on the simulated host, as root reads it."""
    return subprocess.run(["sh", "-c", PROBE_COMMAND], env=sim.env({}), capture_output=True,
                          check=True, timeout=60).stdout  # fmt: skip


def test_a_probe_inside_a_container_sees_its_neighbours_as_plain_processes(tmp_path: Path):
    """Where the probe itself runs in a container that shares the host's cgroup namespace
    (gpuhive's own tests in a Docker container, a monitor deployed in one), every process
    there names that container in its cgroup file. A process in the probe's own cgroup is no
    container for it (before, each was, so protection judged none of them as its user's);
    a process in another engine's cgroup still is. Real processes in real cgroups."""
    if not is_root() or CGROUP2 is None:
        pytest.skip("needs root and a writable cgroup2 hierarchy")
    sim = LocalSimHost("pc1", tmp_path / "sim", preset("a100x4", "pc1"))
    ours, theirs = CGROUP2 / "docker" / ("b" * 64), CGROUP2 / "docker" / ("c" * 64)
    made = [p for p in (ours.parent, ours, theirs) if not p.exists()]
    for path in made:
        path.mkdir()
    try:
        with (
            hostile_process(sim.name, [0], user="gh-alice", argv=sleeper_argv("near"),
                            config=sim.config_path) as near,
            hostile_process(sim.name, [1], user="gh-bob", argv=sleeper_argv("far"),
                            config=sim.config_path) as far,
        ):  # fmt: skip
            (ours / "cgroup.procs").write_text(f"{near.pid}\n")
            (theirs / "cgroup.procs").write_text(f"{far.pid}\n")
            inside = 'echo $$ > "$1/cgroup.procs" && exec sh -c "$2"'
            raw = subprocess.run(
                ["sh", "-c", inside, "sh", str(ours), PROBE_COMMAND], env=sim.env({}),
                capture_output=True, check=True, timeout=60,
            ).stdout  # fmt: skip
            seen = parse_probe(sim.name, raw.decode(errors="replace"), utcnow())
        by_pid = {p.pid: p for p in seen.processes}
        assert by_pid[near.pid].user == "gh-alice" and by_pid[near.pid].container is None
        assert by_pid[far.pid].user == "gh-bob"
        assert by_pid[far.pid].container == Container("docker", "c" * 64)
    finally:
        for path in reversed(made):
            with contextlib.suppress(OSError):
                path.rmdir()
