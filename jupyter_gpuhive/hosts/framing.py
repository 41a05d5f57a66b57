"""Text a user controls, framed on the host and unframed only where it is read.

A command line or a ``/proc/PID/cgroup`` file (a user names cgroups below her delegated
subtree) leaves the host as one field: an 'x' and the hex of its bytes (awk, ``LC_ALL=C``:
byte by byte). No byte of it can then be read as a line, a section mark, a separator or a
driver's sentence; `unframe` gives the text back to the one reader that wants it.
"""

from __future__ import annotations

# awk: `hex(s)` the hex of s's bytes; `cg(p, all)` prints "=x" and the hex of
# /proc/p/cgroup (only when a line names docker or libpod and is not one of the probe's own
# lines, unless `all`; nothing when gone). The probe's own: where the probe itself runs in a
# container sharing the host's cgroup namespace, every process there names that container,
# and none of them is a user's container for it.
HEX_AWK = (
    'BEGIN { for (i = 1; i < 256; i++) o[sprintf("%c", i)] = sprintf("%02x", i)\n'
    '  while ((getline l < "/proc/self/cgroup") > 0) own[l] = 1; close("/proc/self/cgroup") }\n'
    'function hex(s,  h, i) { h = ""; for (i = 1; i <= length(s); i++) h = h o[substr(s, i, 1)]\n'
    "  return h }\n"
    'function cg(p, all,  f, l, c, d) { f = "/proc/" p "/cgroup"; c = ""; d = all\n'
    "  while ((getline l < f) > 0) {\n"
    '    c = c l "\\n"; if (l ~ /docker|libpod/ && !(l in own)) d = 1 }\n'
    '  close(f); if (d && c != "") print "=x" hex(c) }\n'
)


def unframe(field: str) -> str | None:
    """The text of a field framed as 'x' and hex (undecodable bytes replaced); None if the
    field is not one."""
    if not field.startswith("x"):
        return None
    try:
        return bytes.fromhex(field[1:]).decode(errors="replace")
    except ValueError:
        return None
