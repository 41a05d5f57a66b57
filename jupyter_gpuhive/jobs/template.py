"""The Template base class: command fields, option checking and the environment every task gets."""

from __future__ import annotations

import re
import shlex
import string
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ..hosts.vendors import default_vendor
from ..model.gpus import Pinning
from .tasks import GpuSlot, TaskSpec, TemplateError

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

# Fields every template provides; templates add their own.
COMMON_FIELDS: tuple[str, ...] = (
    "job",
    "task",
    "ntasks",
    "host",
    "address",
    "gpus",
    "gpu_indices",
    "ngpus",
)

HostGpus = tuple[str, str, Sequence[GpuSlot]]
VariableValue = str | int | float


@dataclass(frozen=True)
class Option:
    """One template option: its help text, default and type (bool, int or str)."""

    help: str
    default: Any
    kind: type


@dataclass(frozen=True)
class Node:
    """One host of a job with the GPUs the job holds on it, in the order given."""

    host: str
    address: str
    gpus: tuple[GpuSlot, ...]
    pinning: Pinning | None = None  # the host's vendor's (None: the default vendor's)


def command_fields(command_template: str) -> list[str]:
    """The `{field}` names a command template uses, in order of first use."""
    names: list[str] = []
    for _literal, name, spec, conversion in _parse(command_template):
        if name is None:
            continue
        if name == "":
            raise TemplateError("empty field '{}' in the command; write '{{}}' for literal braces")
        if spec or conversion:
            raise TemplateError(
                f"field '{{{name}...}}': format specs and conversions are not supported"
            )
        if name not in names:
            names.append(name)
    return names


def substitute(command_template: str, values: Mapping[str, str], hint: str = "") -> str:
    """Replace each `{field}` with its shell-quoted value; `{{` and `}}` are literal braces."""
    unknown = [name for name in command_fields(command_template) if name not in values]
    if unknown:
        listed = ", ".join(repr(name) for name in unknown)
        known = ", ".join(sorted(values))
        literal = "${{" + unknown[0] + "}}"  # how the shell's own ${…} is written
        raise TemplateError(
            f"unknown field{'s' if len(unknown) > 1 else ''} {listed} in the command "
            f"(known: {known}){hint}. Braces mark gpuhive's fields; for a literal brace, "
            f"such as the shell's own ${{…}}, double them: {literal}"
        )
    parts: list[str] = []
    for literal, name, _spec, _conversion in _parse(command_template):
        parts.append(literal)
        if name is not None:
            parts.append(shlex.quote(values[name]))
    return "".join(parts)


def _parse(command_template: str) -> list[tuple[str, str | None, str | None, str | None]]:
    try:
        return list(string.Formatter().parse(command_template))
    except ValueError as error:
        raise TemplateError(
            f"bad command template: {error}; write '{{{{' and '}}}}' for literal braces"
        ) from None


def check_value(what: str, value: str) -> None:
    """Refuse values that no shell argument or environment variable can carry (NUL bytes)."""
    if "\0" in value:
        raise TemplateError(f"{what} contains a NUL byte")


def host_port(address: str, port: int) -> str:
    """`address:port`, with IPv6 addresses in brackets."""
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


