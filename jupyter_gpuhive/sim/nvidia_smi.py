"""The ``nvidia-smi`` stand-in: ``python -m jupyter_gpuhive.sim.nvidia_smi ARGS``.

It reads the simulated host from the JSON file named by ``GPUHIVE_SIM_CONFIG`` on every call
(so fault knobs apply at once), finds the real processes on its GPUs (see ``processes``) and
prints ``--query-gpu``, ``--query-compute-apps``, ``-q -x`` and ``-L`` in nvidia-smi's formats.

The two CSV queries and ``-L`` go through ``fastpath`` (no dataclasses, json, pathlib or typing to
import): each call starts a fresh interpreter, so imports are most of its cost. Everything else,
and any config the fast path declines, takes the full path through the dataclass model.

`install_nvidia_smi` writes an executable ``nvidia-smi`` into a bin directory for ``PATH``. It
carries its own copy of these modules and runs on an interpreter every user may execute, so the
stand-in works for any UNIX user, whatever the permissions of this checkout or virtualenv.
Standard library only.

MIG (a GPU with ``mig`` slices in the config), and where each format comes from:
- taken from real output (the samples of drivers 470-575 the project keeps): the ``-L`` lines
  (``  MIG 3g.40gb     Device  0: (UUID: MIG-…)`` under their GPU); ``--query-gpu`` listing only
  physical GPUs, with ``[N/A]`` utilisation on a GPU in MIG mode; ``--query-compute-apps`` giving
  a process on a slice its parent GPU's UUID; ``-q -x`` with ``<mig_mode>`` and
  ``<mig_devices>`` (index, GPU and compute instance ids, multiprocessor count, memory).
- inferred (from NVIDIA's documentation, not from a captured sample): the ``<gpu_instance_id>``
  and ``<compute_instance_id>`` values of a process on a slice in ``-q -x`` (the samples show
  them only as N/A); a slice's used memory as the sum of its processes' (no base usage); the
  fields real drivers add to ``<mig_device>`` (ECC, BAR1), left out; the summary table's MIG
  section (approximate). A process's slice is the one its ``CUDA_VISIBLE_DEVICES`` names by
  MIG UUID (see ``processes``); a re-partition is a new config file (read on every call).
"""

from __future__ import annotations

import os
import sys
import time

from .core import CONFIG_ENV, HOST_ENV
from .query import UnknownField

TYPE_CHECKING = False
if TYPE_CHECKING:  # the stand-in imports this module on every call: keep it light
    from collections.abc import Mapping, Sequence
    from pathlib import Path
    from typing import TextIO

    from .snapshot import HostSnapshot

USAGE_EXIT = 2
NOT_FOUND_EXIT = 6
JUNK = "#%@!~ NVML ?? 0xDEADBEEF garbled ???\nGPU-c1e2,, MiB MiB, [N/\n\x7f\x7f~~\n"
INVALID_ARGS = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n\n"
HELP = """NVIDIA System Management Interface (jupyter-gpuhive simulation)

    nvidia-smi                 (summary table, approximate)
    nvidia-smi -L
    nvidia-smi -q -x [-i ID]
    nvidia-smi --query-gpu=FIELDS --format=csv[,noheader][,nounits] [-i ID]
    nvidia-smi --query-compute-apps=FIELDS --format=csv[,noheader][,nounits]
    nvidia-smi --help-query-gpu  (the fields the config's driver generation knows)
    nvidia-smi topo -m         (the layout is the config's "topology")

The simulated host is read from $GPUHIVE_SIM_CONFIG on every call.
"""
MODULES = (
    "__init__.py",
    "core.py",
    "query.py",
    "fastpath.py",
    "inventory.py",
    "processes.py",
    "snapshot.py",
    "formats.py",
    "table.py",
    "topology.py",
    "health.py",
    "generations.py",  # what each driver generation knows, prints and fails with
    "amd_smi.py",  # the amd-smi and rocm-smi stand-ins, installed beside it
)


class UsageError(Exception):
    """The command line asks for something nvidia-smi would refuse."""


class Request:
    """What one command line asks for (a plain class: ``dataclasses`` is slow to import)."""

    def __init__(self) -> None:
        self.mode = ""
        self.fields: list[str] = []
        self.csv = False
        self.noheader = False
        self.nounits = False
        self.ids: list[str] = []


def _set_mode(req: Request, mode: str) -> None:
    if req.mode and req.mode != mode:
        raise UsageError(INVALID_ARGS)
    req.mode = mode


