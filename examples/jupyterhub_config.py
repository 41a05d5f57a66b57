"""JupyterHub configuration for gpuhive in team mode: one gpuhive service for the whole Hub.

This file is the deployment example of docs/team-mode.md and is what the end-to-end tests
(tests/hub/) run: they load it with `load_subconfig` and add only test settings (ports,
DummyAuthenticator, SimpleLocalProcessSpawner). Copy it next to your own jupyterhub_config.py
and `load_subconfig()` it, or paste its settings in.

What it sets up:
- the `gpuhive` service, started and restarted by the Hub (`command`), listening on
  127.0.0.1 only; it alone holds the database URL and the SSH key (both in its own config
  file, GPUHIVE_SERVICE_CONFIG, which only the Hub's account should be able to read);
- roles: every user may call the service (`access:services!service=gpuhive`); members of
  the `admins` group get the custom scope `custom:gpuhive:admin` (gpuhive admin rights);
- `c.Spawner.server_token_scopes`: each user's server token (JUPYTERHUB_API_TOKEN, which
  their kernels inherit) carries that access, and the admin scope where the user holds it;
- client mode in every user's server: `--GpuHiveApp.service_url=…` on the server's
  command line, so the extension keeps no store and forwards every gpuhive call to the
  service with the user's own server token.

Environment read here (all optional):
  GPUHIVE_SERVICE_PORT    port the service listens on (default 10101)
  GPUHIVE_SERVICE_CONFIG  the service's config file (default /etc/gpuhive/gpuhive_config.py)
  GPUHIVE_PYTHON          Python with jupyter-gpuhive installed (default: the Hub's)
  GPUHIVE_ADMIN_GROUP     Hub group whose members are gpuhive admins (default admins)
"""

import os
import sys

c = get_config()  # noqa: F821 - provided by JupyterHub when it loads this file

SERVICE = "gpuhive"
PORT = int(os.environ.get("GPUHIVE_SERVICE_PORT", "10101"))
SERVICE_URL = f"http://127.0.0.1:{PORT}"
SERVICE_CONFIG = os.environ.get("GPUHIVE_SERVICE_CONFIG", "/etc/gpuhive/gpuhive_config.py")
PYTHON = os.environ.get("GPUHIVE_PYTHON", sys.executable)
ADMIN_GROUP = os.environ.get("GPUHIVE_ADMIN_GROUP", "admins")
ADMIN_SCOPE = "custom:gpuhive:admin"

# --- the service ----------------------------------------------------------------------
# The Hub starts it with JUPYTERHUB_API_TOKEN / _API_URL / _SERVICE_PREFIX / _SERVICE_URL set,
# routes {hub}/services/gpuhive/ to it, and restarts it when it exits.
c.JupyterHub.services = [
    {
        "name": SERVICE,
        "url": SERVICE_URL,
        "command": [PYTHON, "-m", "jupyter_gpuhive.hub", "--config", SERVICE_CONFIG],
        "display": False,
        # Extra environment for the service, e.g. a libpq password file for the database:
        # "environment": {"PGPASSFILE": "/etc/gpuhive/pgpass"},
    }
]

# --- scopes and roles -----------------------------------------------------------------
c.JupyterHub.custom_scopes = {
    ADMIN_SCOPE: {
        "description": "gpuhive admin: cancel or edit anyone's reservations and jobs, "
        "edit access rules, book for others.",
    },
}
c.JupyterHub.load_roles = [
    # The default `user` role plus access to the gpuhive service.
    {
        "name": "user",
        "description": "Standard user privileges, and gpuhive",
        "scopes": ["self", f"access:services!service={SERVICE}"],
    },
    {
        "name": "gpuhive-admin",
        "description": "gpuhive administrators",
        "scopes": [ADMIN_SCOPE],
        "groups": [ADMIN_GROUP],
    },
]
# The group must exist before a role can name it; add members here or in the admin panel.
# (A server token's scopes are fixed when the server starts: after changing someone's
# groups, restart their server.)
c.JupyterHub.load_groups = {ADMIN_GROUP: {"users": []}}

# --- the users' servers ---------------------------------------------------------------
# Scopes of each server's JUPYTERHUB_API_TOKEN. The Hub grants the subset the user holds,
# so `custom:gpuhive:admin` reaches only admins' servers. These go on c.Spawner, not
# c.JupyterHub (there it is only a warning, and servers cannot reach the service).
c.Spawner.server_token_scopes = [
    "users:activity!user",
    "access:servers!server",
    f"access:services!service={SERVICE}",
    ADMIN_SCOPE,
]
# Client mode of the extension (enabled system-wide by `pip install jupyter-gpuhive`).
# A command-line option wins over anything in the user's own ~/.jupyter config files; and
# whatever a user changes, the service only believes the Hub about who calls it.
c.Spawner.args = [f"--GpuHiveApp.service_url={SERVICE_URL}/services/{SERVICE}/"]
