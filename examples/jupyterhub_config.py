"""JupyterHub configuration for gpuhive in team mode: one gpuhive service for the whole Hub.

This file is the deployment example of docs/team-mode.md. Use it as the docs say: copy it to
/etc/jupyterhub/gpuhive_hub_config.py and put, as the LAST line of your own
jupyterhub_config.py (after every setting of yours):

    load_subconfig("/etc/jupyterhub/gpuhive_hub_config.py")

It only ADDS to your settings, never replaces them: it appends to c.JupyterHub.services,
c.JupyterHub.load_roles, c.Spawner.args and c.Spawner.server_token_scopes, adds a key to
c.JupyterHub.custom_scopes and a scope to c.JupyterHub.extra_user_scopes, and sets nothing
else (no load_groups, no authenticator or spawner). The end-to-end tests (tests/hub/) use
it exactly so: their generated jupyterhub_config.py holds the test's own settings (users,
groups, a service, a role, Spawner.args) and ends with this load_subconfig line.

What it sets up:
- the `gpuhive` service, started and restarted by the Hub (`command`), listening on
  127.0.0.1 only; it alone holds the database URL and the SSH key (both in its own config
  file, GPUHIVE_SERVICE_CONFIG, which only the Hub's account should be able to read);
- every user may call the service (`access:services!service=gpuhive`, added to the default
  `user` role); members of the Hub group GPUHIVE_ADMIN_GROUP get the custom scope
  `custom:gpuhive:admin` (gpuhive admin rights) through the role `gpuhive-admin` (JupyterHub
  creates the group if it does not exist; its members are yours to manage);
- `c.Spawner.server_token_scopes`: each user's server token (JUPYTERHUB_API_TOKEN, which
  their kernels inherit) carries that access, and the admin scope where the user holds it;
- client mode in every user's server: `--GpuHiveApp.service_url=…` on the server's
  command line, so the extension keeps no store and forwards every gpuhive call to the
  service with the user's own server token.

Environment read here (all optional):
  GPUHIVE_SERVICE_URL     several replicas (docs/how-to/replicas.md): the load balancer's URL,
                          e.g. http://127.0.0.1:10100. The Hub then starts no service: it
                          routes /services/gpuhive/ there, and users' servers call it there
  GPUHIVE_SERVICE_TOKEN_FILE  the service's fixed Hub token, shared with the replicas: a file
                          with a line JUPYTERHUB_API_TOKEN=<token> (their systemd
                          EnvironmentFile) or the bare token. Without it the Hub makes a new
                          token at each start, which only a service it starts itself can know
  GPUHIVE_SERVICE_PORT    port the service listens on (default 10101; without GPUHIVE_SERVICE_URL)
  GPUHIVE_SERVICE_CONFIG  the service's config file (default /etc/gpuhive/gpuhive_config.py)
  GPUHIVE_PYTHON          Python with jupyter-gpuhive installed (default: the Hub's)
  GPUHIVE_ADMIN_GROUP     Hub group whose members are gpuhive admins (default admins; empty:
                          no such role, grant custom:gpuhive:admin yourself)
"""

import os
import sys

import jupyterhub

c = get_config()  # noqa: F821 - provided by JupyterHub when it loads this file

SERVICE = "gpuhive"
PORT = int(os.environ.get("GPUHIVE_SERVICE_PORT", "10101"))
# Several replicas: the load balancer's URL (the Hub starts no service); else the one service.
BALANCER_URL = os.environ.get("GPUHIVE_SERVICE_URL", "").rstrip("/")
SERVICE_URL = BALANCER_URL or f"http://127.0.0.1:{PORT}"
TOKEN_FILE = os.environ.get("GPUHIVE_SERVICE_TOKEN_FILE", "")
SERVICE_CONFIG = os.environ.get("GPUHIVE_SERVICE_CONFIG", "/etc/gpuhive/gpuhive_config.py")
PYTHON = os.environ.get("GPUHIVE_PYTHON", sys.executable)
ADMIN_GROUP = os.environ.get("GPUHIVE_ADMIN_GROUP", "admins")
ADMIN_SCOPE = "custom:gpuhive:admin"
ACCESS_SCOPE = f"access:services!service={SERVICE}"

