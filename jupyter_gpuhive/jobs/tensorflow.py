"""The TensorFlow templates: TF_CONFIG (TF2 strategies) and TF1-style ClusterSpec flags."""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from . import caps, resume
from .tasks import GpuSlot, TaskSpec, TemplateError
from .template import COMMON_FIELDS, Node, Option, Template, host_port, int_option

MAX_PS = 64


@dataclass(frozen=True)
class Member:
    """One task of a TensorFlow cluster: its role, index within the role, place and port."""

    role: str
    index: int
    node: Node
    gpus: tuple[GpuSlot, ...]
    port: int

    @property
    def endpoint(self) -> str:
        """`address:port` as it appears in the cluster spec."""
        return host_port(self.node.address, self.port)


def cluster_members(
    nodes: Sequence[Node], *, per_gpu: bool, chief: bool, ps: int, port_base: int
) -> list[Member]:
    """Lay out chief, workers and parameter servers over the nodes, with distinct ports.

    GPU slots (one per host, or one per GPU with `per_gpu`) become the chief (the first slot,
    when asked for) and the workers; parameter servers run without GPUs, round-robin over the
    hosts. Ports count up from `port_base` per address, so tasks sharing an address never clash.
    """
    slots: list[tuple[Node, tuple[GpuSlot, ...]]] = []
    for node in nodes:
        if per_gpu:
            slots.extend((node, (gpu,)) for gpu in node.gpus)
        else:
            slots.append((node, node.gpus))
    if not slots:
        raise TemplateError("the job has no GPUs to place tasks on")
    roles: list[tuple[str, int, Node, tuple[GpuSlot, ...]]] = []
    for position, (node, gpus) in enumerate(slots):
        if chief and position == 0:
            roles.append(("chief", 0, node, gpus))
        else:
            roles.append(("worker", position - (1 if chief else 0), node, gpus))
    roles.extend(("ps", i, nodes[i % len(nodes)], ()) for i in range(ps))
    next_port: dict[str, int] = {}
    members: list[Member] = []
    for role, index, node, gpus in roles:
        port = next_port.get(node.address, port_base)
        if port > 65535:
            raise TemplateError(f"port_base {port_base} leaves too few ports on {node.address}")
        next_port[node.address] = port + 1
        members.append(Member(role, index, node, gpus, port))
    return members


def cluster_spec(members: Sequence[Member]) -> dict[str, list[str]]:
    """TF_CONFIG's cluster: role -> endpoints in index order, empty roles left out."""
    cluster: dict[str, list[str]] = {}
    for role in ("chief", "worker", "ps"):
        endpoints = [m.endpoint for m in members if m.role == role]
        if endpoints:
            cluster[role] = endpoints
    return cluster


_LAYOUT_OPTIONS = {
    "per_gpu": Option("one task per GPU instead of one per host", False, bool),
    "port_base": Option("first port on each host; tasks sharing a host count up", 2222, int),
}


class TensorFlowTemplate(Template):
    """TF_CONFIG for tf.distribute (MultiWorkerMirroredStrategy, ParameterServerStrategy)."""

    name = "tensorflow"
    description = (
        "TensorFlow 2 tf.distribute: each task gets TF_CONFIG with the whole cluster "
        "(chief, worker, ps lists of host:port) and its own task type and index. One task per "
        "host (or per GPU with per_gpu); with chief the first becomes the chief (which counts as "
        "a replica; indexes count per role); ps parameter servers run without GPUs."
    )
    fields = (*COMMON_FIELDS, "task_type", "task_index", "port")
    options = {
        **_LAYOUT_OPTIONS,
        "chief": Option("make the first task the chief", False, bool),
        "ps": Option("number of parameter servers (no GPUs)", 0, int),
        **resume.OPTIONS,
        **caps.OPTIONS,
    }
    example = "python train.py --epochs 10 --lr {lr}"
    env_names = ("TF_CONFIG", *resume.ENV_NAMES)

    def _render(
        self,
        job_name: str,
        command_template: str,
        nodes: list[Node],
        variables: dict[str, str],
        options: dict[str, Any],
    ) -> list[TaskSpec]:
        members = cluster_members(
            nodes,
            per_gpu=options["per_gpu"],
            chief=options["chief"],
            ps=int_option(options, "ps", 0, MAX_PS),
            port_base=int_option(options, "port_base", 1, 65535),
        )
        cluster = cluster_spec(members)
        tasks = []
        for position, member in enumerate(members):
            tf_config = {"cluster": cluster, "task": {"type": member.role, "index": member.index}}
            fields = {
                "task_type": member.role,
                "task_index": str(member.index),
                "port": str(member.port),
            }
            tasks.append(
                self.task(
                    job_name=job_name,
                    command_template=command_template,
                    node=member.node,
                    gpus=member.gpus,
                    index=position,
                    ntasks=len(members),
                    variables=variables,
                    fields=fields,
                    env={"TF_CONFIG": json.dumps(tf_config, separators=(",", ":"))},
                    role=member.role,
                )
            )
        return resume.resumable(tasks, options)


class ClusterSpecTemplate(Template):
    """TF1-style `--ps_hosts --worker_hosts --job_name --task_index` flags."""

    name = "tf-clusterspec"
    description = (
        "TensorFlow 1 between-graph replication: appends --ps_hosts=... --worker_hosts=... "
        "--job_name=ps|worker --task_index=N to the command of each task (turn off with "
        "append_flags and use the fields instead). Workers on the GPUs (one per host, or per "
        "GPU with per_gpu), parameter servers without GPUs; worker 0 is the chief."
    )
    fields = (*COMMON_FIELDS, "tf_job_name", "task_index", "port", "ps_hosts", "worker_hosts")
    options = {
        **_LAYOUT_OPTIONS,
        "ps": Option("number of parameter servers (no GPUs)", 1, int),
        "append_flags": Option("append the four flags to the command", True, bool),
        **caps.OPTIONS,
    }
    example = "python trainer.py --train_steps 1000 --lr {lr}"

    def _render(
        self,
        job_name: str,
        command_template: str,
        nodes: list[Node],
        variables: dict[str, str],
        options: dict[str, Any],
    ) -> list[TaskSpec]:
        members = cluster_members(
            nodes,
            per_gpu=options["per_gpu"],
            chief=False,
            ps=int_option(options, "ps", 0, MAX_PS),
            port_base=int_option(options, "port_base", 1, 65535),
        )
        cluster = cluster_spec(members)
        ps_hosts = ",".join(cluster.get("ps", []))
        worker_hosts = ",".join(cluster.get("worker", []))
        tasks = []
        for position, member in enumerate(members):
            flags = [f"--worker_hosts={worker_hosts}"]
            if ps_hosts:
                flags.insert(0, f"--ps_hosts={ps_hosts}")
            flags += [f"--job_name={member.role}", f"--task_index={member.index}"]
            fields = {
                "tf_job_name": member.role,
                "task_index": str(member.index),
                "port": str(member.port),
                "ps_hosts": ps_hosts,
                "worker_hosts": worker_hosts,
            }
            tasks.append(
                self.task(
                    job_name=job_name,
                    command_template=command_template,
                    node=member.node,
                    gpus=member.gpus,
                    index=position,
                    ntasks=len(members),
                    variables=variables,
                    fields=fields,
                    env={},
                    role=member.role,
                    suffix=" " + shlex.join(flags) if options["append_flags"] else "",
                )
            )
        return tasks
