"""A real Docker engine for tests and benchmarks: our own dockerd and a test image built locally.

`running_dockerd()` starts Debian's ``dockerd`` as root with its own socket, data root and exec root
in a temporary directory (no bridge, no iptables rules: containers use ``--network host`` or
``none``), so it never touches a system daemon nor another test session's, and stops it (and every
container it ran) at the end. `build_test_image()` makes a root file system from this machine's
own files and ``docker import``s it under a tag unique to the run: no registry is needed, and no
image a previous run left can be used.

The image holds the Python that the project's venv is built on, at its host path (the venv's
``bin/python`` links to it), with its standard library and every shared library that it, its
extension modules and the usual wheels (torch: libstdc++, libgcc_s, libz, …) load; ``/bin/sh``
(dash) and a few coreutils (``sleep``, ``cat``, ``env``, ``id``, ``ls``, …). Mount the venv
read-only at its host path (``-v VENV:VENV:ro``) and run ``VENV/bin/python``.

The engine binary is named explicitly (``/usr/bin/docker``): ``/usr/local/bin/docker`` on these
machines is an unrelated client that comes first on ``PATH``.
"""

from __future__ import annotations

import hashlib
import io
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

DOCKER = "/usr/bin/docker"
DOCKERD = "/usr/sbin/dockerd"
# Programs the image carries besides Python (from this machine's /usr/bin).
TOOLS = ("dash", "sleep", "cat", "env", "id", "ls", "true", "false", "mkdir", "rm", "kill", "sh")
# Libraries that wheels commonly load although Python itself does not (torch, numpy, pyzmq …).
WHEEL_LIBS = (
    "libstdc++.so.6",
    "libgcc_s.so.1",
    "libz.so.1",
    "libdl.so.2",
    "libpthread.so.0",
    "librt.so.1",
    "libresolv.so.2",
    "libgomp.so.1",
    "libutil.so.1",
)
# Parts of the standard library no test runs in a container.
STDLIB_SKIP = {
    "test",
    "site-packages",
    "dist-packages",
    "idlelib",
    "tkinter",
    "turtledemo",
    "ensurepip",
    "lib2to3",
}


class DockerUnavailable(RuntimeError):
    """The engine cannot run here (not root, not installed, or dockerd did not start)."""


