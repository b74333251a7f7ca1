"""Public failure figures: the value model's default rates by class, each with its source.

Llama 3 (Meta, "The Llama 3 Herd of Models", 2024, section 3.3.4 and Table 5): during a 54-day
snapshot of pre-training on 16,384 H100 GPUs there were 466 job interruptions, 47 planned and
419 unexpected. The 419, by root-cause category, are below. They are one operator's figures on
one hardware generation: the model shows them as its input, and [ledger] failure_rates replaces
any of them with a site's own.
"""

from __future__ import annotations

LLAMA3_SOURCE = ("Llama 3 paper (arXiv 2407.21783), Table 5: 419 unexpected interruptions in 54 "
                 "days on 16,384 H100 GPUs")
LLAMA3_GPU_HOURS = 16_384 * 54 * 24
# class: (interruptions in the snapshot, the paper's category, whether a pre-job health check
# reads that hardware: what a gate like Airlock can catch before a job lands on it)
LLAMA3: dict[str, tuple[int, str, bool]] = {
    "gpu": (148, "Faulty GPU", True),
    "hbm": (72, "GPU HBM3 Memory", True),
    "software": (54, "Software Bug", False),
    "network": (35, "Network Switch/Cable", True),
    "host_maintenance": (32, "Host Maintenance", False),
    "sram": (19, "GPU SRAM Memory", True),
    "gsp": (17, "GPU System Processor", True),
    "nic": (7, "NIC", True),
    "nccl_watchdog": (7, "NCCL Watchdog Timeouts", False),
    "sdc": (6, "Silent Data Corruption", True),
    "thermal": (6, "GPU Thermal Interface + Sensor", True),
    "ssd": (3, "SSD", False),
    "psu": (3, "Power Supply", False),
    "chassis": (2, "Server Chassis", False),
    "io_board": (2, "IO Expansion Board", False),
    "dependency": (2, "Dependency", False),
    "cpu": (2, "CPU", False),
    "system_memory": (2, "System Memory", False),
}


def default_rates() -> dict[str, float]:
    """Interruptions per million GPU-hours, by class."""
    return {name: count / LLAMA3_GPU_HOURS * 1e6 for name, (count, _c, _g) in LLAMA3.items()}
