"""Container jobs without an engine: the host's settings, the allow-lists and the run line."""

from __future__ import annotations

import shlex
import subprocess

import pytest

from jupyter_gpuhive.errors import Invalid
from jupyter_gpuhive.hosts.config import parse_host
from jupyter_gpuhive.hosts.engines import Engine, Mount, parse_engine, run_line
from jupyter_gpuhive.jobs import containers
from jupyter_gpuhive.jobs.tasks import TaskSpec, TemplateError
from jupyter_gpuhive.model import HostDecl
from jupyter_gpuhive.model.containers import ContainerSpec
from jupyter_gpuhive.model.jobs import Task

SITE = {
    "engine": "docker",
    "images": ["lab/*", "registry.example:5000/team/torch:2.*"],
    "mounts": ["/data", {"path": "/opt/venv", "read_only": True}],
    "gpu_flags": "nvidia",
}


def decl(spec: object = SITE, name: str = "gpu1") -> HostDecl:
    return HostDecl(name=name, transport="local", extra={"containers": spec})


def task(**changes: object) -> Task:
    values: dict[str, object] = dict(
        id=1, job_id=7, index=0, owner="alice", host="gpu1", address="localhost", role="task",
        gpus=("GPU-aaaa", "MIG-bbbb"), gpu_indices=(0, 1), command="python train.py 'x y'",
        env={"CUDA_VISIBLE_DEVICES": "GPU-aaaa,MIG-bbbb", "TOKEN": "s3cret"}, workdir=None,
        variables={}, session="gpuhive-7-train-0", log_path="~/.gpuhive/jobs/7-0.log",
        exit_path="~/.gpuhive/jobs/7-0.exit",
        container=ContainerSpec("lab/torch:1", ("/data",), reservation=3),
    )  # fmt: skip
    values.update(changes)
    return Task(**values)  # type: ignore[arg-type]


def words_of(line: str) -> list[str]:
    """The words bash makes of a run line (its $(…) and $HOME left as written)."""
    return shlex.split(
        line.replace('"$HOME"', "HOME_DIR").replace('"$(/usr/bin/id -u):$(/usr/bin/id -g)"', "U:G")
    )


def test_host_settings_are_checked_and_defaulted() -> None:
    engine = parse_engine("gpu1", {"engine": "podman"})
    assert (engine.binary, engine.gpu_flags, engine.images) == ("/usr/bin/podman", "cdi", ())
    assert parse_engine("gpu1", SITE).mount("/opt/venv/") == Mount("/opt/venv", True)
    bad = [
        ({"engine": "lxc"}, "engine"),
        ({"binary": "docker"}, "absolute"),
        ({"gpu_flags": "all"}, "gpu_flags"),
        ({"mounts": ["/var/run/docker.sock"]}, "may not be mounted"),
        ({"mounts": ["/"]}, "may not be mounted"),
        ({"mounts": ["/data:/etc"]}, "absolute"),
        ({"mounts": ["/data/../etc"]}, ".."),
        ({"privileged": True}, "unknown key"),
        ({"engine": "podman", "socket": "unix:///x.sock"}, "Docker only"),
        ({"network": "bridge"}, "network must be one of default, none, host"),
        ({"init_path": "/usr/bin/tini"}, "Podman only"),
        ("docker", "mapping"),
    ]
    for spec, words in bad:
        with pytest.raises(Invalid, match=words):
            parse_engine("gpu1", spec)


