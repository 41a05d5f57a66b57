"""Terminal handler: a message on every terminal of the offender on that host."""

from __future__ import annotations

import logging
import shlex
from collections.abc import Mapping
from typing import Any

from ...hosts.pool import HostUnavailable
from ...model.violations import FOREIGN, IDLE, NO_SHOW, OVER_SHARE, UNRESERVED
from .base import HandlerFailed, Incident, Options, ViolationHandler

log = logging.getLogger(__name__)


_TERMINALS = r"""
msg=$(cat)
ttys=$( { ps -o tty= -u "$1" 2>/dev/null; who 2>/dev/null | awk -v u="$1" '$1 == u {print $2}'; } \
  | tr -d ' ' | grep -E '^(pts/[0-9]+|tty[0-9]+)$' | sort -u)
[ -n "$ttys" ] || { echo none; exit 0; }
for t in $ttys; do
  if printf '%s' "$msg" | timeout 5 $2 sh -c 'cat > "$1"' sh "/dev/$t" 2>/dev/null
  then echo "ok $t"; else echo "failed $t"; fi
done
"""


class TerminalHandler(ViolationHandler):
    """Writes a `write`-style message to every terminal (pty, tmux pane) of the user."""

    kinds = frozenset({FOREIGN, UNRESERVED, OVER_SHARE, IDLE, NO_SHOW})
    needs_target = True
    default_timeout = 15.0

    def configure(self, opts: Options) -> None:
        # Writing to another user's pty needs root or the tty group; `sudo` covers the rest.
        self.sudo = opts.flag("sudo", False)

    async def handle(self, incident: Incident, step: Mapping[str, Any]) -> str:
        user = incident.target or ""
        banner = f"Message from gpuhive about GPU {incident.gpu} on {incident.host}:"
        body = self.text(incident, step).replace("\n", "\r\n")
        message = f"\r\n\a{banner}\r\n{body}\r\nEOF\r\n"
        prefix = "sudo -n" if self.sudo else ""
        command = "sh -c " + shlex.quote(_TERMINALS) + " sh " + shlex.join([user, prefix])
        try:
            result = await self._pool().run(
                incident.host, command, timeout=self.timeout, stdin=message
            )
        except HostUnavailable as error:
            raise HandlerFailed(f"cannot reach {incident.host}: {error.reason}") from None
        lines = result.stdout.split()
        ok = [t for s, t in zip(lines[::2], lines[1::2], strict=False) if s == "ok"]
        failed = [t for s, t in zip(lines[::2], lines[1::2], strict=False) if s == "failed"]
        if not ok and not failed:
            raise HandlerFailed(f"{user} has no terminal on {incident.host}")
        if not ok:
            raise HandlerFailed(f"could not write to {', '.join(failed)} of {user}")
        more = f" (could not write to {', '.join(failed)})" if failed else ""
        return f"wrote to {', '.join(ok)} of {user}{more}"
