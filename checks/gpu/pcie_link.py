"""pcie_link: every GPU's and NIC's PCIe link trained at its full width and speed, read from sysfs.

A GPU or NIC trained at x8, or at Gen3 or Gen4 in a Gen5 x16 slot, works and passes functional
checks while every host copy or RDMA transfer through it runs at half speed or less: the classic
reseat / riser / retimer fault. The kernel shows each PCI function's link in
/sys/bus/pci/devices/<bus id>/ (drivers/pci/pci-sysfs.c): `current_link_speed` ("32.0 GT/s PCIe"),
`current_link_width` ("16"), and the device's own `max_link_speed` / `max_link_width`. Read there,
the link is judged without the NVIDIA driver (a node whose NVML is wedged still answers) and for
the NICs too, which gpu_links (NVML) does not see.

Devices: NVIDIA GPUs (vendor 0x10de, class 0x0300 VGA or 0x0302 3D controller) numbered in bus id
order, as nvidia-smi numbers them, and Mellanox/NVIDIA NICs (vendor 0x15b3, class 0x0200
Ethernet or 0x0207 InfiniBand), function 0 only (a card's other functions share its link).

Rules: width below `min_width` (default: the device's own max width) fails, for every device.
Speed below `min_speed_gts` (default: the device's own max speed) fails for NICs; for GPUs it fails
unless the GPU sits at 2.5 GT/s, the speed NVIDIA GPUs drop to when idle to save power (recorded
with a note, not judged: gpu_links judges the speed under load). A link file missing or unreadable
is an `error` naming the device; no GPU on the bus is an `error`.

Measurements per device: pcie_width, pcie_width_max (lanes), pcie_speed, pcie_speed_max (GT/s),
labels `bus` and `device` ("gpu" or "nic"), `gpu` the GPU's index.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar

from checks.core.base import (
    ERROR,
    FAIL,
    PASS,
    Check,
    Command,
    CommandOutput,
    EvidenceError,
    Finding,
    Measurement,
    NodeContext,
    ParamsError,
    Verdict,
    register,
)
from checks.core.evidence import Rule
from checks.core.node_files import read_files, read_files_command
from checks.core.presentation import RESEAT_LINK, KeyMetric, OutlierMetric, Presentation, PromMetric, Remedy, lowest

LABEL = "pci sysfs"
DEVICES = "/sys/bus/pci/devices/*"
LINK = ("current_link_speed", "current_link_width", "max_link_speed", "max_link_width")
NAMES = ("vendor", "class", *LINK)
# Class codes (PCI Code and ID Assignment spec): 0x0300 VGA, 0x0302 3D controller, 0x0200
# Ethernet, 0x0207 InfiniBand. Vendors: 0x10de NVIDIA, 0x15b3 Mellanox (NVIDIA networking).
GPU_CLASSES, NIC_CLASSES = ("0x0300", "0x0302"), ("0x0200", "0x0207")
# PCIe 1.0's 2.5 GT/s: where an idle NVIDIA GPU parks its link ("Link Gen Current ... may be reduced
# when the GPU is not in use", nvidia-smi documentation).
IDLE_SPEED_GTS = 2.5
_SPEED = re.compile(r"^(\d+(?:\.\d+)?) GT/s")
# Shell builtins read a few hundred PCI functions' attributes in well under a second; 30 s leaves
# room for a loaded node (conservative default).
READ_TIMEOUT_S = 30.0


@dataclass
class PcieLinkParams:
    pass


@dataclass
class PcieLinkThresholds:
    # Lanes every GPU and NIC must train at; None: each device's own max_link_width.
    min_width: int | None = None
    # GT/s; None: each device's own max_link_speed. Profiles set the platform's generation.
    min_speed_gts: float | None = None

    def __post_init__(self) -> None:
        if self.min_width is not None and self.min_width not in (1, 2, 4, 8, 16, 32):
            raise ParamsError(f"threshold 'min_width': a PCIe link width (1..32 lanes), got {self.min_width}")
        if self.min_speed_gts is not None and not 2.5 <= self.min_speed_gts <= 128:
            raise ParamsError(f"threshold 'min_speed_gts': a PCIe speed (2.5..128 GT/s), got {self.min_speed_gts}")


@dataclass(frozen=True)
class Device:
    bus: str
    kind: str  # "gpu" or "nic"
    gpu: int | None
    files: dict[str, str | None]

    @property
    def name(self) -> str:
        return f"GPU {self.gpu} ({self.bus})" if self.gpu is not None else f"NIC {self.bus}"


def devices(files: dict[str, dict[str, str | None]]) -> list[Device]:
    """The GPUs (numbered in bus id order) and the NICs' function 0, from the read attributes."""
    gpus, nics = [], []
    for folder, attributes in sorted(files.items()):
        bus = folder.rsplit("/", 1)[-1]
        vendor, cls = attributes.get("vendor") or "", (attributes.get("class") or "")[:6]
        if vendor == "0x10de" and cls in GPU_CLASSES:
            gpus.append((bus, attributes))
        elif vendor == "0x15b3" and cls in NIC_CLASSES and bus.endswith(".0"):
            nics.append((bus, attributes))
    out = [Device(bus, "gpu", i, a) for i, (bus, a) in enumerate(gpus)]
    return out + [Device(bus, "nic", None, a) for bus, a in nics]