def test_the_run_line_gives_the_reserved_gpus_and_nothing_more() -> None:
    engine = parse_engine("gpu1", SITE)
    t = task()
    run = containers.task_run(
        engine, t, image="lab/torch:1", mounts=[Mount("/data")], env_path="./.gpuhive/x.env",
        account="alice", reservation=3,
    )  # fmt: skip
    words = words_of(run)
    assert words[:3] == ["/usr/bin/docker", "run", "--rm"]
    assert words[words.index("--gpus") + 1] == '"device=GPU-aaaa,MIG-bbbb"'
    assert words[words.index("--user") + 1] == "U:G"
    assert words[words.index("--cap-drop") + 1] == "ALL"
    assert words[words.index("--security-opt") + 1] == "no-new-privileges"
    assert words[words.index("--name") + 1] == "gpuhive-7-train-0"
    assert words[words.index("--env-file") + 1] == "./.gpuhive/x.env"
    labels = {words[i + 1] for i, w in enumerate(words) if w == "--label"}
    assert labels == {"gpuhive=1", "gpuhive.owner=alice", "gpuhive.job=7", "gpuhive.task=0",
                      "gpuhive.reservation=3"}  # fmt: skip
    volumes = [words[i + 1] for i, w in enumerate(words) if w == "-v"]
    assert volumes == ["HOME_DIR:HOME_DIR", "/data:/data"]
    assert words[-4:] == ["lab/torch:1", "sh", "-c", "python train.py 'x y'"]
    # Never generated, whatever the job says; its env values stay off the command line.
    for forbidden in ("--privileged", "--pid", "--ipc", "--cap-add", "--device", "s3cret"):
        assert not any(w.startswith(forbidden) for w in words), forbidden
    assert words[words.index("--network") + 1] == "host"  # the site's default: as bare tasks


def test_gpu_flags_follow_the_host_setting() -> None:
    t = task()
    common = dict(image="lab/a", mounts=[], env_path="e", account="alice")
    cdi = words_of(containers.task_run(Engine(engine="podman", gpu_flags="cdi"), t, **common))
    assert [cdi[i + 1] for i, w in enumerate(cdi) if w == "--device"] == [
        "nvidia.com/gpu=GPU-aaaa", "nvidia.com/gpu=MIG-bbbb"]  # fmt: skip
    assert cdi[cdi.index("--userns") + 1] == "keep-id"
    none = words_of(containers.task_run(Engine(gpu_flags="none"), t, **common, host_network=True))
    assert "--gpus" not in none and "--device" not in none
    assert none[none.index("--network") + 1] == "host"
    podman = Engine(engine="podman", gpu_flags="none", network="none", init_path="/usr/bin/tini")
    quiet = words_of(containers.task_run(podman, t, **common))
    assert quiet[quiet.index("--network") + 1] == "none"
    engine_default = words_of(containers.task_run(Engine(network="default"), t, **common))
    assert "--network" not in engine_default
    assert quiet[quiet.index("--init-path") + 1] == "/usr/bin/tini"
    # A site's home folder names the owner's UNIX account (`unix_users`), not the gpuhive user.
    scratch = Engine(home="/scratch/{user}")
    mapped = words_of(containers.task_run(scratch, t, **{**common, "account": "hs-alice"}))
    assert mapped[mapped.index("-v") + 1] == "/scratch/hs-alice:/scratch/hs-alice"


def test_hostile_values_stay_single_words_in_bash(tmp_path) -> None:
    """An image, a workdir and a command full of shell syntax reach the engine as one word each
    (bash runs the line against a fake engine that prints its argv)."""
    fake = tmp_path / "engine"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
    fake.chmod(0o755)
    engine = Engine(binary=str(fake), gpu_flags="none")
    nasty = "$(touch /tmp/pwned); `id`; echo ' \" \\"
    t = task(command=nasty, workdir=f"~/w {nasty}")
    line = run_line(engine, image="lab/a", name=t.session, owner="alice", argv=["sh", "-c", nasty],
                    uuids=["GPU-1"], env_file=f"e {nasty}", workdir=t.workdir)  # fmt: skip
    out = subprocess.run(["bash", "-c", line], capture_output=True, text=True, check=True,
                         env={"HOME": "/home/alice", "PATH": "/usr/bin:/bin"}).stdout  # fmt: skip
    argv = out.split("\n")[:-1]
    assert argv[-1] == nasty and argv[-4:-1] == ["lab/a", "sh", "-c"]
    assert f"e {nasty}" in argv
    assert f"/home/alice/w {nasty}" in argv
    assert "HOME=/home/alice" in argv


