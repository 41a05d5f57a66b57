"""Container jobs: checking a job's image and mounts against its hosts' engines, and the script
that runs one task in its image through the host's task runner (issue #29).

The task stays a task of its owner like any other (log, exit status, stop); only what its
script runs changes: the engine's `run` in the foreground instead of `bash -c COMMAND`.
The job's env goes to the container through an env file (0600, the owner's), never argv.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import Invalid
from ..hosts.engines import IMAGE, Engine, Mount, engine_of, labels, remove_line, run_line
from ..hosts.environment import host_env
from ..model import HostDecl
from ..model.containers import ContainerSpec
from ..model.jobs import Job, Task
from .commands import task_script
from .tasks import TaskSpec, TemplateError
from .template import IDENTIFIER

# Templates whose tasks talk to each other across hosts: their containers use the host network.
DISTRIBUTED = frozenset({"pytorch", "tensorflow"})
MAX_MOUNTS = 16
EXPORTED = re.compile(r"^export ([A-Za-z_][A-Za-z0-9_]*)=", re.MULTILINE)


def check_image(image: str) -> str:
    """A syntactically valid image reference (never an engine flag), else Invalid (422)."""
    if not isinstance(image, str) or not IMAGE.match(image):
        raise Invalid(
            f"'image' must be an image reference such as 'lab/pytorch:2.3', not {image!r}; "
            "engine flags are never accepted."
        )
    return image


def check_on_host(
    host: str, engine: Engine | None, image: str, mounts: Sequence[str]
) -> tuple[Mount, ...]:
    """The mounts a job may use on `host` with `image`; Invalid (422) saying what is refused."""
    if engine is None:
        raise Invalid(f"Host {host} runs no container engine for gpuhive; leave 'image' out.")
    if not engine.allows_image(image):
        allowed = ", ".join(engine.images) or "none"
        raise Invalid(f"Image {image!r} is not allowed on host {host} (allowed: {allowed}).")
    chosen: list[Mount] = []
    for path in mounts:
        mount = engine.mount(path) if isinstance(path, str) else None
        if mount is None:
            offered = ", ".join(m.path for m in engine.mounts) or "none"
            raise Invalid(
                f"Mount {path!r} is not allowed on host {host} (allowed: {offered}); "
                "your home is always mounted."
            )
        if mount not in chosen:
            chosen.append(mount)
    return tuple(chosen)


def check_mount_list(mounts: Sequence[str]) -> tuple[str, ...]:
    """The shape of a job's mounts: a short list of absolute paths."""
    if len(mounts) > MAX_MOUNTS:
        raise Invalid(f"'mounts' lists at most {MAX_MOUNTS} paths.")
    for path in mounts:
        if not isinstance(path, str) or not path.startswith("/"):
            raise Invalid(f"Each mount must be an absolute host path, not {path!r}.")
    return tuple(mounts)


def env_file(task: TaskSpec, host_env: Mapping[str, str] | None = None) -> str:
    """The container's env file: `NAME=value` lines, read verbatim by docker and podman.

    That format has no quoting, so a value with a line break cannot travel in it: refused.
    """
    lines = []
    for name, value in {**(host_env or {}), **task.env}.items():
        if not IDENTIFIER.match(name):
            raise TemplateError(f"environment variable name {name!r} is not valid")
        if "\n" in value or "\r" in value or "\0" in value:
            raise TemplateError(
                f"environment variable {name}: a container job's values cannot hold line breaks"
            )
        lines.append(f"{name}={value}\n")
    return "".join(lines)


def task_run(
    engine: Engine,
    task: Task,
    *,
    image: str,
    mounts: Sequence[Mount],
    env_path: str,
    account: str,
    reservation: int | None = None,
    host_network: bool = False,
    passed: Sequence[str] = (),
) -> str:
    """The engine `run` line of one task: its image, GPUs, owner, labels and mounts;
    `account`: the owner's UNIX account (the engine's `{user}` home); `passed`: variables the
    container takes from the running shell by name."""
    spec = task.spec()
    return run_line(
        engine,
        image=image,
        name=task.session,
        owner=account,
        argv=["sh", "-c", spec.command],
        uuids=list(task.gpus),
        env_file=env_path,
        workdir=task.workdir,
        mounts=mounts,
        label_values=labels(task.owner, job=task.job_id, task=task.index, reservation=reservation),
        host_network=host_network,
        extra_env=passed,
    )


def engines(decls: Mapping[str, HostDecl]) -> dict[str, Engine]:
    """Each host's engine, for the hosts that have one."""
    found = {name: engine_of(decl) for name, decl in decls.items()}
    return {name: engine for name, engine in found.items() if engine is not None}


