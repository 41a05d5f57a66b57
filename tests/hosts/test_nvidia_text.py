"""nvidia-smi's text outputs and what the corpus taught the CSV and XML parsers (issue #43):
`-q` text, `--version` (R610's KMD version), `nvlink -s`, header names with capitals (R590),
and an XML log with fewer `<gpu>` blocks than attached GPUs (a GPU left out is no forgery)."""

from __future__ import annotations

from jupyter_gpuhive.hosts.vendors.nvidia_smi import parse_query_gpu, parse_query_xml
from jupyter_gpuhive.hosts.vendors.nvidia_text import (
    parse_nvlink_status,
    parse_query_text,
    parse_version,
)

UUIDS = ("GPU-11111111-2222-3333-4444-555555555555", "GPU-66666666-7777-8888-9999-000000000000")
Q_TEXT = f"""
==============NVSMI LOG==============

Timestamp                                 : Mon Dec  7 10:00:00 2026
Driver Version                            : 610.1.2 [Deprecated; use KMD Version instead]
CUDA Version                              : 13.3

Attached GPUs                             : 2
GPU 00000000:3B:00.0
    Product Name                          : NVIDIA A40
    Display Mode                          : Requested functionality has been deprecated
    GPU UUID                              : {UUIDS[0]}
    FB Memory Usage
        Total                             : 46068 MiB
        Used                              : 1200 MiB
    BAR1 Memory Usage
        Total                             : 65536 MiB
    Processes
        GPU instance ID                   : N/A
        Compute instance ID               : N/A
        Process ID                        : 4242
            Type                          : C
            Name                          : python
            Used GPU Memory               : 1100 MiB
GPU 00000000:5E:00.0
    Product Name                          : NVIDIA A40
    GPU UUID                              : {UUIDS[1]}
    FB Memory Usage
        Total                             : [N/A]
    Processes                             : None
"""


def test_q_text_gives_gpus_memory_and_processes() -> None:
    report = parse_query_text(Q_TEXT)
    assert report.driver_version == "610.1.2"
    assert [(g.uuid, g.name, g.mem_total_mib) for g in report.gpus] == [
        (UUIDS[0], "NVIDIA A40", 46068),
        (UUIDS[1], "NVIDIA A40", None),  # a placeholder is not a value (BAR1's total is not it)
    ]
    assert [(p.pid, p.gpu_uuid, p.used_memory_mib) for p in report.processes] == [
        (4242, UUIDS[0], 1100)
    ]


def test_version_before_and_after_r610() -> None:
    assert (
        parse_version("NVIDIA-SMI version  : 590.1\nDRIVER version      : 590.1.5\n") == "590.1.5"
    )
    assert (
        parse_version(
            'DRIVER version      : Deprecated, see "KMD version" instead\n'
            "KMD version         : 610.1.2\n"
        )
        == "610.1.2"
    )


def test_nvlink_status_counts_active_links() -> None:
    text = (
        f"GPU 0: NVIDIA H100 80GB HBM3 (UUID: {UUIDS[0]})\n\t Link 0: 26.562 GB/s\n"
        "\t Link 1: <inactive>\n\t Link 2: 26.562 GB/s\n"
        f"GPU 1: NVIDIA L40S (UUID: {UUIDS[1]})\nDevice does not have or support Nvlink\n"
    )
    assert parse_nvlink_status(text) == {
        UUIDS[0]: ("NVIDIA H100 80GB HBM3", 2),
        UUIDS[1]: ("NVIDIA L40S", 0),
    }


def test_a_header_with_capitals_is_a_header() -> None:
    text = (
        "index, uuid, name, pci.baseClass, vgpu_driver_capability.heterogenous_multivGPU, "
        "memory.total [MiB]\n"
        f"0, {UUIDS[0]}, NVIDIA H200, 0x3, No, 143771 MiB\n"
    )
    (gpu,) = parse_query_gpu(text)
    assert (gpu.uuid, gpu.mem_total_mib) == (UUIDS[0], 143771)


def test_fewer_gpu_blocks_than_attached_is_read() -> None:
    xml = (
        '<?xml version="1.0" ?>\n<nvidia_smi_log><driver_version>418.43</driver_version>'
        "<attached_gpus>4</attached_gpus>"
        f'<gpu id="00000000:01:00.0"><product_name>Tesla K80</product_name><uuid>{UUIDS[0]}</uuid>'
        "<fb_memory_usage><total>11441 MiB</total></fb_memory_usage></gpu></nvidia_smi_log>\n"
    )
    report = parse_query_xml(xml)
    assert [(g.uuid, g.mem_total_mib) for g in report.gpus] == [(UUIDS[0], 11441)]
