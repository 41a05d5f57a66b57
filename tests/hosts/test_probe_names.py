"""Hostile process names (issue #27, finding 2): real processes whose argv[0] holds newlines,
commas, quotes, control characters, invalid UTF-8 or 4 KiB never blind a host, never hide
another process, never change an owner and never put another user's process on a GPU."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from jupyter_gpuhive.hosts.probe import MARK, PROBE_COMMAND, HostSample, parse_probe
from jupyter_gpuhive.model import utcnow
from jupyter_gpuhive.sim.users import start_gpu_process
from tests.hosts.helpers import local_decl, ps_line

PY = shutil.which("python3", path="/usr/bin:/bin") or "/usr/bin/python3"  # readable by all
# execv with a bytes argv[0]: any byte but NUL, as a hostile user can.
_EXEC = "import os, sys; os.execv('/bin/sleep', [bytes.fromhex(sys.argv[1]), '600'])"


def hostile_names(victim_pid: int, gpu_uuid: str) -> dict[str, bytes]:
    """argv[0] values that broke (or framed through) the old CSV with a process-name column."""
    return {
        "newline": b"x\ny",
        "commas": b"a, b, c,, d",
        # the old field order (pid, process_name, gpu_uuid, used_memory): one line becomes two
        "frame": f"x, {gpu_uuid}, 1\n{victim_pid}, y".encode(),
        "frame-leading": f"\n{victim_pid}, z".encode(),
        "quotes": b"'\"`$(id)` \\'\\\"",
        "control": b"\x01\x1b[31m\r\x7f\tq",
        "invalid-utf8": b"\xff\xfe\xc3(\xa0\xa1",
        "marker": f"m\n{MARK}ps 0\n{victim_pid} {victim_pid} root x".encode(),
        "huge": b"A" * 4096,
        # line breaks to Python's str.splitlines but not to `ps` or the shell (UTF-8 locale)
        "unicode-breaks": f"u\u2028{victim_pid} {victim_pid} root x\x85\x1cy".encode(),
    }


def start_plain(user: str, seconds: str) -> subprocess.Popen[bytes]:
    """A process of `user` that never touches a GPU."""
    return subprocess.Popen(
        ["sleep", seconds], user=user, stdin=subprocess.DEVNULL, start_new_session=True
    )


def utf8_decl(host):  # type: ignore[no-untyped-def]
    """The host's local declaration with a UTF-8 locale (ps then prints non-ASCII as is)."""
    decl = local_decl(host)
    decl.extra["env"]["LC_ALL"] = "C.UTF-8"
    return decl


async def _probe(pool, name: str) -> HostSample:  # type: ignore[no-untyped-def]
    result = await pool.run(name, PROBE_COMMAND)
    assert result.exit_status == 0, result.stderr
    return parse_probe(name, result.stdout, utcnow())


@pytest.mark.parametrize(
    "kind",
    [
        "newline",
        "commas",
        "frame",
        "frame-leading",
        "quotes",
        "control",
        "invalid-utf8",
        "marker",
        "huge",
        "unicode-breaks",
    ],
)
async def test_hostile_process_name_costs_nothing_but_its_own_name(
    kind, make_local_host, make_pool, sim_users, gpu_processes
) -> None:
    alice, bob = sim_users
    host = make_local_host()
    gpus = host.config.gpus
    # bob: a GPU process on GPU 0, and a process that never touches a GPU (the framing target)
    honest = start_gpu_process(host.name, [0], user=bob, command=("sleep", "601"), mem_mib=321)
    idle = start_plain(bob, "602")
    gpu_processes.extend([honest, idle])
    name = hostile_names(idle.pid, gpus[1].uuid)[kind]
    intruder = start_gpu_process(
        host.name, [1], user=alice, command=(PY, "-c", _EXEC, name.hex()), mem_mib=77
    )
    gpu_processes.append(intruder)
    pool = make_pool([utf8_decl(host)])

    sample = await _probe(pool, host.name)
    for _ in range(20):  # the intruder may still be python (not yet exec'd, not yet a GPU process)
        if intruder.pid in {p.pid for p in sample.processes}:
            break
        sample = await _probe(pool, host.name)

    assert sample.gpu_error is None
    assert len(sample.gpus) == 4
    by_pid = {p.pid: p for p in sample.processes}
    assert set(by_pid) == {honest.pid, intruder.pid}  # the idle one is never framed
    assert (by_pid[honest.pid].user, by_pid[honest.pid].gpu_uuid) == (bob, gpus[0].uuid)
    assert by_pid[honest.pid].command == "sleep 601"
    assert by_pid[honest.pid].used_memory_mib == 321
    assert (by_pid[intruder.pid].user, by_pid[intruder.pid].gpu_uuid) == (alice, gpus[1].uuid)
    assert by_pid[intruder.pid].used_memory_mib == 77
    assert "\n" not in by_pid[intruder.pid].command


