"""Build and start the Binder demo the way repo2docker would, as far as this machine allows.

`make binder-check` runs it. Steps, each as a non-root user (repo2docker's is `jovyan`; as root
this script uses the account `gpuhive-binder`, created when missing):

1. The last commit (`git archive HEAD`: no node_modules, no built extension, nothing
   uncommitted), as repo2docker clones it.
2. A clean virtual environment with the packages of `environment.yml` that pip can install
   (conda names mapped to pip names); `nodejs` and `procps-ng` must come from this machine
   (`node`, `ps` on PATH), as conda would put them there.
3. `binder/postBuild` in that copy (`pip install .` builds the labextension with jlpm).
4. `binder/start jupyter lab …`, then the checks: the extension is installed, the API answers
   with the 3 simulated hosts and the demo's starting state (alice's booking, the queued job).

Not checked here: conda itself (conda-forge's builds and pins of these packages), repo2docker's
Docker image and its launcher, mybinder.org's network and limits.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
USER = "gpuhive-binder"
# conda-forge name -> pip requirement; None: not a Python package (must be on this machine).
CONDA_TO_PIP = {"python": None, "pip": None, "nodejs": None, "procps-ng": None}
FROM_MACHINE = {"nodejs": "node", "procps-ng": "ps"}
NETWORK = {"NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE",
           "CURL_CA_BUNDLE", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy",
           "https_proxy", "no_proxy"}  # fmt: skip


def conda_dependencies(path: Path) -> list[str]:
    """The `dependencies:` entries of environment.yml (a flat list of strings)."""
    deps, inside = [], False
    for line in path.read_text().splitlines():
        if re.match(r"^dependencies:\s*$", line):
            inside = True
        elif inside and re.match(r"^\s+-\s+", line):
            deps.append(line.split("-", 1)[1].split("#", 1)[0].strip())
        elif inside and line.strip() and not line.startswith(" "):
            inside = False
    return deps


def split(dep: str) -> tuple[str, str]:
    name = re.split(r"[<>=!]", dep, maxsplit=1)[0]
    return name, dep[len(name) :]


def python_for_everyone(version: str) -> str:
    """A python`version` the build user may run (not one under root's 0700 home)."""
    for candidate in (f"/usr/bin/python{version}", f"/usr/local/bin/python{version}",
                      shutil.which(f"python{version}") or "", sys.executable):  # fmt: skip
        real = Path(candidate).resolve() if candidate else None
        if real and real.is_file() and all(os.stat(p).st_mode & 0o001 for p in real.parents):
            return str(real)
    raise SystemExit(f"no python{version} that a user other than root may run")


def run(cmd: list[str], **kw: object) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, **kw)  # type: ignore[call-overload]


