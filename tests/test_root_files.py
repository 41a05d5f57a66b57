"""Root writes only where only root can (issue #41, findings 4 and 5): a real second user
plants links, folders and files first; `doctor --save` and the SQLite store refuse them with a
sentence, and nothing of root's is written through them."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_gpuhive.files import UnsafePath, open_dir, write_file
from jupyter_gpuhive.sim.users import ensure_user, is_root
from jupyter_gpuhive.store import Store
from tests.test_doctor_cli import gpuhive, sim_up

pytestmark = pytest.mark.skipif(not is_root(), reason="plays a second real user (needs root)")

MALLORY = "rfmal"
SECRET = "root only\n"


def as_mallory(*argv: str) -> None:
    """Run `argv` as a real process of the other user."""
    subprocess.run(["runuser", "-u", MALLORY, "--", *argv], check=True, timeout=30)


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder everyone may write, sticky (like /tmp), that root made."""
    ensure_user(MALLORY)
    path = Path(tempfile.mkdtemp(prefix="gpuhive-drop-"))
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def target(tmp_path: Path) -> Path:
    """A root-only file (as /etc/cron.d/… would be)."""
    path = tmp_path / "root-only"
    path.write_text(SECRET)
    path.chmod(0o600)
    tmp_path.chmod(0o755)  # she may name it, not write it
    return path


@pytest.mark.parametrize("whose", ["hers", "sticky"])
def test_doctor_save_refuses_her_link_and_leaves_the_target_alone(
    tmp_path: Path, shared: Path, target: Path, whose: str
) -> None:
    """`hers`: she made DIR first; `sticky`: DIR is root's drop folder (1777), she made sim1."""
    sim_up(tmp_path)
    save = shared / "doctor"
    if whose == "sticky":
        save.mkdir(mode=0o1777)
        save.chmod(0o1777)
        as_mallory("mkdir", "-m", "777", str(save / "sim1"))
    else:
        as_mallory("mkdir", "-m", "777", "-p", str(save / "sim1"))
    as_mallory("ln", "-s", str(target), str(save / "sim1" / "q-x.xml"))
    done = gpuhive(tmp_path, "doctor", "--save", str(save))
    assert done.returncode == 1
    refused = save if whose == "hers" else save / "sim1"
    assert f"Refused: {refused} belongs to {MALLORY}" in done.stderr, done.stderr
    assert "Nothing more saved." in done.stderr
    assert target.read_text() == SECRET and (target.stat().st_mode & 0o777) == 0o600
    assert sorted(p.name for p in (save / "sim1").iterdir()) == ["q-x.xml"]


def test_doctor_save_makes_its_folders_0700_and_writes_through_no_link(
    tmp_path: Path, shared: Path
) -> None:
    sim_up(tmp_path)
    save = shared / "mine"
    done = gpuhive(tmp_path, "doctor", "--save", str(save))
    assert done.returncode in (0, 1), done.stderr  # a warning or a failed check is fine here
    for folder in (save, save / "sim1"):
        info = os.lstat(folder)
        assert (info.st_uid, info.st_mode & 0o777) == (0, 0o700)
    assert (save / "sim1" / "q-x.xml").stat().st_mode & 0o777 == 0o600


def test_a_link_root_made_is_followed_and_one_she_made_is_not(shared: Path, tmp_path: Path) -> None:
    """The check can tell whose link it is: root's own link is followed."""
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (shared / "roots-link").symlink_to(real)
    os.close(open_dir(shared / "roots-link"))
    write_file(shared / "roots-link" / "x", "ok")
    assert (real / "x").read_text() == "ok"
    as_mallory("ln", "-s", str(real), str(shared / "her-link"))
    with pytest.raises(UnsafePath, match=f"is a link that {MALLORY} made"):
        write_file(shared / "her-link" / "y", "no")
    assert not (real / "y").exists()


def test_a_store_file_she_made_first_is_refused_with_why(shared: Path) -> None:
    """She made the SQLite file (0666) while the folder was open; the admin then closed the
    folder: the file is still hers, and refused."""
    folder = shared / "store"
    folder.mkdir(mode=0o1777)
    folder.chmod(0o1777)
    db = folder / "gpuhive.sqlite"
    as_mallory("sh", "-c", f"umask 0; : > {db}")
    with pytest.raises(UnsafePath, match="others may write in"):
        Store(f"sqlite:///{db}")  # the folder first: she could plant the -wal file there
    folder.chmod(0o755)
    with pytest.raises(UnsafePath) as refused:
        Store(f"sqlite:///{db}")
    message = str(refused.value)
    assert (
        message.startswith("The SQLite store cannot be used.")
        and f"belongs to {MALLORY}" in message
    )
    assert "remove it" in message
    assert db.stat().st_size == 0  # never migrated


def test_a_store_file_open_to_others_is_refused_and_a_new_one_is_0600(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    loose = tmp_path / "loose.sqlite"
    loose.touch(mode=0o644)
    loose.chmod(0o644)
    with pytest.raises(UnsafePath, match=r"others may open .* \(mode 0644\).*chmod 600"):
        Store(f"sqlite:///{loose}")
    fresh = tmp_path / "fresh.sqlite"
    store = Store(f"sqlite:///{fresh}").open()
    try:
        assert fresh.stat().st_mode & 0o777 == 0o600
    finally:
        store.close()
    store = Store(f"sqlite:///{fresh}").open()  # its own file again: used
    store.close()