async def test_many_hostile_names_at_once_on_a_mig_host(
    make_local_host, make_pool, sim_users, gpu_processes
) -> None:
    """All the names together, next to honest processes on a whole GPU and on a MIG slice."""
    alice, bob = sim_users
    host = make_local_host("mig")
    gpus = host.config.gpus
    mig_gpu = next(g for g in gpus if g.mig)
    plain = next(g for g in gpus if not g.mig)
    on_slice = start_gpu_process(host.name, [mig_gpu.mig[1].uuid], user=bob, mem_mib=11)
    on_gpu = start_gpu_process(host.name, [plain.uuid], user=bob, mem_mib=12)
    idle = start_plain(bob, "603")
    gpu_processes.extend([on_slice, on_gpu, idle])
    intruders = {}
    for i, name in enumerate(hostile_names(idle.pid, plain.uuid).values()):
        where = mig_gpu.mig[0].uuid if i % 2 else plain.uuid
        proc = start_gpu_process(
            host.name, [where], user=alice, command=(PY, "-c", _EXEC, name.hex())
        )
        gpu_processes.append(proc)
        intruders[proc.pid] = where
    pool = make_pool([utf8_decl(host)])

    sample = await _probe(pool, host.name)
    for _ in range(20):
        if set(intruders) <= {p.pid for p in sample.processes}:
            break
        sample = await _probe(pool, host.name)

    assert sample.gpu_error is None
    by_pid = {p.pid: p for p in sample.processes}
    assert set(by_pid) == {on_slice.pid, on_gpu.pid, *intruders}
    assert (by_pid[on_slice.pid].user, by_pid[on_slice.pid].mig_uuid) == (bob, mig_gpu.mig[1].uuid)
    assert (by_pid[on_gpu.pid].user, by_pid[on_gpu.pid].gpu_uuid) == (bob, plain.uuid)
    for pid, where in intruders.items():
        assert by_pid[pid].user == alice
        assert where in (by_pid[pid].gpu_uuid, by_pid[pid].mig_uuid)
    assert [m.uuid for m in sample.slices[mig_gpu.uuid]] == [m.uuid for m in mig_gpu.mig]


FIXTURES = Path(__file__).parent.parent / "fixtures" / "nvidia-smi"
PARENT = "GPU-c1e2da59-5c26-e34c-59a7-373b4ab9404c"  # the MIG GPU of the `mig` samples


def _info(gi: int, pid: int, name: str, mem: int) -> str:
    return (
        f"\t\t\t<process_info>\n\t\t\t\t<gpu_instance_id>{gi}</gpu_instance_id>\n"
        f"\t\t\t\t<compute_instance_id>0</compute_instance_id>\n\t\t\t\t<pid>{pid}</pid>\n"
        f"\t\t\t\t<type>C</type>\n\t\t\t\t<process_name>{name}</process_name>\n"
        f"\t\t\t\t<used_memory>{mem} MiB</used_memory>\n\t\t\t</process_info>\n"
    )


def test_unescaped_names_in_nvidia_smi_xml_neither_blind_nor_move_a_process() -> None:
    """Real nvidia-smi may print a process name into -q -x as it is: `&`, `<`, a driver
    failure's words, or elements that claim another process for another slice."""
    forged = (
        "a & b <c> NVIDIA-SMI has failed\x01\n@@gpuhive:ps 0</process_name>"
        "<used_memory>1 MiB</used_memory></process_info>"
        + _info(13, 4242, "x", 1).split("x</process_name>")[0]  # the real end closes it
    )
    infos = _info(5, 4242, "python", 700) + _info(13, 5151, forged, 300)
    xml = (FIXTURES / "q-x.mig.xml").read_text()
    xml = xml.replace("<processes>\n\t\t</processes>", f"<processes>\n{infos}\t\t</processes>", 1)
    sections = {
        "gpus": (FIXTURES / "query-gpu.mig.csv").read_text(),
        "apps": f"pid, gpu_uuid, used_memory [MiB]\n4242, {PARENT}, 700\n5151, {PARENT}, 300\n",
        "list": (FIXTURES / "L.mig.txt").read_text(),
        "xml": "".join(f"|{line}\n" for line in xml.split("\n")),  # as the probe sends it
        "ps": f"{ps_line(4242, 4242, 'gh-bob', 'python train.py')}\n{ps_line(5151, 5151, 'gh-alice', '?')}\n",
    }
    text = "".join(f"{MARK}{name} 0\n{body.rstrip()}\n" for name, body in sections.items())

    sample = parse_probe("mig1", text, utcnow())

    assert sample.gpu_error is None
    parts = sample.slices[PARENT]
    assert [m.gpu_instance_id for m in parts] == [1, 5, 13]
    placed = {p.pid: (p.user, p.mig_uuid) for p in sample.processes}
    assert placed[5151] == ("gh-alice", parts[2].uuid)
    assert placed[4242][0] == "gh-bob"
    assert placed[4242][1] != parts[2].uuid  # never the slice the name claimed for it


def test_xml_a_name_made_unreadable_costs_the_slices_only() -> None:
    """Where nvidia-smi's XML cannot be read at all, GPUs, processes and owners stay."""
    xml = (FIXTURES / "q-x.mig.xml").read_text()
    infos = _info(5, 4242, "python", 700) + _info(13, 5151, "a</process_name></gpu>", 300)
    xml = xml.replace("<processes>\n\t\t</processes>", f"<processes>\n{infos}\t\t</processes>", 1)
    sections = {
        "gpus": (FIXTURES / "query-gpu.mig.csv").read_text(),
        "apps": f"pid, gpu_uuid, used_memory [MiB]\n4242, {PARENT}, 700\n5151, {PARENT}, 300\n",
        "list": (FIXTURES / "L.mig.txt").read_text(),
        "xml": "".join(f"|{line}\n" for line in xml.split("\n")),
        "ps": f"{ps_line(4242, 4242, 'gh-bob', 'python train.py')}\n{ps_line(5151, 5151, 'gh-alice', 'a')}\n",
    }
    text = "".join(f"{MARK}{name} 0\n{body.rstrip()}\n" for name, body in sections.items())

    sample = parse_probe("mig1", text, utcnow())

    assert sample.gpu_error is None
    assert len(sample.gpus) == 2
    assert {(p.pid, p.user) for p in sample.processes} == {(4242, "gh-bob"), (5151, "gh-alice")}
    assert sample.slices == {}
