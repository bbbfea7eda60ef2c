"""`nvidia-smi -q` as text for the simulated nvidia-smi (testbed/sim/nvidia-smi), installed beside it
as kiln_sim_nvsmi_text.py.

The layout is driver 535's (tests/fixtures/nvidia-smi-fabric/nvidia-smi-q-h100x8-535.161.08-
fabric-completed.txt): a header, `Attached GPUs`, then one `GPU <bus id>` block per GPU, the colon
of every `Key : value` line at column 42, sections indented by four. Only the sections whose facts
the XML also carries are printed, from the same `Gpu` objects, so the two paths stay in step.
Standard library only.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

# The reasons driver 535 lists in `nvidia-smi -q`, with their NVML bits (nvml.h).
REASON_NAMES = (
    ("Idle", 0x1),
    ("Applications Clocks Setting", 0x2),
    ("SW Power Cap", 0x4),
    ("HW Slowdown", 0x8),
    ("Sync Boost", 0x10),
    ("SW Thermal Slowdown", 0x20),
    ("Display Clock Setting", 0x100),
)


def kv(indent: int, key: str, value: object) -> str:
    """One `Key : value` line of `nvidia-smi -q`, the colon at column 42 as nvidia-smi aligns it."""
    return f"{' ' * indent}{key.ljust(42 - indent)}: {value}\n"


def section(indent: int, name: str, rows: Sequence[tuple[str, object]]) -> str:
    return " " * indent + name + "\n" + "".join(kv(indent + 4, k, v) for k, v in rows)


def gpu_text(state: dict[str, str], gpu: Any, minor: int) -> str:
    """One GPU of `nvidia-smi -q` in driver 535's layout: the sections its XML (nvidia-smi) carries."""
    ecc = "Enabled" if gpu.ecc_enabled else "Disabled"
    reasons = [(name, "Active" if gpu.reasons & bit else "Not Active") for name, bit in REASON_NAMES]
    mem = ("Memory", "2619 MHz")
    return "".join(
        [
            f"GPU {gpu.bus_id}\n",
            kv(4, "Product Name", state["model"]),
            kv(4, "Product Brand", "NVIDIA"),
            kv(4, "Product Architecture", "Ampere" if "A100" in state["model"] else "Hopper"),
            kv(4, "Display Mode", "Disabled"),
            kv(4, "Display Active", "Disabled"),
            kv(4, "Persistence Mode", gpu.persistence),
            kv(4, "Addressing Mode", "None"),
            section(4, "MIG Mode", [("Current", gpu.mig), ("Pending", gpu.mig)]),
            kv(4, "Accounting Mode", "Disabled"),
            kv(4, "Serial Number", gpu.serial),
            kv(4, "GPU UUID", gpu.uuid),
            kv(4, "Minor Number", minor),
            kv(4, "VBIOS Version", state["vbios"]),
            kv(4, "Module ID", gpu.slot + 1),
            section(4, "PCI", [("Bus", f"0x{gpu.bus:02X}"), ("Domain", "0x0000"), ("Bus Id", gpu.bus_id)]),
            kv(4, "Performance State", "P0"),
            section(4, "Clocks Event Reasons", reasons),
            section(4, "ECC Mode", [("Current", ecc), ("Pending", ecc)]),
            section(4, "Temperature", [("GPU Current Temp", f"{gpu.temp} C")]),
            section(4, "GPU Power Readings", [("Power Draw", f"{gpu.power_mw / 1000.0:.2f} W")]),
            section(4, "Clocks", [("Graphics", "345 MHz"), ("SM", "345 MHz"), mem]),
            section(4, "Applications Clocks", [("Graphics", f"{gpu.app_clock} MHz"), mem]),
            section(4, "Default Applications Clocks", [("Graphics", f"{gpu.default_app_clock} MHz"), mem]),
            section(4, "Max Clocks", [("Graphics", f"{gpu.max_clock} MHz"), ("SM", f"{gpu.max_clock} MHz"), mem]),
            section(4, "Fabric", [("State", gpu.fabric[0]), ("Status", gpu.fabric[1])]),
            kv(4, "Processes", "None"),
        ]
    )


def query_text(state: dict[str, str], gpus: Sequence[Any], cuda: str) -> str:
    """`nvidia-smi -q`: the header, then each GPU, a blank line apart."""
    head = "".join(
        [
            "\n==============NVSMI LOG==============\n\n",
            kv(0, "Timestamp", time.strftime("%a %b %d %H:%M:%S %Y")),
            kv(0, "Driver Version", state["driver"]),
            kv(0, "CUDA Version", cuda),
            "\n",
            kv(0, "Attached GPUs", len(gpus)),
        ]
    )
    return head + "\n".join(gpu_text(state, gpu, minor) for minor, gpu in enumerate(gpus)) + "\n"
