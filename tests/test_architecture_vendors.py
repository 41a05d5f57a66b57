"""The GPU vendor seam holds: a vendor's tool, its variables and parsers stay in hosts/vendors/.

Outside hosts/vendors/ and sim/ no module names `nvidia-smi` or `CUDA_VISIBLE_DEVICES` (a
message that must name the tool takes `vendor.tool_name`; pinning comes from
`vendor.pinning`), and none imports a vendor's own modules (hosts/vendors/nvidia_*.py):
only the interface, `jupyter_gpuhive.hosts.vendors`. Protection, monitoring and the doctor
read GPUs as model/gpus.py's neutral values. Each rule is shown to fail on a violation.
"""

from __future__ import annotations

import ast
from pathlib import Path

import jupyter_gpuhive

PACKAGE = "jupyter_gpuhive"
ROOT = Path(jupyter_gpuhive.__file__).resolve().parent
VENDOR_WORDS = ("nvidia" + "-smi", "CUDA_" + "VISIBLE_DEVICES")
VENDORS = "hosts.vendors"
# From the interface, what protection, monitoring and the doctor may take: the registry and the
# vendor object (its pinning, tool name, topology and doctor checks), never a reading of its own.
NEUTRAL_USERS = ("protection", "monitor", "cli.doctor")
INTERFACE = frozenset({"Vendor", "vendor_of", "vendor_named", "default_vendor", "DoctorCheck",
                       "DoctorOutput", "Sections"})  # fmt: skip


def _name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _outside(module: str) -> bool:
    return not (module == VENDORS or module.startswith(f"{VENDORS}.") or module == "sim"
                or module.startswith("sim."))  # fmt: skip


def vendor_words(module: str, source: str) -> list[str]:
    """The vendor words a module outside hosts/vendors and sim names."""
    return [w for w in VENDOR_WORDS if w in source] if _outside(module) else []


def _imports(module: str, source: str) -> list[tuple[str, tuple[str, ...]]]:
    """(imported module, names) for each import of a module, relative ones resolved."""
    found = []
    package = module.split(".") if module else []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(a.name.removeprefix(f"{PACKAGE}."), ()) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package[: len(package) - node.level + 1] if node.level > 1 else package
                # a module's own package: drop its last part unless it is a package __init__
                base = ".".join([*up, base] if base else up)
            names = tuple(a.name for a in node.names)
            found.append((base.removeprefix(f"{PACKAGE}."), names))
    return found


def vendor_imports(module: str, source: str, is_package: bool = False) -> list[str]:
    """Imports of a vendor's own modules (hosts.vendors.X) from outside hosts/vendors, sim."""
    if not _outside(module):
        return []
    where = module if is_package else module.rpartition(".")[0]
    bad = []
    for target, names in _imports(where, source):
        if target.startswith(f"{VENDORS}."):
            bad.append(target)
        elif target == VENDORS:
            bad += [f"{VENDORS}.{n}" for n in names if n.startswith("nvidia")]
    return bad


def non_neutral(module: str, source: str, is_package: bool = False) -> list[str]:
    """What protection, monitor or the doctor take from the vendor interface beyond it."""
    if not any(module == u or module.startswith(f"{u}.") or module.startswith(f"{u}_")
               for u in NEUTRAL_USERS):  # fmt: skip
        return []
    where = module if is_package else module.rpartition(".")[0]
    return [
        f"{target}.{name}"
        for target, names in _imports(where, source)
        if target == VENDORS or target.startswith(f"{VENDORS}.")
        for name in names or ("*",)
        if target != VENDORS or name not in INTERFACE
    ]


def _modules() -> list[tuple[str, str, bool]]:
    return [
        (_name(p), p.read_text(), p.name == "__init__.py")
        for p in sorted(ROOT.rglob("*.py"))
        if "__pycache__" not in p.parts
    ]


def test_no_module_outside_the_vendors_names_a_vendors_tool() -> None:
    named = {m for m, source, _ in _modules() if vendor_words(m, source)}
    assert named == set(), sorted(named)


def test_no_module_outside_the_vendors_imports_a_vendors_modules() -> None:
    found = {m: bad for m, source, pkg in _modules() if (bad := vendor_imports(m, source, pkg))}
    assert found == {}


def test_protection_monitor_and_the_doctor_take_only_the_interface() -> None:
    found = {m: bad for m, source, pkg in _modules() if (bad := non_neutral(m, source, pkg))}
    assert found == {}


def test_the_rules_see_violations() -> None:
    word = "nvidia" + "-smi"
    assert vendor_words("jobs.template", f'RUN = "{word} -L"') == [word]
    assert vendor_words("hosts.vendors.nvidia", f'RUN = "{word} -L"') == []
    assert vendor_words("sim.core", f"# {word}") == []
    assert vendor_imports("monitor.sampler", "from ..hosts.vendors.nvidia_smi import parse_csv")
    assert vendor_imports("protection.kill", "from ..hosts.vendors import nvidia_read")
    assert vendor_imports("jobs.x", "import jupyter_gpuhive.hosts.vendors.nvidia_health")
    assert not vendor_imports("monitor.sampler", "from ..hosts.vendors import vendor_of")
    assert not vendor_imports("hosts.vendors.nvidia", "from .nvidia_smi import parse_csv")
    assert non_neutral("protection.violations", "from ..hosts.vendors import VendorReading")
    assert non_neutral("cli.doctor_checks", "from ..hosts.vendors.nvidia_doctor import judge")
    assert not non_neutral("monitor.topology", "from ..hosts.vendors import vendor_of")
    assert not non_neutral("jobs.template", "from ..hosts.vendors.nvidia_smi import x")
