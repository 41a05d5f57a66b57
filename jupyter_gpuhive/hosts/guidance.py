"""What to do next, in words and commands: with no hosts, and for a host that is down.

The REST API adds it to `GET hosts` (`setup` when there are no hosts, `advice` on a host that
is down), so the panel, the widgets and the magics all say the same thing. Each step is a
sentence and, where there is one, the exact command or line to copy.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .vendors import default_vendor, vendor_of

_REFUSED = re.compile(r"refused the key for user (\S+?)[:\s]")
_UNTRUSTED = re.compile(r"host key of \S+ is not trusted")
_NO_ROOT = re.compile(r"cannot run as (\S+) without root")


def step(text: str, command: str | None = None) -> dict[str, Any]:
    """One step: a sentence, and the command (or line) to copy, if any."""
    return {"text": text, "command": command}


def setup() -> dict[str, Any]:
    """The first steps on a server with no GPU hosts."""
    return {
        "message": "No GPU hosts are configured yet.",
        "steps": [
            step(
                "Add a GPU machine (gpuhive logs in over SSH; name, address and account "
                "are yours to choose). A running server picks it up within seconds:",
                "jupyter gpuhive hosts add gpu1 gpu1.example.org --user $USER",
            ),
            step(
                "Print gpuhive's public key; add it to ~/.ssh/authorized_keys of that "
                "account on the machine:",
                "jupyter gpuhive key",
            ),
            step("Trust the machine's SSH host key:", "jupyter gpuhive trust gpu1"),
            step("Check that gpuhive sees its GPUs:", "jupyter gpuhive test"),
            step(
                "Or write a config file with every setting, commented, to edit by hand:",
                "jupyter gpuhive init",
            ),
        ],
        "note": f"On a machine with GPUs, where {default_vendor().tool_name} runs, gpuhive "
        "uses that machine by itself: no configuration needed.",
    }


def setup_text() -> str:
    """`setup()` as plain text (terminals, magics)."""
    found = setup()
    lines = [found["message"]]
    for number, item in enumerate(found["steps"], 1):
        lines.append(f"{number}. {item['text']}")
        if item["command"]:
            lines.append(f"     {item['command']}")
    lines.append(found["note"])
    return "\n".join(lines)


def host_advice(
    host: dict[str, Any], public_key: Callable[[], str | None]
) -> dict[str, Any] | None:
    """For a host that is down (or whose GPU tool fails): the reason and the fix."""
    name = str(host.get("name", "?"))
    vendor = vendor_of({"vendor": host.get("vendor")})
    error = host.get("error") or ""
    if host.get("state") != "down":
        gpu_error = host.get("gpu_error")
        if not gpu_error:
            return None
        return {
            "message": f"{name} is up, but {vendor.tool_name} failed there: {gpu_error}",
            "steps": [
                step(
                    f"Check the GPU driver on {name}; this should list the GPUs:",
                    vendor.list_command,
                ),
            ],
        }
    message = f"{name} is down: {error}" if error else f"{name} is down."
    refused = _REFUSED.search(error)
    if refused:
        user, key = refused[1], public_key()
        steps = [
            step(
                f"Add this line to ~{user}/.ssh/authorized_keys on {name}:",
                key or "jupyter gpuhive key",
            )
        ]
        if key:
            steps.append(
                step(
                    f"For example, run this on {name} as {user}:",
                    f"echo '{key}' >> ~/.ssh/authorized_keys",
                )
            )
        return {"message": message, "steps": steps}
    if _UNTRUSTED.search(error):
        return {
            "message": message,
            "steps": [
                step(
                    f"If {name} is the machine you mean, trust its host key (this shows "
                    "its fingerprint first):",
                    f"jupyter gpuhive trust {name}",
                )
            ],
        }
    no_root = _NO_ROOT.search(error)
    if no_root:
        return {
            "message": message,
            "steps": [
                step(
                    f"Run the server as root, or as {no_root[1]}, or give the host that "
                    "account: `user` in its entry of the hosts file."
                )
            ],
        }
    if _runs_here(host):
        return {
            "message": message,
            "steps": [
                step(
                    f"gpuhive runs {vendor.tool_name} on this machine with the host's `env` "
                    "(PATH). Check that it runs there, then test it:",
                    "jupyter gpuhive test",
                )
            ],
        }
    where = f"{host.get('address', name)}:{host.get('port', 22)}"
    return {
        "message": message,
        "steps": [
            step(
                f"Check that {where} is reachable and runs sshd; then test it:",
                "jupyter gpuhive test",
            ),
            step(
                "If the address or port is wrong, replace the entry:",
                f"jupyter gpuhive hosts remove {name} && "
                f"jupyter gpuhive hosts add {name} ADDRESS --port PORT",
            ),
        ],
    }


def _runs_here(host: dict[str, Any]) -> bool:
    """Whether the host is this machine, as its backend says (imported only when needed:
    the kernel side imports this module too)."""
    from ..errors import Invalid
    from .backends import DEFAULT, backend_class

    try:
        return backend_class(str(host.get("transport") or DEFAULT)).runs_here
    except Invalid:
        return False


def advise(hosts: list[dict[str, Any]], public_key: Callable[[], str | None]) -> dict[str, Any]:
    """The `GET hosts` answer: every host with `advice` where one is due, and `setup`."""
    return {
        "hosts": [{**h, "advice": host_advice(h, public_key)} for h in hosts],
        "setup": None if hosts else setup(),
    }