def test_images_mounts_and_flags_are_refused_in_words() -> None:
    hosts = {"gpu1": decl(), "gpu2": HostDecl(name="gpu2")}
    ok = containers.requested("lab/torch:1", ["/data/"], 4, ["gpu1"], hosts, "pytorch")
    assert ok == ContainerSpec("lab/torch:1", ("/data/",), 4, True)
    assert containers.requested(None, [], None, ["gpu2"], hosts) is None
    cases = [
        ("--privileged", [], ["gpu1"], "engine flags are never accepted"),
        ("lab/a --privileged", [], ["gpu1"], "engine flags"),
        ("ubuntu:22.04", [], ["gpu1"], "not allowed on host gpu1 .allowed: lab/"),
        ("lab/a", ["/etc"], ["gpu1"], "Mount '/etc' is not allowed"),
        ("lab/a", ["/var/run/docker.sock"], ["gpu1"], "not allowed"),
        ("lab/a", ["data"], ["gpu1"], "absolute host path"),
        ("lab/a", [], ["gpu2"], "Host gpu2 runs no container engine"),
        ("ubuntu", [], None, "not allowed on host gpu1"),
    ]
    for image, mounts, on, words in cases:
        with pytest.raises(Invalid, match=words):
            containers.requested(image, mounts, None, on, hosts)
    with pytest.raises(Invalid, match="give 'image' too"):
        containers.requested(None, ["/data"], None, ["gpu1"], hosts)


def test_env_file_is_verbatim_and_refuses_line_breaks() -> None:
    spec = TaskSpec("gpu1", "a", (), "true", {"A": "it's $HOME", "B": ""}, {})
    assert containers.env_file(spec, {"H": "1"}) == "H=1\nA=it's $HOME\nB=\n"
    with pytest.raises(TemplateError, match="line breaks"):
        containers.env_file(TaskSpec("gpu1", "a", (), "true", {"A": "x\nB=y"}, {}))


def test_start_line_and_removal_need_the_host_engine() -> None:
    t = task()
    paths = ("./l.log", "./l.exit", "./l.env")
    extra = 'export R=1\nexport D="$HOME"/\'c p\'\nmkdir -p -- "$D" || exit 1\n'
    line, env = containers.start_line(t, decl(), paths, "alice", clean=True, extra_env=extra)
    assert "tee -i -a ./l.log" in line and "mv -f -- ./l.exit.tmp ./l.exit" in line
    assert "run --rm" in line and "s3cret" not in line
    assert "TOKEN=s3cret\n" in env and "R=1" not in env  # R comes from the host's shell
    with pytest.raises(TemplateError, match="runs no container engine"):
        containers.start_line(t, HostDecl(name="gpu1"), paths, "alice", clean=True)
    with pytest.raises(TemplateError, match="not allowed"):
        containers.start_line(
            task(container=ContainerSpec("evil/x")), decl(), paths, "alice", clean=True
        )
    assert containers.removal(decl(), [t, task(container=None)]) == (
        "/usr/bin/docker rm -f gpuhive-7-train-0 >/dev/null 2>&1 || true"
    )
    assert containers.removal(decl(), [task(container=None)]) is None


def test_a_bad_containers_entry_is_refused_with_the_configuration() -> None:
    assert parse_host({"name": "gpu1", "containers": SITE}).extra["containers"] == SITE
    with pytest.raises(Invalid, match=r"Host gpu1: containers: /var/run/docker\.sock may not"):
        parse_host({"name": "gpu1", "containers": {"mounts": ["/var/run/docker.sock"]}})


def test_gpuhives_own_env_lines_run_on_the_host_and_reach_the_container(tmp_path) -> None:
    """The preemption lines (exports with "$HOME", a mkdir) run before the engine, which gets
    their names with `-e NAME`: run the task's script with a stand-in for docker."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    engine = bin_dir / "docker"
    engine.write_text('#!/bin/sh\nprintf "%s\\n" "$@"; echo "R=$R D=$D"\n')
    engine.chmod(0o755)
    site = {**SITE, "binary": str(engine)}
    extra = 'export R=1\nexport D="$HOME"/\'c p\'\nmkdir -p -- "$D" || exit 1\n'
    paths = ("./l.log", "./l.exit", "./l.env")
    line, _env = containers.start_line(
        task(), decl(site), paths, "alice", clean=False, extra_env=extra
    )
    env = {"HOME": str(tmp_path), "PATH": f"{bin_dir}:/usr/bin:/bin"}
    subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, check=True, timeout=30)
    out = (tmp_path / "l.log").read_text().splitlines()
    assert out[-1] == f"R=1 D={tmp_path}/c p"
    assert (tmp_path / "c p").is_dir()
    passed = [out[i + 1] for i, word in enumerate(out) if word == "-e"]
    assert {"R", "D"} <= set(passed)
    assert (tmp_path / "l.exit").read_text().strip() == "0"
