"""The kernel's side of a launch: run on the GPU host by the kernel's interpreter (stdlib only).

gpuhive runs this file's source as ``PYTHON -I -S -c SOURCE boot`` (as the reservation's
owner, over SSH or locally; isolated: no current directory, PYTHONPATH, user site or
sitecustomize of the user's can shadow the modules it imports) and writes one JSON line to
its stdin: ``{"key", "signature_scheme", "env", "inherit", "dir", "cwd", "source",
"orphan_timeout"}``. Nothing secret is on a command line: the HMAC key comes on stdin and
goes into a 0600 connection file.

``boot`` makes (or uses the one gpuhive lent it, or on a restart re-checks) a private 0700
directory for the kernel's Unix sockets, writes the connection file (transport ``ipc``,
fixed socket names), builds the kernel's whole environment (the login environment when
``inherit``, else nothing; then ``env``; then ``JPY_PARENT_PID``, the process that started
this one: the kernel exits about a second after that process is gone, e.g. when the SSH
connection drops) and replaces itself (``execve``, same pid, started in that directory)
with ``run``. ``run`` drops the directory from its module path, enters the working
directory and starts ipykernel (the kernel's own environment applies from here: the user's
packages). Once its sockets are bound it prints one marked line with its pid, process group
and directory: the user's words, on which gpuhive acts with no more rights than the
user's own. Then it exits if its stdin stays silent for ``orphan_timeout`` seconds (gpuhive
writes a line every second), which also ends a kernel whose connection died without a
word. Failures print a marked line with a code: gpuhive turns it into a sentence.
"""

import json
import os
import select
import shutil
import stat
import sys
import tempfile
import threading
import time

MARK = "GPUHIVE-KERNEL"
SOCKET_NAME = "k"  # sockets are DIR/k-1 … DIR/k-5 (ZMQ ipc names them IP-PORT)
CAPS_SOURCE = "GPUHIVE_CAPS_SOURCE"  # jobs/caps.py's SOURCE_ENV
PORTS = {"shell_port": 1, "iopub_port": 2, "stdin_port": 3, "control_port": 4, "hb_port": 5}


def say(kind, fd=1, **fields):
    """One marked line on stdout (or `fd`) for gpuhive to read."""
    os.write(fd, f"\n{MARK}-{kind} {json.dumps(fields)}\n".encode())


def fail(code, **fields):
    say("ERROR", code=code, python=sys.executable, **fields)
    sys.exit(3)


def private_dir(wanted):
    """A 0700 directory of ours: `wanted` when it is one (a restart), else a new one."""
    if wanted:
        try:
            info = os.lstat(wanted)
        except OSError:
            info = None
        if info is not None:
            mine = info.st_uid == os.geteuid() and stat.S_ISDIR(info.st_mode)
            if not mine or info.st_mode & 0o077:
                fail("bad-dir", dir=wanted)
            return wanted
    return tempfile.mkdtemp(prefix="gpuhive-kernel-")  # mode 0700, a name nobody guesses


def sweep():
    """Remove our socket directories whose kernel died without cleaning up (a dropped
    connection ends a kernel with os._exit); a directory touched in the last minute is left
    alone (a restart may be on its way)."""
    base = tempfile.gettempdir()
    try:
        names = [n for n in os.listdir(base) if n.startswith("gpuhive-kernel-")]
    except OSError:
        return
    for name in names:
        path = os.path.join(base, name)
        try:
            info = os.lstat(path)
            if info.st_uid != os.geteuid() or not stat.S_ISDIR(info.st_mode):
                continue
            if time.time() - info.st_mtime < 60:
                continue
            with open(os.path.join(path, "pid")) as found:
                pid = int(found.read())
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except (OSError, ValueError):
            continue


def boot(given=None):
    try:
        config = json.loads(sys.stdin.readline())
    except ValueError:
        fail("bad-input")
    sweep()
    folder = private_dir(config.get("dir") or given)
    connection = {"transport": "ipc", "ip": os.path.join(folder, SOCKET_NAME), **PORTS,
                  "key": config["key"], "signature_scheme": config["signature_scheme"],
                  "kernel_name": ""}  # fmt: skip
    path = os.path.join(folder, "connection.json")
    fd = os.open(path + ".new", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(connection, out)
    os.replace(path + ".new", path)
    env = dict(os.environ) if config.get("inherit") else {}
    env.update(config.get("env") or {})
    capped(folder, env)
    env["JPY_PARENT_PID"] = str(os.getppid())
    cwd = config.get("cwd") or env.get("HOME") or "/"
    os.chdir(folder)  # `-c` puts it first on the module path: only our files are there
    source = config["source"]
    limit = str(float(config.get("orphan_timeout") or 0))
    argv = [sys.executable, "-c", source, "run", path, limit, cwd]
    os.execve(sys.executable, argv, env)  # noqa: S606


def capped(folder, env):
    """A kernel on a share of a GPU: gpuhive's start-up (jobs/capstart.py, packed in `env`)
    goes into the private directory as `sitecustomize.py`, first on PYTHONPATH, so that the
    kernel's PyTorch and TensorFlow are capped to the share when the user imports them."""
    packed = env.pop(CAPS_SOURCE, None)
    if not packed:
        return
    import base64
    import gzip

    lib = os.path.join(folder, "caps")
    os.makedirs(lib, mode=0o700, exist_ok=True)
    with open(os.path.join(lib, "sitecustomize.py"), "wb") as out:
        out.write(gzip.decompress(base64.b64decode(packed)))
    env["PYTHONPATH"] = lib + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")


def watch(fd, limit):
    """Exit when `fd` (our stdin) brings nothing for `limit` seconds (gpuhive writes a line
    every second) or ends: the connection to the server is gone, even one that died silently."""
    while True:
        ready, _, _ = select.select([fd], [], [], limit)
        if not ready or not os.read(fd, 4096):
            os._exit(4)


def run(path, limit, cwd):
    if sys.path and sys.path[0] in ("", "."):
        del sys.path[0]  # as ipykernel_launcher: the working directory is not a module path
    try:
        os.chdir(cwd)
    except OSError:
        os.chdir("/")
    try:
        from ipykernel.kernelapp import IPKernelApp
    except ImportError:
        fail("no-ipykernel")

    out = os.dup(1)  # ipykernel takes over fd 1 (its output goes to iopub from now on)
    pings = os.dup(0)  # not inherited: the cells' subprocesses get /dev/null, not our pings
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    app = IPKernelApp.instance()
    app.initialize(["-f", path])  # binds the sockets (Unix sockets in the private directory)
    folder = os.path.dirname(path)
    with open(os.path.join(folder, "pid"), "w") as note:  # for `sweep` after an abrupt end
        note.write(str(os.getpid()))
    say("READY", out, pid=os.getpid(), pgid=os.getpgid(0), dir=folder)
    if limit > 0:
        threading.Thread(target=watch, args=(pings, limit), daemon=True).start()
    os.close(out)
    app.start()


if __name__ == "__main__":
    if sys.argv[1:2] == ["boot"]:
        boot(sys.argv[2] if len(sys.argv) > 2 else None)  # a folder made for a container
    elif sys.argv[1:2] == ["run"]:
        run(sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else 0.0,
            sys.argv[4] if len(sys.argv) > 4 else "/")  # fmt: skip
    else:
        fail("bad-input")
