"""A Python with ipykernel that every UNIX user can run, for kernels started as test users.

The repository (and the interpreter of its venv) may live under a 0700 directory such as
/root, where another user cannot run it. This builds, once per machine, a venv from the
system Python in a world-readable place (/var/tmp/gpuhive-test-<uid>, a folder only we may
write) with ipykernel (and, when asked, more
packages such as torch), and reuses it afterwards. ~30 s the first time.

Reuse is earned, not assumed: before every use the venv is probed the way a kernel will run
it, isolated (`-I`: no PYTHONPATH, no user site, no current directory), with an explicit
minimal environment, and as an unprivileged user where we are root. A probe that inherited
the test process's environment once answered "torch is there" because pytest-jupyter puts the
project venv's `sys.path` into PYTHONPATH; the kernel, started clean, then had no torch.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(os.environ.get("GPUHIVE_KERNEL_PYTHON_DIR", "/var/tmp"))
BASES = ("/usr/bin/python3", "/usr/local/bin/python3")


def _base() -> str:
    """A system interpreter any user can run."""
    for path in BASES:
        if os.access(path, os.X_OK):
            return path
    return sys.executable


# What a probe runs with: nothing of the caller's environment (see the module docstring).
PROBE_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/"}


def probe_argv(python: Path | str, requirement: str) -> list[str]:
    """The command that asks `python` whether it can import `requirement` ('torch' or
    'torch==2.13.0': then that version), as another user would."""
    name, _, version = requirement.partition("==")
    code = f"import {name.replace('-', '_')}"
    if version:
        code += f"; from importlib.metadata import version; assert version({name!r}).split('+')[0] == {version!r}"
    argv = [str(python), "-I", "-c", code]
    if os.geteuid() == 0 and shutil.which("setpriv"):  # as nobody: readable by all, too
        argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv]
    return argv


def _has(python: Path, requirement: str) -> bool:
    done = subprocess.run(probe_argv(python, requirement), capture_output=True, env=PROBE_ENV,
                          cwd="/", check=False)  # fmt: skip
    return done.returncode == 0


def kernel_python(packages: Sequence[str] = ()) -> str:
    """The path of a world-usable interpreter with ipykernel and `packages` (import names
    equal to the pip names but for '-', pinned with '==' if wanted)."""
    base = _base()
    version = subprocess.run([base, "-I", "-c", "import sys; print('%d%d' % sys.version_info[:2])"],
                             capture_output=True, text=True, env=PROBE_ENV,
                             check=True).stdout.strip()  # fmt: skip
    parent = _own_folder(ROOT / f"gpuhive-test-{os.geteuid()}")
    home = parent / f"kernel-python{version}"
    python = home / "bin" / "python"
    with open(parent / f".kernel-python{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        changed = False
        if not (python.exists() and _has(python, "ipykernel")):
            shutil.rmtree(home, ignore_errors=True)
            subprocess.run([base, "-I", "-m", "venv", str(home)], env=PROBE_ENV, check=True)
            _install(python, ["ipykernel"])
            changed = True
        missing = [p for p in packages if not _has(python, p)]
        if missing:
            _install(python, missing)
            changed = True
        if changed:
            _share(home)
        still_missing = [p for p in ("ipykernel", *packages) if not _has(python, p)]
        if still_missing:
            raise RuntimeError(f"{python} cannot import {still_missing} as another user would")
    return str(python)


def _own_folder(path: Path) -> Path:
    """`path`, made by us (0755) or checked to be ours and writable by nobody else: /var/tmp is
    world-writable, and a folder another user made first would hand them what root runs."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.mkdir(mode=0o755, exist_ok=True)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise RuntimeError(f"{path} is not a folder of ours that only we may write: remove it")
    return path


def _share(home: Path) -> None:
    """Make the venv readable (and its programs runnable) by every user."""
    for path in [home, *home.rglob("*")]:  # readable by all (a umask may have said no)
        if not path.is_symlink():
            mode = path.stat().st_mode
            path.chmod(mode | 0o044 | (0o011 if mode & 0o100 else 0))


def _install(python: Path, packages: list[str]) -> None:
    passed = (
        "HOME",
        "http_proxy",
        "https_proxy",
        "no_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
    )
    env = {
        **PROBE_ENV,
        **{k: v for k, v in os.environ.items() if k.startswith("PIP_") or k in passed},
    }
    subprocess.run([str(python), "-I", "-m", "pip", "install", "--quiet",
                    "--disable-pip-version-check", *packages], env=env, check=True)  # fmt: skip
