"""The authorization reference: the declared policy and every route's resource and action."""

from __future__ import annotations


def policy_page() -> str:
    """Markdown: who may do each (resource, action), then each route's declaration."""
    from jupyter_gpuhive.model.authority import POLICY, WHO_MAY
    from jupyter_gpuhive.server.api import ENDPOINTS, PUBLIC_PATHS
    from jupyter_gpuhive.server.api.authorization import authorized_action
    from jupyter_gpuhive.server.api.operations import implemented

    lines = [
        "# Authorization",
        "",
        "Generated from `jupyter_gpuhive/model/authority.py` (`POLICY`) and the route table.",
        "Every route goes through gpuhive's policy, then the server's Authorizer (in team mode",
        "the Hub's scopes); [the how-to](../how-to/authorization.md) explains both and the",
        "host groups. Actions other than read, write and execute are decided by the services,",
        "on one thing (its owner, its hosts).",
        "",
        "## The policy",
        "",
        "| resource | action | who may | what |",
        "| --- | --- | --- | --- |",
    ]
    for (resource, action), entry in POLICY.items():
        lines.append(f"| `{resource}` | {action} | {WHO_MAY[entry.who]} | {entry.what} |")
    lines += [
        "",
        "## The routes",
        "",
        "| route | method | resource | action |",
        "| --- | --- | --- | --- |",
    ]
    for path, handler in ENDPOINTS:
        for method in implemented(handler):
            if path in PUBLIC_PATHS:
                resource, action = "(public: a token of its own)", "—"
            else:
                resource = f"`{handler.auth_resource}`"
                action = str(authorized_action(getattr(handler, method)))
            lines.append(f"| `{path}` | {method.upper()} | {resource} | {action} |")
    return "\n".join(lines) + "\n"
