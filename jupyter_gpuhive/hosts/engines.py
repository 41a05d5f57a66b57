"""A host's container engine as configured (`containers:` in its host entry), the site's
allow-lists for it, and the engine command line that runs something in an image.

Docker runs rootful (its socket is root: whoever may use it is root on the host), Podman
rootless as the task's owner. Users never pass engine words: they name an image from the
host's allow-list (fnmatch patterns) and pick mounts from its list; every other flag is fixed
here, and every value is shell-quoted. What is never generated: `--privileged`, host PID or
IPC namespaces, extra devices or capabilities (all are dropped), new privileges (refused).
"""

from __future__ import annotations

import fnmatch
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..errors import Invalid
from ..model import HostDecl
from ..model.gpus import ShellWord
from .vendors import DEFAULT, vendor_named, vendor_of

ENGINES = ("docker", "podman")
# How the reserved GPUs reach a container: the NVIDIA container toolkit's `--gpus` (Docker),
# CDI devices (Podman, Docker with CDI), or none (only the vendor's pinning variable: tests,
# no toolkit).
GPU_FLAGS = ("nvidia", "cdi", "none")
DEFAULT_BINARY = {"docker": "/usr/bin/docker", "podman": "/usr/bin/podman"}
DEFAULT_GPU_FLAGS = {"docker": "nvidia", "podman": "cdi"}
NETWORKS = ("default", "none", "host")
LABEL_PREFIX = "gpuhive"

# An image reference: [registry[:port]/]name[:tag][@digest]; never a word that starts with '-'.
IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}\Z")
_PATH = re.compile(r"/[A-Za-z0-9._/@+-]*\Z")  # no ',' or ':' (they split -v), no spaces
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\Z")
_SOCKET = re.compile(r"unix:///[A-Za-z0-9._/@+-]+\Z")


@dataclass(frozen=True)
class Mount:
    """A host directory the site lets containers mount, at the same path inside."""

    path: str
    read_only: bool = False

    def flag(self) -> list[str]:
        """`-v PATH:PATH[:ro]` as words."""
        return ["-v", f"{self.path}:{self.path}{':ro' if self.read_only else ''}"]


@dataclass(frozen=True)
class Engine:
    """One host's container engine and what the site allows through it."""

    engine: str = "docker"
    binary: str = DEFAULT_BINARY["docker"]
    gpu_flags: str = DEFAULT_GPU_FLAGS["docker"]
    images: tuple[str, ...] = ()
    mounts: tuple[Mount, ...] = ()
    socket: str | None = None  # docker -H unix:///…; default: the engine's own
    home: str | None = None  # mounted instead of the owner's home ('{user}' is the owner)
    kernel_image: str | None = None
    kernel_python: str = "python3"  # the interpreter inside kernel images (with ipykernel)
    # host (as a bare task: no namespace to set up), none, or default (the engine's own);
    # the distributed templates always use host.
    network: str = "host"
    init_path: str | None = None  # Podman: the init binary, where catatonit is not installed
    vendor: str = DEFAULT  # the host's GPU vendor (how its GPUs are given to a container)

    def allows_image(self, image: str) -> bool:
        """Whether `image` matches one of the site's patterns (fnmatch, case-sensitive)."""
        return bool(IMAGE.match(image)) and any(
            fnmatch.fnmatchcase(image, pattern) for pattern in self.images
        )

    def mount(self, path: str) -> Mount | None:
        """The allowed mount `path` names exactly (trailing '/' ignored), or None."""
        wanted = path.rstrip("/") or "/"
        return next((m for m in self.mounts if m.path == wanted), None)

    def words(self) -> list[str]:
        """The engine's binary and its connection flag, as words."""
        words = [self.binary]
        if self.socket:
            words += ["-H", self.socket]
        return words


def engine_of(decl: HostDecl) -> Engine | None:
    """The host's container engine from its `containers` entry (None when it has none)."""
    spec = decl.extra.get("containers")
    if spec is None:
        return None
    return replace(parse_engine(decl.name, spec), vendor=vendor_of(decl.extra).name)