def as_user(cmd: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return cmd
    # -p: the environment given (HOME in the build folder), not the account's own.
    return [shutil.which("runuser") or "/usr/sbin/runuser", "-p", "-u", USER, "--", *cmd]


def main() -> int:
    deps = conda_dependencies(REPO / "binder" / "environment.yml")
    names = [split(d)[0] for d in deps]
    assert "nodejs" in names, "environment.yml needs nodejs: pip install . builds the extension"
    pip_reqs = [f"{split(d)[0]}{split(d)[1]}" for d in deps if split(d)[0] not in CONDA_TO_PIP]
    python = next((split(d)[1].lstrip("=") for d in deps if split(d)[0] == "python"), "3")
    for name, tool in FROM_MACHINE.items():
        if name in names and not shutil.which(tool):
            print(f"{tool} (conda: {name}) is not on this machine's PATH", file=sys.stderr)
            return 1
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(USER)
        except KeyError:
            run(["useradd", "-m", "-s", "/bin/bash", USER])
    home = Path(tempfile.mkdtemp(prefix="gpuhive-binder-"))
    try:
        build_and_start(home, interpreter=python_for_everyone(python), pip_reqs=pip_reqs)
    finally:
        for pid in demo_load(home):  # start_load's processes live in sessions of their own
            os.kill(pid, 15)
        if not os.environ.get("GPUHIVE_BINDER_KEEP"):
            shutil.rmtree(home, ignore_errors=True)
    print("binder check: built, started as a non-root user, extension loaded, demo seeded")
    return 0


def build_and_start(home: Path, interpreter: str, pip_reqs: list[str]) -> None:
    """Steps 1-4 in `home` (the build user's home and the copy of the repository)."""
    os.chmod(home, 0o755)  # noqa: S103 - the build user (not root) must reach it
    repo = home / "repo"
    repo.mkdir()
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=REPO, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(repo)], input=archive.stdout, check=True)
    if os.geteuid() == 0:
        run(["chown", "-R", f"{USER}:{USER}", str(home)])
    venv = home / "env"
    env = {
        "HOME": str(home),
        "PATH": f"{venv / 'bin'}:/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "JUPYTER_CONFIG_DIR": str(home / ".jupyter"),
        "JUPYTER_DATA_DIR": str(home / ".local/share/jupyter"),
        "JUPYTER_RUNTIME_DIR": str(home / ".local/share/jupyter/runtime"),
        # This machine's way to the package registries (CA bundle, proxy, pip mirrors), as
        # a Binder build has its own: the network, not part of what is checked.
        **{k: v for k, v in os.environ.items() if k in NETWORK or k.startswith("PIP_")},
    }
    run(as_user([interpreter, "-m", "venv", str(venv)]), env=env)
    run(as_user([str(venv / "bin/pip"), "install", "-q", *pip_reqs]), env=env)
    started = time.monotonic()
    run(as_user(["bash", "binder/postBuild"]), env=env, cwd=repo)
    print(f"postBuild took {time.monotonic() - started:.0f} s", flush=True)
    listed = subprocess.run(
        as_user([str(venv / "bin/jupyter"), "labextension", "list"]),
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert re.search(r"jupyter-gpuhive .*enabled.*OK", listed.stdout + listed.stderr), listed
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    token = secrets.token_hex(16)
    lab = subprocess.Popen(
        as_user(["bash", "binder/start", str(venv / "bin/jupyter"), "lab", "--no-browser",
                 f"--port={port}", "--ip=127.0.0.1", f"--IdentityProvider.token={token}"]),
        env=env, cwd=repo, start_new_session=True,
    )  # fmt: skip
    try:
        hosts = wait_for(lab, port, token, "hosts", lambda r: len(r["hosts"]) == 3)
        assert "alice holds" in (hosts.get("note") or ""), hosts.get("note")
        found = wait_for(lab, port, token, "reservations", lambda r: bool(r["reservations"]))
        assert {r["owner"] for r in found["reservations"]} == {"alice", "bob"}
        # As a non-root user the stand-in still sees the user's own stray process.
        wait_for(lab, port, token, "violations",
                 lambda r: any(v["gpu"] == "gpu3:1" for v in r["violations"]))  # fmt: skip
        lab_url = f"http://127.0.0.1:{port}/lab?token={token}"
        page = urllib.request.urlopen(lab_url, timeout=30)
        assert b"jupyter-gpuhive" in page.read(), "the page does not load the extension"
    finally:
        os.killpg(lab.pid, 15)
        lab.wait(30)


def demo_load(home: Path) -> list[int]:
    """The demo's simulated GPU processes that binder/start left running (their environment
    names a simulated host config under `home`)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if b"GPUHIVE_SIM_CONFIG=" + str(home).encode() in environ:
            found.append(int(entry.name))
    return found


def wait_for(
    lab: subprocess.Popen[bytes], port: int, token: str, path: str, ok: object, timeout: float = 180
) -> dict:
    """GET an API path until `ok(reply)` holds (while the server runs)."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline and lab.poll() is None:
        try:
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/gpuhive/api/{path}",
                headers={"Authorization": f"token {token}"},
            )
            with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - http
                last = json.loads(response.read())
            if ok(last):  # type: ignore[operator]
                return last  # type: ignore[return-value]
        except OSError as error:
            last = error
        time.sleep(1)
    raise AssertionError(f"GET {path}: {last}")


if __name__ == "__main__":
    sys.exit(main())