def _number(text: str | None, name: str) -> tuple[float | None, str]:
    """A link attribute's value, or None and why it is missing."""
    if text is None:
        return None, f"{name} missing or unreadable"
    match = _SPEED.match(text) if "speed" in name else re.fullmatch(r"\d+", text)
    if match is None:
        return None, f"{name} is {text[:40]!r}"
    return float(match.group(1) if "speed" in name else match.group(0)), ""


def device_measurements(device: Device) -> list[Measurement]:
    out = []
    for attribute, name, unit in (
        ("current_link_width", "pcie_width", "lanes"),
        ("max_link_width", "pcie_width_max", "lanes"),
        ("current_link_speed", "pcie_speed", "GT/s"),
        ("max_link_speed", "pcie_speed_max", "GT/s"),
    ):
        value, why = _number(device.files.get(attribute), attribute)
        labels = {"bus": device.bus, "device": device.kind, **({"missing": why} if why else {})}
        out.append(Measurement(name, value, unit, gpu=device.gpu, labels=labels))
    return out


def _judge_width(width: Measurement, widest: float, t: PcieLinkThresholds) -> str | None:
    floor = t.min_width if t.min_width is not None else widest
    width.threshold, width.ok = f">= {floor:g}", width.value is not None and width.value >= floor
    return None if width.ok else f"x{width.value:g}, expected x{floor:g}"


def _judge_speed(speed: Measurement, fastest: float, t: PcieLinkThresholds) -> str | None:
    floor = t.min_speed_gts if t.min_speed_gts is not None else fastest
    if speed.value is None:
        return "speed unknown"
    if speed.labels["device"] == "gpu" and speed.value == IDLE_SPEED_GTS < floor:
        speed.labels["note"] = "idle GPU: its link parks at 2.5 GT/s (judged under load by gpu_links)"
        return None
    speed.threshold, speed.ok = f">= {floor:g}", speed.value >= floor
    return None if speed.ok else f"{speed.value:g} GT/s, expected {floor:g} GT/s"


def device_findings(rows: dict[str, Measurement], name: str, t: PcieLinkThresholds) -> list[Finding]:
    missing = [m.labels["missing"] for m in rows.values() if m.value is None]
    if missing:
        return [Finding(ERROR, f"{name}: {'; '.join(missing)}")]
    faults = [
        _judge_width(rows["pcie_width"], rows["pcie_width_max"].value or 0, t),
        _judge_speed(rows["pcie_speed"], rows["pcie_speed_max"].value or 0, t),
    ]
    wrong = [f for f in faults if f]
    return (
        [Finding(FAIL, f"{name}: link trained at {' and '.join(wrong)} (reseat; check riser/cable)")] if wrong else []
    )


