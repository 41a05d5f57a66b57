"""The PyTorch template: torchrun per node, or one env:// process per GPU."""

from __future__ import annotations

import shlex
import zlib
from typing import Any

from . import caps, resume
from .tasks import TaskSpec, TemplateError
from .template import COMMON_FIELDS, Node, Option, Template, choice_option, int_option

# Ports a job's master port is derived from when none is given (torchrun's default is 29500).
DEFAULT_PORT_BASE = 29500
DEFAULT_PORT_SPAN = 1000


def default_master_port(job_name: str) -> int:
    """A port derived from the job name, stable across renderings (not checked for being free)."""
    return DEFAULT_PORT_BASE + zlib.crc32(job_name.encode()) % DEFAULT_PORT_SPAN


class PyTorchTemplate(Template):
    """torch.distributed (`env://` rendezvous) settings from the job's GPUs."""

    name = "pytorch"
    description = (
        "PyTorch distributed. mode=torchrun: one task per host running "
        "`torchrun --nnodes N --nproc-per-node <GPUs on the host> --node-rank R "
        "--master-addr <first host> --master-port P <command>`. mode=env: one task per GPU "
        "with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set for env://. "
        "Hosts are ranked in the order given; the first is the master."
    )
    fields = (
        *COMMON_FIELDS,
        "node_rank",
        "nnodes",
        "nproc_per_node",
        "world_size",
        "master_addr",
        "master_port",
        "rank",
        "local_rank",
    )
    options = {
        "mode": Option("torchrun (one task per host) or env (one task per GPU)", "torchrun", str),
        "master_port": Option(
            "rendezvous port on the first host; default derived from the job name", None, int
        ),
        "torchrun": Option("the torchrun executable (one word)", "torchrun", str),
        "gpu_visibility": Option(
            "mode=env only: task (each process sees its own GPU as cuda:0) or node "
            "(each process sees all GPUs of its host, its own is cuda:LOCAL_RANK)",
            "task",
            str,
        ),
        **resume.OPTIONS,
        **caps.OPTIONS,
    }
    example = "train.py --epochs 10 --lr {lr}"
    env_names = (
        "MASTER_ADDR",
        "MASTER_PORT",
        "WORLD_SIZE",
        "NODE_RANK",
        "RANK",
        "LOCAL_RANK",
        *resume.ENV_NAMES,
    )

    def _render(
        self,
        job_name: str,
        command_template: str,
        nodes: list[Node],
        variables: dict[str, str],
        options: dict[str, Any],
    ) -> list[TaskSpec]:
        mode = choice_option(options, "mode", ("torchrun", "env"))
        visibility = choice_option(options, "gpu_visibility", ("task", "node"))
        if options["master_port"] is None:
            port = default_master_port(job_name)
        else:
            port = int_option(options, "master_port", 1, 65535)
        for node in nodes:
            if not node.gpus:
                raise TemplateError(f"pytorch: host {node.host!r} has no GPUs in this job")
        world_size = sum(len(node.gpus) for node in nodes)
        master = nodes[0].address
        shared = {
            "nnodes": str(len(nodes)),
            "world_size": str(world_size),
            "master_addr": master,
            "master_port": str(port),
        }
        shared_env = {
            "MASTER_ADDR": master,
            "MASTER_PORT": str(port),
            "WORLD_SIZE": str(world_size),
        }
        if mode == "torchrun":
            nodes_tasks = self._torchrun(
                job_name, command_template, nodes, variables, options, shared
            )
            return resume.resumable(nodes_tasks, options)
        tasks: list[TaskSpec] = []
        offset = 0  # global rank of the node's first process: GPU counts may differ per node
        for node_rank, node in enumerate(nodes):
            for local_rank, gpu in enumerate(node.gpus):
                rank = offset + local_rank
                fields = {
                    **shared,
                    "node_rank": str(node_rank),
                    "nproc_per_node": str(len(node.gpus)),
                    "rank": str(rank),
                    "local_rank": str(local_rank),
                }
                env = {
                    **shared_env,
                    "NODE_RANK": str(node_rank),
                    "RANK": str(rank),
                    "LOCAL_RANK": str(local_rank),
                    "LOCAL_WORLD_SIZE": str(len(node.gpus)),
                }
                tasks.append(
                    self.task(
                        job_name=job_name,
                        command_template=command_template,
                        node=node,
                        gpus=node.gpus if visibility == "node" else (gpu,),
                        index=rank,
                        ntasks=world_size,
                        variables=variables,
                        fields=fields,
                        env=env,
                        role="rank",
                    )
                )
            offset += len(node.gpus)
        return resume.resumable(tasks, options)

    def _torchrun(
        self,
        job_name: str,
        command_template: str,
        nodes: list[Node],
        variables: dict[str, str],
        options: dict[str, Any],
        shared: dict[str, str],
    ) -> list[TaskSpec]:
        hint = (
            "; with mode=torchrun each process reads RANK and LOCAL_RANK from its "
            "environment, or use mode=env"
        )
        tasks: list[TaskSpec] = []
        for node_rank, node in enumerate(nodes):
            nproc = len(node.gpus)
            prefix = [
                options["torchrun"],
                "--nnodes",
                shared["nnodes"],
                "--nproc-per-node",
                str(nproc),
                "--node-rank",
                str(node_rank),
                "--master-addr",
                shared["master_addr"],
                "--master-port",
                shared["master_port"],
            ]
            fields = {**shared, "node_rank": str(node_rank), "nproc_per_node": str(nproc)}
            # torchrun sets RANK, LOCAL_RANK and WORLD_SIZE for its workers; these are for the
            # command line and for scripts that inspect the node.
            env = {
                "MASTER_ADDR": shared["master_addr"],
                "MASTER_PORT": shared["master_port"],
                "WORLD_SIZE": shared["world_size"],
                "NODE_RANK": str(node_rank),
            }
            tasks.append(
                self.task(
                    job_name=job_name,
                    command_template=command_template,
                    node=node,
                    gpus=node.gpus,
                    index=node_rank,
                    ntasks=len(nodes),
                    variables=variables,
                    fields=fields,
                    env=env,
                    role="node",
                    hint=hint,
                    prefix=shlex.join(prefix) + " ",
                )
            )
        return tasks