def requested(
    image: str | None,
    mounts: Sequence[str],
    reservation: int | None,
    hosts: Sequence[str] | None,
    decls: Mapping[str, HostDecl],
    template: str = "plain",
) -> ContainerSpec | None:
    """A job request's container, checked on its hosts (None: any host, a count-only job:
    at least one host must take it); None when it names no image. Invalid (422) otherwise."""
    if image is None:
        if mounts:
            raise Invalid("'mounts' is for container jobs: give 'image' too.")
        return None
    check_image(image)
    paths = check_mount_list(mounts)
    found = engines(decls)
    if hosts is not None:
        for host in hosts:
            check_on_host(host, found.get(host), image, paths)
    else:
        problems = []
        for host, engine in found.items():
            try:
                check_on_host(host, engine, image, paths)
            except Invalid as error:
                problems.append(str(error))
            else:
                break
        else:
            raise Invalid(" ".join(problems) or "No host runs a container engine for gpuhive.")
    return ContainerSpec(image, paths, reservation, template in DISTRIBUTED)


def check_env(specs: Sequence[TaskSpec]) -> None:
    """Refuse (422) env values a container's env file cannot carry."""
    for spec in specs:
        try:
            env_file(spec)
        except TemplateError as error:
            raise Invalid(f"{error}.") from None


def start_line(
    task: Task,
    decl: HostDecl | None,
    paths: tuple[str, str, str],
    account: str,
    *,
    clean: bool,
    keep: Sequence[str] = (),
    extra_env: str = "",
) -> tuple[str, str]:
    """The script (`task_script`, `keep` its runner's kept names) and env-file text of a
    container task (log, exit, env paths), run as the owner's UNIX account `account`.

    `extra_env` is sh text of gpuhive's own that a bare task's env file ends with (`export
    NAME=value` lines, values quoted, and commands such as making a checkpoint folder): here
    it runs on the host before the engine, and the names it exports reach the container.

    TemplateError when the host cannot run it (no engine, or the site's lists changed).
    """
    container = task.container
    assert container is not None
    engine = engine_of(decl) if decl is not None else None
    try:
        mounts = check_on_host(task.host, engine, container.image, container.mounts)
    except Invalid as error:
        raise TemplateError(str(error)) from None
    assert engine is not None
    log_path, exit_path, env_path = paths
    run = task_run(
        engine,
        task,
        image=container.image,
        mounts=mounts,
        env_path=env_path,
        account=account,
        reservation=container.reservation,
        host_network=container.host_network,
        passed=EXPORTED.findall(extra_env),
    )
    # No `rm -f` of a leftover of the name first: it costs a round trip to the engine on
    # every start (~30% of a container start here); stop removes containers, `--rm` the rest,
    # and a leftover makes the start fail with the engine's own "name in use" message.
    run = f"{extra_env}exec {run}"
    spec = task.spec()
    line = task_script(spec, log_path, exit_path, env_path, clean=clean, keep=keep, run=run)
    # The host's env reaches the container too, except PATH (the image has its own).
    hosted = {k: v for k, v in (host_env(decl) if decl else {}).items() if k != "PATH"}
    return line, env_file(spec, hosted)


def removal(decl: HostDecl | None, tasks: Sequence[Task]) -> str | None:
    """The command that removes the containers of `tasks` on their host (None: none has one)."""
    names = [task.session for task in tasks if task.container is not None]
    engine = engine_of(decl) if decl is not None and names else None
    return remove_line(engine, names) if engine is not None else None


def previewed(
    shown: list[dict[str, Any]],
    specs: Sequence[TaskSpec],
    job: Job,
    decls: Mapping[str, HostDecl],
    account: str,
) -> list[dict[str, Any]]:
    """A container job's preview: each task's `shell` is the engine line it will run as the
    owner's UNIX account `account` (its name and env file as they will be once stored)."""
    container = job.container
    assert container is not None
    out = []
    for item, spec in zip(shown, specs, strict=True):
        decl = decls.get(spec.host)
        engine = engine_of(decl) if decl is not None else None
        mounts = check_on_host(spec.host, engine, container.image, container.mounts)
        assert engine is not None
        line = run_line(
            engine,
            image=container.image,
            name=f"gpuhive-ID-{job.name}-{spec.index}",
            owner=account,
            argv=["sh", "-c", spec.command],
            uuids=[gpu.uuid for gpu in spec.gpus],
            env_file="~/.gpuhive/jobs/ID-TAG-TASK.env",
            workdir=spec.workdir,
            mounts=mounts,
            label_values=labels(
                job.owner, job="ID", task=spec.index, reservation=container.reservation
            ),
            host_network=container.host_network,
        )
        out.append({**item, "shell": line})
    return out
