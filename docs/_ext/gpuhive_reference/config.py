"""The configuration reference, from the traitlets metadata of the configurable classes."""

from __future__ import annotations

from traitlets import HasTraits, TraitType

from .text import fence, one_line, prose


def configurables() -> list[tuple[type[HasTraits], type[HasTraits], str]]:
    """(class, the Jupyter base it extends, where its settings go) for every configurable."""
    from jupyter_client.provisioning.provisioner_base import KernelProvisionerBase
    from jupyter_server.auth.identity import IdentityProvider
    from jupyter_server.extension.application import ExtensionApp
    from traitlets.config import Application

    from jupyter_gpuhive.kernels.provisioner import GpuHiveProvisioner
    from jupyter_gpuhive.server.app import GpuHiveApp
    from jupyter_gpuhive.server.auth import TokenUsersIdentityProvider
    from jupyter_gpuhive.server.hub import GpuHiveService

    return [
        (
            GpuHiveApp,
            ExtensionApp,
            "The server extension (personal mode) and the team-mode service. Set in "
            "`jupyter_server_config.py`, `jupyter_gpuhive_config.py` (`jupyter gpuhive init` "
            "writes one with every setting) or the service's config file.",
        ),
        (
            GpuHiveService,
            Application,
            "The JupyterHub service process (team mode): its own config file, passed as "
            "`--config=FILE`, also holds the `c.GpuHiveApp` settings.",
        ),
        (
            TokenUsersIdentityProvider,
            IdentityProvider,
            "An identity provider that gives several people a token each on one Jupyter "
            "server: `c.ServerApp.identity_provider_class = "
            '"jupyter_gpuhive.auth.TokenUsersIdentityProvider"`.',
        ),
        (
            GpuHiveProvisioner,
            KernelProvisionerBase,
            "The kernel provisioner of reservation kernels (`provisioner_name: gpuhive`). Set "
            "per kernelspec, in its `metadata.kernel_provisioner.config` (`kernel.json`); the "
            "kernelspecs gpuhive offers fill in `reservation_id` themselves.",
        ),
    ]


def own_traits(cls: type[HasTraits], base: type[HasTraits]) -> dict[str, TraitType]:
    """The class's configurable traits that its Jupyter base class does not have, in the
    order the source declares them (related settings stay together)."""
    inherited = base.class_traits(config=True)
    traits = cls.class_traits(config=True)
    order = [n for k in reversed(cls.__mro__) for n in vars(k) if n in traits]
    return {n: traits[n] for n in dict.fromkeys(order) if n not in inherited}


def _default(cls: type[HasTraits], base: type[HasTraits], name: str, trait: TraitType) -> str:
    mine = [k for k in cls.__mro__ if not issubclass(base, k)]  # the class and its mixins
    own_generators = {n for k in mine for n in vars(k).get("_trait_default_generators", {})}
    if name in own_generators:  # computed when the application starts
        return "computed at start (see above)"
    return f"`{trait.default_value_repr()}`"


def trait_kind(trait: TraitType) -> str:
    """The trait's type, with the types of its items (List(Dict), Set(Unicode)…)."""
    kind = type(trait).__name__
    inner = getattr(trait, "_trait", None)
    if inner is not None:
        kind += f"({type(inner).__name__})"
    values = getattr(trait, "values", None)
    if kind == "Enum" and values:
        kind += " of " + ", ".join(repr(v) for v in values)
    return kind


def config_page() -> str:
    """The whole configuration reference as MyST Markdown."""
    out = [
        "# Configuration",
        "",
        "Generated from the traitlets metadata of each class at build time (`make docs`), so "
        "it lists exactly what the code accepts. Durations are written like `90m`, `2h`, `7d`. "
        "Every setting can also be given on the command line as `--Class.name=value`.",
        "",
    ]
    for cls, base, where in configurables():
        name = cls.__name__
        out += [f"({name.lower()}-config)=", f"## `{name}`", "", where, ""]
        for trait_name, trait in own_traits(cls, base).items():
            out += [
                f"```{{confval}} {name}.{trait_name}",
                f":type: `{trait_kind(trait)}`",
                f":default: {_default(cls, base, trait_name, trait)}",
                "",
                prose((trait.help or "").strip()),
                "```",
                "",
            ]
        inherited = base.class_traits(config=True)
        mine = cls.class_traits(config=True)
        rows = [(n, t) for n, t in sorted(mine.items()) if n in inherited]
        if rows:
            out += [
                f"Inherited from `{base.__module__}.{base.__name__}` (not specific to "
                f"gpuhive), also settable as `c.{name}.NAME`:",
                "",
                "| setting | type | default | help |",
                "| --- | --- | --- | --- |",
            ]
            for n, t in rows:
                help_text = one_line(t.help or "")
                default = fence(t.default_value_repr())
                out.append(f"| `{n}` | `{trait_kind(t)}` | {default} | {help_text} |")
            out.append("")
    return "\n".join(out)