@register
class PcieLink(Check):
    key: ClassVar[str] = "pcie_link"
    name: ClassVar[str] = "PCIe links (sysfs)"
    description: ClassVar[str] = (
        "Each GPU's and NIC's PCIe link width and speed as the kernel trained it (sysfs): a device at x8 or "
        "below its generation is named with its bus id."
    )
    Params: ClassVar[type] = PcieLinkParams
    Thresholds: ClassVar[type] = PcieLinkThresholds
    evidence: ClassVar[dict[str, Rule]] = {
        # A link down reads 0 lanes; PCIe defines no link wider than x32 (PCIe Base Specification).
        "pcie_width": Rule("a PCIe link width", low=0, high=32, integer=True),
        "pcie_width_max": Rule("a PCIe link width", low=1, high=32, integer=True),
        # 2.5 GT/s (PCIe 1.0) to 128 GT/s (PCIe 7.0), the slowest and fastest defined.
        "pcie_speed": Rule("a PCIe link speed", low=2.5, high=128.0),
        "pcie_speed_max": Rule("a PCIe link speed", low=2.5, high=128.0),
    }
    profile_thresholds: ClassVar[dict[str, dict[str, Any]]] = {
        # H100/H200 SXM5 datasheets: PCIe Gen5 x16; PCIe 5.0 signals at 32 GT/s.
        "H100-SXM-8": {"min_width": 16, "min_speed_gts": 32.0},
        "H200-SXM-8": {"min_width": 16, "min_speed_gts": 32.0},
        # A100 SXM4 datasheet: PCIe Gen4 x16; PCIe 4.0 signals at 16 GT/s.
        "A100-SXM-8": {"min_width": 16, "min_speed_gts": 16.0},
    }
    presentation: ClassVar[Presentation] = Presentation(
        rank=25,
        key_metrics=(
            KeyMetric(
                "pcie_width", "narrowest GPU PCIe link", "pcie_width", "lanes",
                per_gpu=True, gpu_agg="min", tolerance_pct=0.0, labels=(("device", "gpu"),),
            ),
        ),
        prometheus=(PromMetric("pcie_width", "kiln_pcie_link_width_lanes", "Trained PCIe link width, lanes"),),
        outliers=(
            OutlierMetric("pcie_width", "narrowest PCIe link", ("pcie_width",), "lanes", True, lowest("pcie_width")),
        ),
        remedies=(Remedy("link", RESEAT_LINK),),
    )  # fmt: skip

    def commands(self, params: Any, node: NodeContext) -> list[Command]:
        return [read_files_command(DEVICES, NAMES, label=LABEL, timeout=READ_TIMEOUT_S)]

    def parse(self, outputs: list[CommandOutput]) -> list[Measurement]:
        found = devices(read_files(outputs[0].stdout, NAMES))
        if not any(d.kind == "gpu" for d in found):
            raise EvidenceError(f"no NVIDIA GPU among the PCI devices in sysfs ({len(found)} NICs found)")
        return [m for d in found for m in device_measurements(d)]

    def evaluate(self, measurements: list[Measurement], thresholds: Any, node: NodeContext) -> Verdict:
        t: PcieLinkThresholds = thresholds
        by_bus: dict[str, dict[str, Measurement]] = {}
        for m in measurements:
            by_bus.setdefault(m.labels["bus"], {})[m.name] = m
        findings: list[Finding] = []
        for bus, rows in by_bus.items():
            first = rows["pcie_width"]
            findings += device_findings(rows, Device(bus, first.labels["device"], first.gpu, {}).name, t)
        gpus = sum(1 for rows in by_bus.values() if rows["pcie_width"].labels["device"] == "gpu")
        pass_reason = f"{gpus} GPUs and {len(by_bus) - gpus} NICs at their full PCIe link width and speed"
        if not findings:
            findings.append(Finding(PASS, pass_reason))
        return Verdict.from_findings(findings, pass_reason=pass_reason)