def parse_engine(host: str, spec: Any) -> Engine:
    """Validate a host's `containers` entry (a mistake is the site's: Invalid names it)."""

    def bad(message: str) -> Invalid:
        return Invalid(f"Host {host}: containers: {message}")

    if not isinstance(spec, Mapping):
        raise bad("must be a mapping such as {engine: docker, images: ['lab/*']}.")
    known = {"engine", "binary", "gpu_flags", "images", "mounts", "socket", "home",
             "kernel_image", "kernel_python", "network", "init_path"}  # fmt: skip
    unknown = sorted(set(spec) - known)
    if unknown:
        raise bad(f"unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(known))}).")
    engine = spec.get("engine", "docker")
    if engine not in ENGINES:
        raise bad(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}.")
    binary = spec.get("binary", DEFAULT_BINARY[engine])
    if not isinstance(binary, str) or not _PATH.match(binary):
        raise bad(f"binary must be an absolute path, not {binary!r}.")
    gpu_flags = spec.get("gpu_flags", DEFAULT_GPU_FLAGS[engine])
    if gpu_flags not in GPU_FLAGS:
        raise bad(f"gpu_flags must be one of {', '.join(GPU_FLAGS)}, not {gpu_flags!r}.")
    images = spec.get("images") or []
    if not isinstance(images, list) or not all(isinstance(p, str) and p for p in images):
        raise bad("images must be a list of image patterns such as 'lab/*:*'.")
    mounts = [_mount(entry, bad) for entry in spec.get("mounts") or []]
    socket = spec.get("socket")
    if socket is not None and (engine != "docker" or not _SOCKET.match(str(socket))):
        raise bad(f"socket must be unix:///path (Docker only), not {socket!r}.")
    home = spec.get("home")
    if home is not None and not (
        isinstance(home, str) and _PATH.match(home.replace("{user}", "u"))
    ):
        raise bad(f"home must be an absolute path ('{{user}}' for the owner), not {home!r}.")
    kernel_image = spec.get("kernel_image")
    if kernel_image is not None and not (
        isinstance(kernel_image, str) and IMAGE.match(kernel_image)
    ):
        raise bad(f"kernel_image must be an image reference, not {kernel_image!r}.")
    kernel_python = spec.get("kernel_python", "python3")
    if not isinstance(kernel_python, str) or not (
        _PATH.match(kernel_python) or _NAME.match(kernel_python)
    ):
        raise bad(f"kernel_python must be a path or a command name, not {kernel_python!r}.")
    network = spec.get("network", "host")
    if network not in NETWORKS:
        raise bad(f"network must be one of {', '.join(NETWORKS)}, not {network!r}.")
    init_path = spec.get("init_path")
    if init_path is not None and (engine != "podman" or not _PATH.match(str(init_path))):
        raise bad(f"init_path must be an absolute path (Podman only), not {init_path!r}.")
    return Engine(engine, binary, gpu_flags, tuple(images), tuple(mounts), socket, home,
                  kernel_image, kernel_python, network, init_path)  # fmt: skip


def _mount(entry: Any, bad: Any) -> Mount:
    if isinstance(entry, str):
        entry = {"path": entry}
    path = entry.get("path") if isinstance(entry, Mapping) else None
    if not isinstance(path, str) or not _PATH.match(path) or "/.." in path + "/":
        raise bad(f"each mount needs an absolute 'path' (no ',' ':' or '..'), not {entry!r}.")
    if path.rstrip("/") in ("", "/proc", "/sys", "/dev", "/run", "/var/run", "/etc") or path.rstrip(
        "/"
    ).endswith(".sock"):
        raise bad(f"{path} may not be mounted into containers (it reaches the host or the engine).")
    return Mount(path.rstrip("/"), bool(entry.get("read_only", False)))


def container_name(*parts: str) -> str:
    """A deterministic container name from parts (screen session names already qualify)."""
    name = "-".join(parts)
    if not _NAME.match(name):
        raise Invalid(f"{name!r} is not a valid container name.")
    return name


def labels(owner: str, **ids: str | int | None) -> dict[str, str]:
    """`gpuhive=1`, `gpuhive.owner`, and `gpuhive.<what>` for each id given (None left out)."""
    out = {LABEL_PREFIX: "1", f"{LABEL_PREFIX}.owner": owner}
    out.update(
        {f"{LABEL_PREFIX}.{key}": str(value) for key, value in ids.items() if value is not None}
    )
    return out


