"""`make dist`'s check: the built sdist and wheel install and work in a clean venv.

Run after `python -m build` wrote dist/. It checks, in order, and stops at the first failure with a
sentence that says which:
1. `twine check` accepts both files (metadata, README rendering);
2. the sdist carries the prebuilt labextension, so a wheel built from it needs no Node;
3. the wheel, with the `lab` extra, installs in a new venv (from the lock, as `make test` does);
4. in that venv `jupyter server extension list` shows jupyter_gpuhive enabled and
   `jupyter labextension list` shows jupyter-gpuhive enabled;
5. `jupyter lab` starts there and serves /lab and gpuhive's own `api/me` with its token.
The venv lives under dist/ and is removed at the start of the next check.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DIST = ROOT / "dist"
LOCK = ROOT / "requirements" / "lock.txt"
LAB_FILE = "jupyter_gpuhive/labextension/package.json"


class Failed(Exception):
    """A step of the check failed; its message says which and why."""


def run(*cmd: str | Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(c) for c in cmd], capture_output=True, text=True, env=env, check=False, timeout=900
    )
    if done.returncode != 0:
        raise Failed(
            f"`{' '.join(map(str, cmd))}` failed ({done.returncode}):\n{done.stderr[-3000:]}"
        )
    return done.stdout + done.stderr


def one(pattern: str) -> Path:
    found = sorted(DIST.glob(pattern))
    if len(found) != 1:
        raise Failed(f"expected one {pattern} in dist/, found {[p.name for p in found]}")
    return found[0]


def clean_env(venv: Path) -> dict[str, str]:
    """An environment that sees only the new venv: no PYTHONPATH, a Jupyter of its own."""
    home = venv / "home"
    home.mkdir(exist_ok=True)
    return {
        "PATH": f"{venv / 'bin'}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "JUPYTER_CONFIG_DIR": str(home / "config"),
        "JUPYTER_DATA_DIR": str(home / "data"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "PIP_CONSTRAINT": str(LOCK),
        **{k: v for k, v in os.environ.items() if k.startswith("PIP_") and k != "PIP_CONSTRAINT"},
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def lab_starts(venv: Path, env: dict[str, str]) -> None:
    token, port = secrets.token_hex(16), free_port()
    root = Path(tempfile.mkdtemp(prefix="gpuhive-dist-"))
    args = [venv / "bin" / "jupyter", "lab", "--no-browser", "--ip=127.0.0.1",
            f"--ServerApp.port={port}", f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={root}"]  # fmt: skip
    if os.geteuid() == 0:
        args.append("--allow-root")
    log = (DIST / "check-lab.log").open("w")
    lab = subprocess.Popen([str(a) for a in args], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while True:
            if lab.poll() is not None:
                raise Failed(f"jupyter lab exited ({lab.returncode}); see dist/check-lab.log")
            try:
                for path in ("lab", "gpuhive/api/me"):
                    url = f"http://127.0.0.1:{port}/{path}?token={token}"
                    with urllib.request.urlopen(url, timeout=5) as answer:
                        body = answer.read()
                me = json.loads(body)
                print(f"jupyter lab serves /lab and gpuhive's api/me (as {me.get('name')!r})")
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise Failed(
                        "jupyter lab did not answer in 90 s; see dist/check-lab.log"
                    ) from None
                time.sleep(1)
    finally:
        lab.terminate()
        try:
            lab.wait(20)
        except subprocess.TimeoutExpired:
            lab.kill()
        log.close()
        shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    try:
        sdist, wheel = one("jupyter_gpuhive-*.tar.gz"), one("jupyter_gpuhive-*.whl")
        print(run(sys.executable, "-m", "twine", "check", "--strict", sdist, wheel).strip())
        with tarfile.open(sdist) as tar:
            if not any(name.endswith(LAB_FILE) for name in tar.getnames()):
                raise Failed(f"the sdist lacks the prebuilt labextension ({LAB_FILE})")
        venv = DIST / "check-venv"
        shutil.rmtree(venv, ignore_errors=True)
        run(sys.executable, "-m", "venv", venv)
        env = clean_env(venv)
        run(venv / "bin" / "python", "-m", "pip", "install", "--quiet", f"{wheel}[lab]", env=env)
        servers = run(venv / "bin" / "jupyter", "server", "extension", "list", env=env)
        if not any("jupyter_gpuhive" in ln and "enabled" in ln for ln in servers.splitlines()):
            raise Failed(f"jupyter server extension list does not show gpuhive enabled:\n{servers}")
        labs = run(venv / "bin" / "jupyter", "labextension", "list", env=env)
        if not any("jupyter-gpuhive" in ln and "enabled" in ln for ln in labs.splitlines()):
            raise Failed(f"jupyter labextension list does not show gpuhive enabled:\n{labs}")
        print("server extension and labextension enabled in a clean venv")
        lab_starts(venv, env)
    except Failed as failed:
        print(f"make dist: {failed}", file=sys.stderr)
        return 1
    print(f"dist/: {sdist.name}, {wheel.name} are ready to upload")
    return 0


if __name__ == "__main__":
    sys.exit(main())