def parse_args(argv: Sequence[str]) -> Request:
    """Read an nvidia-smi command line (the subset the stand-in simulates)."""
    req = Request()
    query = xml = False
    args = list(argv)
    while args:
        arg = args.pop(0)
        name, eq, value = arg.partition("=")
        if name in ("--query-gpu", "--query-compute-apps", "--format", "-i", "--id") and not eq:
            if not args:
                raise UsageError(INVALID_ARGS)
            value = args.pop(0)
        if name in ("--query-gpu", "--query-compute-apps"):
            _set_mode(req, "gpu" if name == "--query-gpu" else "apps")
            req.fields = [f.strip() for f in value.split(",") if f.strip()]
        elif name == "--format":
            opts = {o.strip() for o in value.split(",")}
            if "csv" not in opts or opts - {"csv", "noheader", "nounits"}:
                raise UsageError(f'"{value}" is not a valid format.\n\n')
            req.csv, req.noheader, req.nounits = True, "noheader" in opts, "nounits" in opts
        elif name in ("-i", "--id"):
            req.ids = [i.strip() for i in value.split(",") if i.strip()]
        elif arg in ("-q", "--query"):
            query = True
        elif arg in ("-x", "--xml-format"):
            xml = True
        elif arg in ("-qx", "-xq"):
            query = xml = True
        elif arg == "topo" and args[:1] in (["-m"], ["--matrix"]):
            args.pop(0)
            _set_mode(req, "topo")
        elif arg in ("-L", "--list-gpus"):
            _set_mode(req, "list")
        elif arg in ("-h", "--help"):
            _set_mode(req, "help")
        elif arg == "--help-query-gpu":
            _set_mode(req, "helpgpu")
        else:
            raise UsageError(INVALID_ARGS)
    if query or xml:
        if not (query and xml):
            raise UsageError("Only XML output of -q is simulated: use -q -x.\n\n")
        _set_mode(req, "xml")
    if req.mode in ("gpu", "apps") and not req.csv:
        raise UsageError('"--format" option is missing. Use "--format=csv".\n\n')
    if req.mode in ("gpu", "apps") and not req.fields:
        raise UsageError(INVALID_ARGS)
    req.mode = req.mode or "table"
    return req


def _select(snap: HostSnapshot, ids: list[str]) -> HostSnapshot:
    """Keep the GPUs named by `-i` (index, UUID or PCI bus id)."""
    if not ids:
        return snap
    keep = tuple(
        g for g in snap.gpus if {str(g.gpu.index), g.gpu.uuid, g.gpu.pci_bus_id} & set(ids)
    )
    if len(keep) != len(ids):
        raise UsageError("No devices were found\n")
    import dataclasses

    return dataclasses.replace(snap, gpus=keep)


def render(req: Request, snap: HostSnapshot) -> str:
    """The text nvidia-smi prints for `req` on `snap`."""
    from . import formats
    from .table import summary_table

    snap = _select(snap, req.ids)
    if req.mode == "gpu":
        return formats.query_gpu_csv(snap, req.fields, noheader=req.noheader, nounits=req.nounits)
    if req.mode == "apps":
        return formats.query_apps_csv(snap, req.fields, noheader=req.noheader, nounits=req.nounits)
    if req.mode == "xml":
        return formats.query_xml(snap)
    if req.mode == "list":
        return formats.list_gpus(snap)
    if req.mode == "table":
        return summary_table(snap)
    return HELP


def _hang(path: str) -> int:
    """Never answer, like a wedged driver; give up once orphaned or the knob is cleared.

    The way out keeps tests from piling up hung processes: sshd leaves a command running when
    its client goes away, and the command is re-parented once that session ends.
    """
    import contextlib

    from .inventory import SimConfigError, load_config

    parent = os.getppid()
    checked = time.monotonic()
    while os.getppid() == parent:
        time.sleep(0.2)
        if time.monotonic() - checked > 1.0:
            checked = time.monotonic()
            with contextlib.suppress(SimConfigError):
                if not load_config(path).hang:
                    break
    return 1


def main(
    argv: Sequence[str] | None = None,
    environ: Mapping[str, str] | None = None,
    out: TextIO | None = None,
) -> int:
    """Run the stand-in; return its exit status."""
    env = os.environ if environ is None else environ
    stdout = sys.stdout if out is None else out
    try:
        req = parse_args(sys.argv[1:] if argv is None else argv)
    except UsageError as exc:
        stdout.write(str(exc))
        return USAGE_EXIT
    if req.mode == "help":
        stdout.write(HELP)
        return 0
    path = env.get(CONFIG_ENV)
    if not path:
        sys.stderr.write(f"nvidia-smi (gpuhive sim): ${CONFIG_ENV} is not set\n")
        return 1
    try:
        if req.mode in ("gpu", "apps", "list") and not req.ids:
            from .fastpath import fast_answer

            text = fast_answer(
                req.mode, req.fields, req.noheader, req.nounits, path, env.get(HOST_ENV, "")
            )
            if text is not None:
                stdout.write(text)
                stdout.flush()
                return 0
    except UnknownField as exc:
        stdout.write(f"{exc}\n\n")
        return USAGE_EXIT
    return _full_path(req, path, env, stdout)


