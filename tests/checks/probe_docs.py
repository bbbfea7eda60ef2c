"""Hand-written probe JSON (checks/probe/SCHEMA.md) for edge cases the real fixtures lack."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from checks.core.base import Command, CommandOutput

REPO = Path(__file__).resolve().parents[2]
A100_MIG = "nvsmi_q_x_A100-SXM4-80GB_MIG_drv535.xml"
RTX_ADA = "nvsmi_q_x_RTX4000Ada_drv595_v13schema.xml"

H100 = "NVIDIA H100 80GB HBM3"
DRIVER = "550.54.15"


def gpu_doc(index: int, **changes: Any) -> dict[str, Any]:
    gpu: dict[str, Any] = {
        "index": index,
        "name": H100,
        "uuid": f"GPU-0000000{index}-aaaa-bbbb-cccc-dddddddddddd",
        "serial": f"165492200123{index}",
        "pci_bus_id": f"00000000:{0x18 + index:02X}:00.0",
        "vbios_version": "96.00.89.00.01",
        "ecc_mode": {"current": True, "pending": True},
        "ecc_errors": {
            "volatile": {"corrected": 0, "uncorrected": 0},
            "aggregate": {"corrected": 0, "uncorrected": 0},
        },
        "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False},
        "retired_pages": None,
        "temperature": {"gpu": 35, "memory": 40},
        "power": {"draw_w": 70.5, "limit_w": 700.0},
        "clock_event_reasons": {"mask": 1, "active": ["gpu_idle"]},
        "pcie": {"gen_current": 5, "gen_max": 5, "width_current": 16, "width_max": 16},
        "errors": {"retired_pages": "Not Supported"},
    }
    for path, value in changes.items():
        set_path(gpu, path, value)
    return gpu


def set_path(doc: dict[str, Any], path: str, value: Any) -> None:
    """set_path(gpu, "ecc_errors__volatile__uncorrected", 2): '__' separates keys."""
    keys = path.split("__")
    node = doc
    for key in keys[:-1]:
        node = node[key]
    node[keys[-1]] = value


def probe_doc(n: int = 8, gpus: list[dict[str, Any]] | None = None, **top: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "schema": 1,
        "source": "nvml",
        "hostname": "gpu001",
        "collected_at": "2026-11-30T15:00:00Z",
        "driver_version": DRIVER,
        "cuda_version": "12.4",
        "gpu_count": n,
        "gpus": gpus if gpus is not None else [gpu_doc(i) for i in range(n)],
        "errors": [],
    }
    doc.update(top)
    return copy.deepcopy(doc)


def output(
    stdout: str | dict[str, Any],
    *,
    exit_code: int | None = 0,
    stderr: str = "",
    timed_out: bool = False,
    timeout: float = 60,
) -> list[CommandOutput]:
    text = stdout if isinstance(stdout, str) else json.dumps(stdout)
    command = Command(argv=("python3", "-"), timeout=timeout, stdin="#probe", label="probe.py")
    return [CommandOutput(command=command, stdout=text, stderr=stderr, exit_code=exit_code, timed_out=timed_out)]


def fixture(name: str) -> Path:
    """A real nvidia-smi capture from tests/fixtures/nvidia-smi (each with its .source.txt)."""
    path = REPO / "tests/fixtures/nvidia-smi" / name
    if path.exists():
        return path
    # The captures live in the repo: a missing one is a broken test, never a skipped one.
    pytest.fail(f"fixture {name} not found in tests/fixtures/nvidia-smi")