class Template(ABC):
    """A way to turn a job's GPUs and a command template into resolved tasks."""

    name: ClassVar[str]
    description: ClassVar[str]
    fields: ClassVar[tuple[str, ...]]
    options: ClassVar[Mapping[str, Option]]
    example: ClassVar[str]
    # Environment variables the template sets itself; user env may not override them.
    env_names: ClassVar[tuple[str, ...]] = ()

    def describe(self) -> dict[str, Any]:
        """A JSON-serializable description (for the `templates` API resource)."""
        return {
            "name": self.name,
            "description": self.description,
            "fields": list(self.fields),
            "options": {
                name: {"help": o.help, "default": o.default, "type": o.kind.__name__}
                for name, o in self.options.items()
            },
            "example": self.example,
        }

    def render(
        self,
        job_name: str,
        command_template: str,
        gpus_by_host: Sequence[HostGpus],
        variables: Mapping[str, VariableValue] | None = None,
        *,
        options: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
        workdir: str | None = None,
        pinnings: Mapping[str, Pinning] | None = None,
    ) -> list[TaskSpec]:
        """Resolve the job into one TaskSpec per task, in task order (`pinnings`: how each
        host's vendor pins its GPUs, by host; a host not in it: the default vendor's)."""
        check_value("job name", job_name)
        check_value("command", command_template)
        if workdir is not None:
            check_value("workdir", workdir)
        nodes = _nodes(gpus_by_host, pinnings or {})
        user_vars = self._variables(variables)
        user_env = self._env(env, [n.pinning for n in nodes if n.pinning])
        opts = self._options(options)
        tasks = self._render(job_name, command_template, nodes, user_vars, opts)
        return [
            TaskSpec(
                host=t.host,
                address=t.address,
                gpus=t.gpus,
                command=t.command,
                env={**user_env, **t.env},
                variables=t.variables,
                job=job_name,
                index=t.index,
                role=t.role,
                workdir=workdir,
            )
            for t in tasks
        ]

    @abstractmethod
    def _render(
        self,
        job_name: str,
        command_template: str,
        nodes: list[Node],
        variables: dict[str, str],
        options: dict[str, Any],
    ) -> list[TaskSpec]:
        """Build the tasks; `render` has checked the inputs and adds user env and workdir."""

    def task(
        self,
        *,
        job_name: str,
        command_template: str,
        node: Node,
        gpus: Sequence[GpuSlot],
        index: int,
        ntasks: int,
        variables: Mapping[str, str],
        fields: Mapping[str, str],
        env: Mapping[str, str],
        role: str = "task",
        hint: str = "",
        prefix: str = "",
        suffix: str = "",
    ) -> TaskSpec:
        """One task: common fields and CUDA env; `{field}`s substituted, prefix/suffix added."""
        values = {
            "job": job_name,
            "task": str(index),
            "ntasks": str(ntasks),
            "host": node.host,
            "address": node.address,
            "gpus": ",".join(g.uuid for g in gpus),
            "gpu_indices": ",".join(str(g.index) for g in gpus),
            "ngpus": str(len(gpus)),
            **fields,
            **variables,
        }
        command = prefix + substitute(command_template, values, hint) + suffix
        pinning = node.pinning or default_vendor().pinning
        task_env = {**env, **pinning.env(g.uuid for g in gpus)}
        return TaskSpec(
            host=node.host,
            address=node.address,
            gpus=tuple(gpus),
            command=command,
            env=task_env,
            variables=values,
            job=job_name,
            index=index,
            role=role,
        )

    def _variables(self, variables: Mapping[str, VariableValue] | None) -> dict[str, str]:
        result: dict[str, str] = {}
        for name, value in (variables or {}).items():
            if not IDENTIFIER.match(name):
                raise TemplateError(f"variable name {name!r} is not an identifier")
            if name in self.fields:
                raise TemplateError(
                    f"variable {name!r} would hide the {self.name} template's own field"
                )
            if isinstance(value, bool) or not isinstance(value, str | int | float):
                raise TemplateError(
                    f"variable {name!r}: value must be a string or number, "
                    f"not {type(value).__name__}"
                )
            text = str(value)
            check_value(f"variable {name!r}", text)
            result[name] = text
        return result

    def _env(
        self, env: Mapping[str, str] | None, pinnings: Sequence[Pinning] = ()
    ) -> dict[str, str]:
        names = [name for p in (default_vendor().pinning, *pinnings) for name in p.names]
        reserved = {*names, *self.env_names}
        result: dict[str, str] = {}
        for name, value in (env or {}).items():
            if not IDENTIFIER.match(name):
                raise TemplateError(f"environment variable name {name!r} is not valid")
            if name in reserved:
                raise TemplateError(f"environment variable {name} is set by the template")
            if not isinstance(value, str):
                raise TemplateError(f"environment variable {name}: value must be a string")
            check_value(f"environment variable {name}", value)
            result[name] = value
        return result

    def _options(self, options: Mapping[str, Any] | None) -> dict[str, Any]:
        given = dict(options or {})
        unknown = sorted(set(given) - set(self.options))
        if unknown:
            known = ", ".join(sorted(self.options)) or "none"
            raise TemplateError(
                f"unknown option{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} "
                f"for the {self.name} template (known: {known})"
            )
        result = {name: option.default for name, option in self.options.items()}
        for name, value in given.items():
            option = self.options[name]
            if value is None and option.default is None:
                ok = True
            elif option.kind is int:
                ok = isinstance(value, int) and not isinstance(value, bool)
            else:
                ok = isinstance(value, option.kind)
            if not ok:
                raise TemplateError(
                    f"option {name} of the {self.name} template must be "
                    f"{option.kind.__name__}, not {value!r}"
                )
            if isinstance(value, str):
                check_value(f"option {name}", value)
            result[name] = value
        return result


def int_option(options: Mapping[str, Any], name: str, low: int, high: int) -> int:
    """An integer option checked against [low, high]."""
    value = options[name]
    if not low <= value <= high:
        raise TemplateError(f"option {name} must be between {low} and {high}, not {value}")
    return int(value)


def choice_option(options: Mapping[str, Any], name: str, choices: Sequence[str]) -> str:
    """A string option that must be one of `choices`."""
    value = options[name]
    if value not in choices:
        raise TemplateError(f"option {name} must be one of {', '.join(choices)}, not {value!r}")
    return str(value)


def _nodes(gpus_by_host: Sequence[HostGpus], pinnings: Mapping[str, Pinning]) -> list[Node]:
    if not gpus_by_host:
        raise TemplateError("the job has no hosts")
    nodes: list[Node] = []
    hosts: set[str] = set()
    uuids: set[str] = set()
    for entry in gpus_by_host:
        host, address, gpus = entry
        if not host or not address:
            raise TemplateError("every host needs a name and an address")
        check_value("host name", host)
        check_value("host address", address)
        if host in hosts:
            raise TemplateError(f"host {host!r} is listed twice; give all its GPUs at once")
        hosts.add(host)
        for gpu in gpus:
            if gpu.host != host or gpu.address != address:
                raise TemplateError(f"GPU {gpu.uuid} of host {gpu.host!r} listed under {host!r}")
            if not gpu.uuid or "," in gpu.uuid or "\0" in gpu.uuid:
                raise TemplateError(f"bad GPU UUID {gpu.uuid!r} on host {host!r}")
            if gpu.uuid in uuids:
                raise TemplateError(f"GPU {gpu.uuid} is listed twice")
            uuids.add(gpu.uuid)
        nodes.append(Node(host, address, tuple(gpus), pinnings.get(host)))
    return nodes