# Everything below adds to what your jupyterhub_config.py set before loading this file
# (c.X.y.append / .extend / .update / .add): traitlets merges it into your values, or into
# JupyterHub's defaults where you set none. An assignment (c.X.y = …) after the
# load_subconfig line would replace these additions again: keep this file last.


def service_token(path: str) -> str:
    """The token in `path`: its JUPYTERHUB_API_TOKEN=… line, or the file's only content."""
    with open(path, encoding="utf-8") as file:
        text = file.read()
    for line in text.splitlines():
        name, equals, value = line.strip().partition("=")
        if equals and name.strip() == "JUPYTERHUB_API_TOKEN":
            return value.strip().strip("'\"")
    token = text.strip()
    if not token or "\n" in token or "=" in token:
        raise ValueError(f"{path}: expected JUPYTERHUB_API_TOKEN=<token> or only the token")
    return token


# --- the service ----------------------------------------------------------------------
# One service: the Hub starts it with JUPYTERHUB_API_TOKEN / _API_URL / _SERVICE_PREFIX /
# _SERVICE_URL set, routes {hub}/services/gpuhive/ to it, and restarts it when it exits.
# Several replicas (GPUHIVE_SERVICE_URL): the site starts them (examples/deploy/); the
# Hub only routes to their load balancer and knows the service by the shared token.
service: dict = {
    "name": SERVICE,
    "url": SERVICE_URL,
    "display": False,
    # Extra environment for the service, e.g. a libpq password file for the database:
    # "environment": {"PGPASSFILE": "/etc/gpuhive/pgpass"},
}
if not BALANCER_URL:
    service["command"] = [PYTHON, "-m", "jupyter_gpuhive.hub", "--config", SERVICE_CONFIG]
if TOKEN_FILE:
    service["api_token"] = service_token(TOKEN_FILE)
elif BALANCER_URL:
    raise ValueError("GPUHIVE_SERVICE_URL (replicas) needs GPUHIVE_SERVICE_TOKEN_FILE")
c.JupyterHub.services.append(service)

# --- scopes and roles -----------------------------------------------------------------
c.JupyterHub.custom_scopes.update(
    {
        ADMIN_SCOPE: {
            "description": "gpuhive admin: cancel or edit anyone's reservations and jobs, "
            "edit access rules, book for others.",
        },
    }
)
# Every user may call the service. JupyterHub >= 6 adds it to the default `user` role; if
# your own load_roles redefines the `user` role, put ACCESS_SCOPE into its scopes yourself
# (JupyterHub then ignores extra_user_scopes, and says so in its log).
if int(jupyterhub.__version__.split(".")[0]) >= 6:
    c.JupyterHub.extra_user_scopes.add(ACCESS_SCOPE)
else:  # JupyterHub 5: the `user` role itself (a `user` role of yours is then an error)
    c.JupyterHub.load_roles.append(
        {
            "name": "user",
            "description": "Standard user privileges, and gpuhive",
            "scopes": ["self", ACCESS_SCOPE],
        }
    )
if ADMIN_GROUP:
    # A server token's scopes are fixed when the server starts: after adding someone to
    # the group, restart their server (removal takes effect at once).
    c.JupyterHub.load_roles.append(
        {
            "name": "gpuhive-admin",
            "description": "gpuhive administrators",
            "scopes": [ADMIN_SCOPE],
            "groups": [ADMIN_GROUP],
        }
    )

# --- the users' servers ---------------------------------------------------------------
# Scopes of each server's JUPYTERHUB_API_TOKEN. The Hub grants the subset the user holds,
# so `custom:gpuhive:admin` reaches only admins' servers. These go on c.Spawner, not
# c.JupyterHub (there it is only a warning, and servers cannot reach the service). If you
# set server_token_scopes to a callable, add these scopes in your callable instead.
c.Spawner.server_token_scopes.extend(
    [
        "users:activity!user",
        "access:servers!server",
        ACCESS_SCOPE,
        ADMIN_SCOPE,
    ]
)
# Client mode of the extension (enabled system-wide by `pip install jupyter-gpuhive`).
# A command-line option wins over anything in the user's own ~/.jupyter config files; and
# whatever a user changes, the service only believes the Hub about who calls it. (If your
# settings use a Spawner subclass's section, e.g. c.SystemdSpawner.args, that section
# wins over c.Spawner: add this option there.)
c.Spawner.args.append(f"--GpuHiveApp.service_url={SERVICE_URL}/services/{SERVICE}/")