@dataclass
class Engine:
    """A running Docker daemon: its client binary and socket (``unix://…``)."""

    binary: str
    host: str
    root: Path | None = None
    pid: int | None = None

    def argv(self, *args: str) -> list[str]:
        """The client command line for `args` against this daemon."""
        return [self.binary, "--host", self.host, *args]

    def run(
        self, *args: str, check: bool = True, timeout: float = 60, stdin: bytes | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run the client; on failure (with `check`) raise with the engine's own message."""
        done = subprocess.run(
            self.argv(*args),
            input=stdin.decode() if stdin is not None else None,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env(),
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"docker {' '.join(args)}: {done.stderr.strip() or done.stdout}")
        return done

    def env(self) -> dict[str, str]:
        """An explicit environment for the client: this daemon, no user config."""
        return {
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
            "DOCKER_HOST": self.host,
            "DOCKER_CONFIG": str((self.root or Path(tempfile.gettempdir())) / "client"),
            "HOME": "/root",
        }

    def remove_all_containers(self) -> None:
        """Stop and remove every container of this daemon."""
        ids = self.run("ps", "-aq", check=False).stdout.split()
        if ids:
            self.run("rm", "-f", *ids, check=False, timeout=120)


def unavailable_reason() -> str | None:
    """Why this machine cannot start a dockerd for the tests, or None when it can."""
    if os.geteuid() != 0:
        return "Docker tests start their own dockerd, which needs root"
    for path in (DOCKERD, DOCKER):
        if not os.access(path, os.X_OK):
            return f"{path} is missing (run 'make sysdeps': installs docker.io)"
    return None


def _wait_ready(engine: Engine, process: subprocess.Popen[bytes], log: Path, limit: float) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise DockerUnavailable(
                f"dockerd exited with {process.returncode}: {log.read_text()[-2000:]}"
            )
        if engine.run("version", check=False, timeout=10).returncode == 0:
            return
        time.sleep(0.1)
    raise DockerUnavailable(f"dockerd did not answer within {limit} s: {log.read_text()[-2000:]}")


def _unmount_under(root: Path) -> None:
    """Unmount whatever a killed daemon left mounted below `root` (deepest first)."""
    prefix = str(root) + "/"
    with open("/proc/self/mounts") as mounts:
        points = [line.split()[1] for line in mounts if line.split()[1].startswith(prefix)]
    for point in sorted(points, key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)


@contextmanager
def running_dockerd(start_timeout: float = 60) -> Iterator[Engine]:
    """A dockerd of our own for the duration of the block; stopped and cleaned up after."""
    reason = unavailable_reason()
    if reason:
        raise DockerUnavailable(reason)
    root = Path(tempfile.mkdtemp(prefix="gpuhive-dockerd-"))
    engine = Engine(DOCKER, f"unix://{root}/docker.sock", root)
    log = root / "dockerd.log"
    argv = [
        DOCKERD,
        "--host", engine.host,
        "--data-root", str(root / "data"),
        "--exec-root", str(root / "exec"),
        "--pidfile", str(root / "dockerd.pid"),
        "--bridge=none", "--iptables=false", "--ip6tables=false", "--ip-masq=false",
        "--log-level=warn",
    ]  # fmt: skip
    with open(log, "wb") as out:
        process = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=engine.env()
        )
    engine.pid = process.pid
    try:
        _wait_ready(engine, process, log, start_timeout)
        yield engine
    finally:
        with suppress(Exception):
            engine.remove_all_containers()
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        _unmount_under(root)
        shutil.rmtree(root, ignore_errors=True)


@dataclass
class TestImage:
    """A locally built image: its tag, the Python inside it, and the digest of its contents."""

    __test__ = False  # not a pytest test class

    tag: str
    python: str
    venv: Path
    content: str
    files: int = 0
    size: int = 0
    seconds: float = 0.0
    tools: dict[str, str] = field(default_factory=dict)

    @property
    def venv_python(self) -> str:
        """The venv's interpreter: run it with the venv mounted read-only at `venv`."""
        return str(self.venv / "bin" / "python")

    def venv_mount(self) -> list[str]:
        """``docker run`` arguments that mount the venv read-only at its host path."""
        return ["--volume", f"{self.venv}:{self.venv}:ro"]