def gpu_words(engine: Engine, uuids: Sequence[str]) -> list[str]:
    """The flags that give the container exactly these GPUs (none when the site says none)."""
    mode = "toolkit" if engine.gpu_flags == "nvidia" else engine.gpu_flags
    return vendor_named(engine.vendor).pinning.container_flags(mode, list(uuids))


def run_line(
    engine: Engine,
    *,
    image: str,
    name: str,
    owner: str,
    argv: Sequence[str],
    uuids: Sequence[str],
    env_file: str | None,
    workdir: str | None,
    mounts: Sequence[Mount] = (),
    label_values: Mapping[str, str] | None = None,
    host_network: bool = False,
    extra_env: Sequence[str] = (),
    interactive: bool = False,
    raw: tuple[Sequence[str], Sequence[str]] = ((), ()),
) -> str:
    """`ENGINE run --rm … IMAGE ARGV` as shell text for bash, run as the owner.

    The owner's uid:gid, home and the mount root come from the shell where the line runs
    (`/usr/bin/id -u`, `$HOME`); every other value is quoted here. `extra_env` names
    variables passed from the running shell (`-e NAME`, value not in argv).
    """
    if not IMAGE.match(image):
        raise Invalid(f"{image!r} is not an image reference.")
    home = shlex.quote(engine.home.replace("{user}", owner)) if engine.home else '"$HOME"'
    words = [shlex.quote(w) for w in engine.words()]
    # --log-driver none: the output reaches the task's log through the attached client; the
    # engine keeps no second copy of it under its (root's) data root.
    words += ["run", "--rm", "--init", "--pull", "never", "--log-driver", "none"]
    words += ["--name", shlex.quote(name)]
    if engine.init_path:
        words += ["--init-path", shlex.quote(engine.init_path)]
    if engine.engine == "podman":
        words += ["--userns", "keep-id"]
    # /usr/bin/id by path: no function or PATH entry of the user's shell answers for it.
    words += ['--user "$(/usr/bin/id -u):$(/usr/bin/id -g)"', "--cap-drop", "ALL"]
    words += ["--security-opt", "no-new-privileges"]
    if host_network or engine.network != "default":
        words += ["--network", "host" if host_network else engine.network]
    if interactive:
        words.append("-i")
    if env_file is not None:
        words += ["--env-file", shlex.quote(env_file)]
    words += [f"-e HOME={home}", '-e "USER=$(/usr/bin/id -un)"']
    # docker-init (tini; or tini as Podman's init_path) passes a stop's SIGINT to the group.
    words += ["-e", "TINI_KILL_PROCESS_GROUP=1"]
    words += [w for n in extra_env for w in ("-e", shlex.quote(n))]
    for key, value in (label_values or {}).items():
        words += ["--label", shlex.quote(f"{key}={value}")]
    words += [w if isinstance(w, ShellWord) else shlex.quote(w) for w in gpu_words(engine, uuids)]
    words += ["-v", f"{home}:{home}"]
    for mount in mounts:
        words += [shlex.quote(w) for w in mount.flag()]
    words += ["-w", _inside(workdir, home)]
    # `raw`: shell words of gpuhive's own (never a user's value), before the image and last.
    words += [*raw[0], shlex.quote(image), *(shlex.quote(w) for w in argv), *raw[1]]
    return " ".join(words)


def _inside(workdir: str | None, home: str) -> str:
    """The container's working directory: absolute as given, else under the home mount."""
    if not workdir or workdir == "~":
        return home
    if workdir.startswith("/"):
        return shlex.quote(workdir)
    relative = workdir[2:] if workdir.startswith("~/") else workdir
    return f"{home}/{shlex.quote(relative)}"


def remove_line(engine: Engine, names: Sequence[str]) -> str:
    """`ENGINE rm -f NAME…` (quiet: a container already gone is fine)."""
    words = [*engine.words(), "rm", "-f", *names]
    return " ".join(shlex.quote(w) for w in words) + " >/dev/null 2>&1 || true"
