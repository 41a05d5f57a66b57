"""The summary table plain ``nvidia-smi`` prints, approximately (for people, never parsed).

Standard library only: the ``nvidia-smi`` stand-in imports this.
"""

from __future__ import annotations

import time

from .snapshot import HostSnapshot

RULE = "+" + "-" * 41 + "+" + "-" * 22 + "+" + "-" * 22 + "+"
WIDE = "+" + "-" * 87 + "+"


def _box(text: str) -> str:
    return f"| {text:<85} |"


def summary_table(snap: HostSnapshot) -> str:
    """GPUs with memory and utilization, then their processes."""
    cfg = snap.config
    lines = [
        time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(snap.timestamp)),
        WIDE,
        _box(
            f"NVIDIA-SMI {cfg.driver_version:<22} Driver Version: {cfg.driver_version:<13}"
            f" CUDA Version: {cfg.cuda_version}"
        ),
        "|" + RULE[1:-1] + "|",
        "| GPU  Name                 Persistence-M | Bus-Id        Disp.A | Volatile Uncorr. ECC |",
        "| Fan  Temp   Perf          Pwr:Usage/Cap |         Memory-Usage | GPU-Util  Compute M. |",
        "|" + "=" * 41 + "+" + "=" * 22 + "+" + "=" * 22 + "|",
    ]
    for g in snap.gpus:
        gpu = g.gpu
        fan = "N/A" if gpu.fan_pct is None else f"{gpu.fan_pct}%"
        draw = (
            "N/A" if g.power_w is None or "power.draw" in gpu.unavailable else f"{g.power_w:.0f}W"
        )
        cap = "N/A" if gpu.power_limit_w is None else f"{gpu.power_limit_w:.0f}W"
        util = (
            "N/A"
            if g.util_gpu is None or "utilization.gpu" in gpu.unavailable
            else f"{g.util_gpu}%"
        )
        persistence = "On" if gpu.persistence_mode else "Off"
        memory = f"{g.mem_used_mib}MiB / {gpu.memory_total_mib}MiB"
        lines += [
            f"| {gpu.index:>3}  {gpu.name[:28]:<28} {persistence:>4}  | {gpu.pci_bus_id} Off "
            f"| {'On' if gpu.mig_enabled else 'N/A':>20} |",
            f"| {fan:>4} {g.temperature_c:>4}C    P0 {draw + ' / ' + cap:>22} "
            f"| {memory:>20} | {util:>7}      Default |",
            RULE,
        ]
    lines += [
        " " * 89,
        WIDE,
        _box("Processes:"),
        _box(
            " GPU   GI   CI        PID   Type   Process name                            GPU Memory"
        ),
        _box("       ID   ID                                                             Usage"),
        "|" + "=" * 87 + "|",
    ]
    rows = snap.rows()
    for state, row in rows:
        mig = row.placement.mig_index
        gi = "N/A" if mig is None else str(state.gpu.mig[mig].gpu_instance_id)
        ci = "N/A" if mig is None else str(state.gpu.mig[mig].compute_instance_id)
        lines.append(
            _box(
                f"{state.gpu.index:>4} {gi:>4} {ci:>4} {row.pid:>10}      C   "
                f"{row.process.name[-38:]:<38} {row.process.used_memory_mib:>8}MiB"
            )
        )
    if not rows:
        lines.append(_box(" No running processes found"))
    return "\n".join([*lines, WIDE]) + "\n"