class _RootFs:
    """Collects host paths (with the symlinks on their way) into a tar for ``docker import``."""

    def __init__(self) -> None:
        self.entries: dict[str, tarfile.TarInfo] = {}
        self.sources: dict[str, str] = {}

    def add(self, path: str, leaf: bool = True) -> None:
        """Add `path` as it is on this machine, with each directory and symlink on its way."""
        parts = os.path.abspath(path).strip("/").split("/")
        current = ""
        for i, part in enumerate(parts):
            current = f"{current}/{part}"
            last = leaf and i == len(parts) - 1
            name = current.lstrip("/")
            if os.path.islink(current):
                if name not in self.entries:
                    info = tarfile.TarInfo(name)
                    info.type = tarfile.SYMTYPE
                    info.linkname = os.readlink(current)
                    info.mode = 0o777
                    self.entries[name] = info
                    target = os.path.join(os.path.dirname(current), info.linkname)
                    self.add(os.path.normpath(target), leaf=last)
                current = os.path.realpath(current)  # /lib/x86_64-linux-gnu -> /usr/lib/…
                continue
            if name in self.entries:
                continue
            stat = os.stat(current)
            info = tarfile.TarInfo(name)
            info.mtime = int(stat.st_mtime)
            if last and not os.path.isdir(current):
                info.size = stat.st_size
                info.mode = stat.st_mode & 0o755
                self.sources[name] = current
            else:
                info.type = tarfile.DIRTYPE
                info.mode = 0o755  # also /root: the container's user must reach the Python below
            self.entries[name] = info

    def add_tree(self, top: str, skip: set[str]) -> None:
        """Add a directory tree, leaving out the top-level names in `skip`."""
        for dirpath, dirnames, filenames in os.walk(top):
            if dirpath == top:
                dirnames[:] = [d for d in dirnames if d not in skip and not d.startswith("config-")]
            for filename in filenames:
                self.add(os.path.join(dirpath, filename))

    def add_text(self, name: str, text: str, mode: int = 0o644) -> None:
        info = tarfile.TarInfo(name)
        info.size = len(text.encode())
        info.mode = mode
        self.entries[name] = info
        self.sources[name] = "\0" + text

    def add_dir(self, name: str, mode: int) -> None:
        info = tarfile.TarInfo(name)
        info.type = tarfile.DIRTYPE
        info.mode = mode
        self.entries[name] = info

    def digest(self) -> str:
        """A hash of what the image will hold (names, kinds, sizes, times, link targets)."""
        h = hashlib.sha256()
        for name in sorted(self.entries):
            i = self.entries[name]
            h.update(f"{name}\0{i.type!r}\0{i.size}\0{i.mtime}\0{i.linkname}\0{i.mode}\n".encode())
            source = self.sources.get(name, "")
            if source.startswith("\0"):
                h.update(source.encode())
        return h.hexdigest()

    def write(self, out: io.BufferedIOBase) -> None:
        with tarfile.open(fileobj=out, mode="w|") as tar:
            for name in sorted(self.entries):
                info = self.entries[name]
                source = self.sources.get(name)
                if source is None:
                    tar.addfile(info)
                elif source.startswith("\0"):
                    tar.addfile(info, io.BytesIO(source[1:].encode()))
                else:
                    with open(source, "rb") as data:
                        tar.addfile(info, data)


def _shared_libraries(paths: Iterable[str]) -> set[str]:
    """The libraries (with the loader) that the ELF files in `paths` load, from ``ldd``."""
    found: set[str] = set()
    paths = list(paths)
    if not paths:
        return found
    done = subprocess.run(
        ["ldd", *paths], capture_output=True, text=True, check=False, env={"LC_ALL": "C"}
    )
    for line in done.stdout.splitlines():
        words = line.split()
        if "=>" in words and len(words) > words.index("=>") + 1:
            target = words[words.index("=>") + 1]
            if target.startswith("/"):
                found.add(target)
        elif words and words[0].startswith("/") and not words[0].endswith(":"):
            found.add(words[0])  # the loader: /lib64/ld-linux-x86-64.so.2
    return found


def _ldconfig_paths(names: Iterable[str]) -> set[str]:
    """Paths of the named libraries as the host's loader cache knows them (missing ones skipped)."""
    wanted = set(names)
    done = subprocess.run(
        ["/sbin/ldconfig", "-p"], capture_output=True, text=True, check=False, env={"LC_ALL": "C"}
    )
    found: set[str] = set()
    for line in done.stdout.splitlines():
        words = line.split()
        if words and words[0] in wanted and "x86-64" in line and words[-1].startswith("/"):
            found.add(words[-1])
    return found