def _full_path(req: Request, path: str, env: Mapping[str, str], stdout: TextIO) -> int:
    """Answer through the dataclass model: any mode, fault knobs, config errors."""
    from . import formats
    from .inventory import SimConfigError, load_config
    from .processes import scan
    from .snapshot import snapshot

    try:
        config = load_config(path)
    except SimConfigError as exc:
        sys.stderr.write(f"nvidia-smi (gpuhive sim): {exc}\n")
        return 1
    config.host = config.host or env.get(HOST_ENV, "")
    if config.hang:
        return _hang(path)
    if config.delay_s > 0:
        time.sleep(config.delay_s)
    from .generations import failure, help_query_gpu

    if req.mode == "helpgpu":  # static text: a failing driver prints it all the same
        fields, aliases = formats.GPU_FIELDS, formats.GPU_ALIASES
        stdout.write(help_query_gpu(fields, config.driver_version, aliases))
        return 0
    failed = failure(config.driver_failure)
    if failed:
        stdout.write(failed[0])
        return failed[1]
    if config.junk:
        stdout.write(config.junk if isinstance(config.junk, str) else JUNK)
        return 0
    if req.mode == "topo":
        from .topology import TopologyConfigError, topo_matrix

        try:
            stdout.write(topo_matrix(len(config.gpus), getattr(config, "topology", None)))
        except TopologyConfigError as exc:
            sys.stderr.write(f"nvidia-smi (gpuhive sim): {exc}\n")
            return 1
        return 0
    from .health import LOST_EXIT, LOST_FAULTS, lost_message

    lost = [g for g in config.gpus if getattr(g, "fault", None) in LOST_FAULTS]
    if lost and req.mode in ("gpu", "apps", "xml", "list", "table"):
        stdout.write("".join(f"{lost_message(g)}\n" for g in lost))
        config.gpus = [g for g in config.gpus if g not in lost]
    try:
        text = render(req, snapshot(config, scan(config)))
    except UnknownField as exc:
        stdout.write(f"{exc}\n\n")
        return USAGE_EXIT
    except UsageError as exc:
        stdout.write(str(exc))
        return NOT_FOUND_EXIT
    stdout.write(text)
    stdout.flush()
    return LOST_EXIT if lost and req.mode != "topo" else 0


def _everyone_can_run(path: str) -> bool:
    """Whether any user may execute `path` (the file and every directory above it)."""
    import stat
    from pathlib import Path

    real = Path(os.path.realpath(path))
    try:
        if not real.stat().st_mode & stat.S_IXOTH:
            return False
        return all(p.stat().st_mode & stat.S_IXOTH for p in real.parents)
    except OSError:
        return False


def world_python() -> str:
    """An interpreter every user may run: this one if it can, else the system python3."""
    import shutil

    for candidate in (sys.executable, "/usr/bin/python3", shutil.which("python3") or ""):
        if candidate and _everyone_can_run(candidate):
            return candidate
    return sys.executable


def install_nvidia_smi(bin_dir: str | os.PathLike[str], python: str | None = None) -> Path:
    """Write an executable ``nvidia-smi`` stand-in into `bin_dir`; return its path.

    The modules are byte-compiled for the stand-in's interpreter here: the users who run it
    may not write ``__pycache__`` below `bin_dir`, and compiling on every call costs more
    than the call itself.
    """
    import shutil
    import subprocess
    from pathlib import Path

    interpreter = python or world_python()
    bin_path = Path(bin_dir)
    lib = bin_path / ".gpuhive-sim" / "jupyter_gpuhive"
    (lib / "sim").mkdir(parents=True, exist_ok=True)
    here = Path(__file__).parent
    for name in (*MODULES, "nvidia_smi.py"):
        shutil.copyfile(here / name, lib / "sim" / name)
    script = bin_path / "nvidia-smi"
    script.write_text(
        f"#!{interpreter} -IS\n"
        '"""nvidia-smi stand-in of jupyter-gpuhive (generated by install_nvidia_smi)."""\n'
        "import sys\n\n"
        'package = type(sys)("jupyter_gpuhive")  # a module (types is not worth importing)\n'
        f"package.__path__ = [{str(lib)!r}]\n"
        'sys.modules["jupyter_gpuhive"] = package\n'
        "from jupyter_gpuhive.sim.nvidia_smi import main  # noqa: E402\n\n"
        "sys.exit(main())\n",
        encoding="utf-8",
    )
    from .amd_smi import install_amd_smi

    install_amd_smi(bin_path, interpreter)
    compileall = ["-m", "compileall", "-q", "--invalidation-mode", "checked-hash"]
    subprocess.run(
        [interpreter, "-IS", *compileall, str(lib)],
        capture_output=True,
        check=False,
        timeout=120,
    )
    for path in [bin_path, *bin_path.joinpath(".gpuhive-sim").rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    script.chmod(0o755)
    for tool in ("amd-smi", "rocm-smi"):
        (bin_path / tool).chmod(0o755)
    return script


if __name__ == "__main__":
    sys.exit(main())
