"""The lock (requirements/lock.txt) covers pyproject.toml, and this venv was installed from it.

A fresh machine installs exactly the lock (`make test`, `make demo`), so a dependency's new release
cannot change what a new contributor gets (issue #48: cryptography 51 on 2026-12-07).
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements" / "lock.txt"
BUILD_IN = ROOT / "requirements" / "build.in"


def pins(text: str) -> dict[str, Version]:
    """name → version of each `name==version` line of a lock."""
    found: dict[str, Version] = {}
    for line in text.splitlines():
        spec = line.split("#", 1)[0].strip()
        if spec:
            name, sep, version = spec.partition("==")
            assert sep, f"a lock line that pins nothing: {line!r}"
            found[canonicalize_name(name)] = Version(version.strip())
    return found


def declared() -> list[Requirement]:
    """Every requirement pyproject.toml and requirements/build.in name (all extras, the build's)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    names = [*project["project"]["dependencies"], *project["build-system"]["requires"]]
    for extra in project["project"]["optional-dependencies"].values():
        names += extra
    names += [ln for ln in BUILD_IN.read_text().splitlines() if ln and not ln.startswith("#")]
    return [Requirement(n) for n in names]


def unmet(requirements: list[Requirement], locked: dict[str, Version]) -> list[str]:
    """The requirements the lock leaves out or pins to a version they exclude."""
    wrong = []
    for req in requirements:
        have = locked.get(canonicalize_name(req.name))
        if have is None or not req.specifier.contains(have, prereleases=True):
            wrong.append(f"{req} (lock: {have})")
    return wrong


def test_the_lock_pins_every_declared_requirement_within_its_range() -> None:
    assert unmet(declared(), pins(LOCK.read_text())) == []


def test_a_requirement_outside_the_lock_is_caught() -> None:
    locked = pins("sqlalchemy==2.0.1\n")
    assert unmet([Requirement("sqlalchemy>=2.1"), Requirement("orjson")], locked) == [
        "sqlalchemy>=2.1 (lock: 2.0.1)",
        "orjson (lock: None)",
    ]


def test_this_venv_holds_the_locked_versions() -> None:
    """What is installed is what the lock says (torch's local '+cpu' label aside)."""
    drift = []
    for name, version in pins(LOCK.read_text()).items():
        try:
            have = Version(metadata.version(name))
        except metadata.PackageNotFoundError:
            continue  # the build's tools and platform-only wheels need not be in the venv
        if have.public != version.public:
            drift.append(f"{name}: installed {have}, locked {version}")
    assert drift == [], "run `make` again (the venv predates the lock):\n" + "\n".join(drift)