def python_rootfs(venv: Path) -> tuple[_RootFs, str]:
    """The root file system for `venv`'s Python; returns it and the interpreter's real path."""
    python = os.path.realpath(venv / "bin" / "python")
    probe = subprocess.run(
        [python, "-I", "-c", "import sysconfig;print(sysconfig.get_paths()['stdlib'])"],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    stdlib = probe.stdout.strip()
    fs = _RootFs()
    # The links that the venv's bin/python leads to (…/bin/python3 -> python3.11) must exist
    # inside; the venv itself is mounted.
    link = str(venv / "bin" / "python")
    while os.path.islink(link) and link.startswith(str(venv) + "/"):
        link = os.path.normpath(os.path.join(os.path.dirname(link), os.readlink(link)))
    fs.add(link)
    fs.add_tree(stdlib, STDLIB_SKIP)
    tools = [p for p in (shutil.which(t, path="/usr/bin:/bin") for t in TOOLS) if p]
    dynload = os.path.join(stdlib, "lib-dynload")
    elves = [python, *tools]
    if os.path.isdir(dynload):
        elves += [os.path.join(dynload, f) for f in os.listdir(dynload) if f.endswith(".so")]
    for path in tools:
        fs.add(path)
    for lib in _shared_libraries(elves) | _shared_libraries(_ldconfig_paths(WHEEL_LIBS)):
        fs.add(lib)
    for lib in _ldconfig_paths(WHEEL_LIBS):
        fs.add(lib)
    fs.add("/bin/sh")
    fs.add_text("etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534::/:/bin/sh\n")
    fs.add_text("etc/group", "root:x:0:\nnogroup:x:65534:\n")
    fs.add_dir("tmp", 0o1777)
    for name in ("proc", "sys", "dev", "etc", "run", "var"):
        if name not in fs.entries:
            fs.add_dir(name, 0o755)
    return fs, python


def tools_rootfs(tools: Iterable[str] = ("sh", "sleep", "id", "cat")) -> _RootFs:
    """A root file system of a few of this machine's programs and the libraries they load."""
    fs = _RootFs()
    paths = [p for p in (shutil.which(t, path="/usr/bin:/bin") for t in tools) if p]
    for path in paths:
        fs.add(path)
    for lib in _shared_libraries(os.path.realpath(p) for p in paths):
        fs.add(lib)
    fs.add("/bin/sh")
    fs.add_dir("tmp", 0o1777)
    for name in ("proc", "sys", "dev", "etc", "run"):
        if name not in fs.entries:
            fs.add_dir(name, 0o755)
    return fs


def build_test_image(engine: Engine, venv: Path | None = None) -> TestImage:
    """Build the test image from this machine's files and import it under a per-run tag."""
    started = time.monotonic()
    venv = Path(venv or Path(sys.prefix))
    fs, python = python_rootfs(venv)
    content = fs.digest()
    tag = f"gpuhive-test/python:{content[:12]}-{secrets.token_hex(4)}"
    process = subprocess.Popen(
        engine.argv("import", "-", tag),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=engine.env(),
    )
    assert process.stdin is not None
    try:
        fs.write(process.stdin)  # type: ignore[arg-type]
    finally:
        process.stdin.close()
    assert process.stdout is not None and process.stderr is not None
    process.stdout.read()
    err = process.stderr.read()
    if process.wait(timeout=300) != 0:
        raise RuntimeError(f"docker import failed: {err.decode().strip()}")
    size = sum(i.size for i in fs.entries.values())
    return TestImage(
        tag=tag,
        python=python,
        venv=venv,
        content=content,
        files=len(fs.entries),
        size=size,
        seconds=time.monotonic() - started,
        tools={os.path.basename(n): "/" + n for n in fs.entries if n.startswith("usr/bin/")},
    )


def container_id_of(engine: Engine, name: str) -> str:
    """The full 64-hex id of a container, from its name or short id."""
    return engine.run("inspect", "--format", "{{.Id}}", name).stdout.strip()


def main_pid_of(engine: Engine, name: str) -> int:
    """The host pid of a running container's first process."""
    return int(engine.run("inspect", "--format", "{{.State.Pid}}", name).stdout.strip())


if __name__ == "__main__":  # python -m tests.support.containers: build once and report the cost
    with running_dockerd() as _engine:
        _image = build_test_image(_engine)
        _size = _image.size // 2**20
        print(f"{_image.tag}: {_image.files} entries, {_size} MiB, {_image.seconds:.1f} s")
        _check = "import sys, ssl, sqlite3; print(sys.version)"
        _argv = [*_image.venv_mount(), _image.tag, _image.venv_python, "-I", "-c", _check]
        print(_engine.run("run", "--rm", "--network", "none", *_argv).stdout)
