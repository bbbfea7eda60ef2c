"""`nvidia-smi -q` (the human-readable query, not `-x`) read into per-GPU configuration facts.

The text is a tree written with indentation: a `GPU 00000000:19:00.0` line opens each GPU, then
`Key : value` lines and section headers (`MIG Mode`, `Applications Clocks`, `Fabric`) whose fields
are indented below them (tests/fixtures/nvidia-smi-fabric, driver 535.161.08 on 8x H100). Each
GPU's lines become a map from the path of section names to the value
(("Fabric", "State") -> "Completed"), read by indentation rather than by fixed column counts, so
that a block pasted at another indent (the Azure fixture's lone `Fabric` block) reads the same.

What the GPU configuration check reads (`read_gpu_config`), per GPU in listing order (nvidia-smi
numbers GPUs in PCI bus order, as it lists them), labels bus = the PCI bus id:
- persistence_mode 1/0 ("Persistence Mode");
- mig_mode text Enabled/Disabled/N/A ("MIG Mode" Current; N/A on a GPU without MIG), labels
  pending (its Pending value);
- app_clock_graphics, default_app_clock_graphics, max_clock_graphics (MHz): "Applications Clocks",
  "Default Applications Clocks" and "Max Clocks" Graphics;
- clocks_event_app_setting 1/0: "Clocks Event Reasons" ("Clocks Throttle Reasons" before driver
  535) "Applications Clocks Setting" Active / Not Active;
- fabric_state, fabric_status text ("Fabric" State / Status; "N/A" where the GPU has no fabric).
A value nvidia-smi prints as N/A, or a line that is absent, is recorded as missing (value None or
text "", labels["missing"] saying which) for the check to judge; a number is only ever digits (a
"nan MHz" or "-1 MHz" is missing, never a number).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from checks.core.base import EvidenceError, Measurement
from checks.core.parsers import Parsed, register_parser

_GPU_HEADER = re.compile(r"^GPU (?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")
_FIELD = re.compile(r"^(?P<key>[^:]+?)\s*:\s?(?P<value>.*)$")
_MHZ = re.compile(r"^(?P<mhz>\d{1,6}) MHz$")
NA = ("N/A", "[N/A]", "Not Supported", "[Not Supported]", "Unknown Error", "")
Path = tuple[str, ...]


@dataclass
class GpuBlock:
    """One GPU's lines of `nvidia-smi -q`: its bus id and its values by section path."""

    index: int
    bus: str
    values: dict[Path, str] = field(default_factory=dict)

    def get(self, *paths: Path) -> str | None:
        """The value at the first of `paths` present (older drivers name some sections differently)."""
        for path in paths:
            if path in self.values:
                return self.values[path]
        return None


@dataclass
class QueryDoc:
    """`nvidia-smi -q` as read: the attached GPU count (None when absent) and each GPU's block."""

    attached: int | None
    driver: str
    gpus: list[GpuBlock]


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def read_tree(lines: list[str]) -> dict[Path, str]:
    """Indented `Key : value` lines and section headers -> {section path: value}."""
    values: dict[Path, str] = {}
    stack: list[tuple[int, str]] = []  # (indent, section name) of the open sections
    for raw in lines:
        if not raw.strip():
            continue
        indent = _indent(raw)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        text = raw.strip()
        match = _FIELD.match(text)
        if match is None:
            stack.append((indent, text))  # a section header: what follows, indented deeper, is in it
            continue
        path = (*(name for _, name in stack), match["key"].strip())
        values.setdefault(path, match["value"].strip())
        # "Clocks Event Reasons" > "HW Slowdown : Active" has sub-reasons indented below it.
        stack.append((indent, match["key"].strip()))
    return values


def read_query(text: str) -> QueryDoc:
    """The text of `nvidia-smi -q` -> its GPU blocks; EvidenceError when it lists no GPU."""
    head: list[str] = []
    blocks: list[tuple[str, list[str]]] = []
    for raw in text.splitlines():
        match = _GPU_HEADER.match(raw.rstrip())
        if match:
            blocks.append((match["bus"], []))
        elif blocks:
            blocks[-1][1].append(raw)
        else:
            head.append(raw)
    top = read_tree(head)
    if not blocks:
        first = next((line.strip() for line in text.splitlines() if line.strip()), "")
        what = f" ({first[:80]!r})" if first else " (no output)"
        raise EvidenceError(f"nvidia-smi -q listed no 'GPU <bus id>' section{what}")
    attached_text = top.get(("Attached GPUs",), "")
    attached = int(attached_text) if attached_text.isdigit() else None
    gpus = [GpuBlock(index=i, bus=bus, values=read_tree(lines)) for i, (bus, lines) in enumerate(blocks)]
    return QueryDoc(attached=attached, driver=top.get(("Driver Version",), ""), gpus=gpus)


def _missing(value: str | None, what: str) -> str:
    return f"{what} absent from nvidia-smi -q" if value is None else f"{what} is {value or 'empty'}"


def _flag(gpu: GpuBlock, name: str, on: str, off: str, what: str, *paths: Path) -> Measurement:
    value = gpu.get(*paths)
    m = Measurement(name=name, gpu=gpu.index, labels={"bus": gpu.bus})
    if value == on:
        m.value = 1.0
    elif value == off:
        m.value = 0.0
    else:
        m.labels["missing"] = _missing(value, what)
    return m


def _text(gpu: GpuBlock, name: str, what: str, *paths: Path, keep_na: bool = False) -> Measurement:
    """A text fact; N/A is missing unless `keep_na` (MIG: N/A is the answer of a GPU without MIG)."""
    value = gpu.get(*paths)
    m = Measurement(name=name, gpu=gpu.index, labels={"bus": gpu.bus})
    if value is None or not value or (value in NA and not keep_na):
        m.labels["missing"] = _missing(value, what)
    else:
        m.text = value
    return m


def _mhz(gpu: GpuBlock, name: str, what: str, path: Path) -> Measurement:
    value = gpu.get(path)
    m = Measurement(name=name, unit="MHz", gpu=gpu.index, labels={"bus": gpu.bus})
    match = _MHZ.match(value or "")
    if match:
        m.value = float(match["mhz"])
    else:
        m.labels["missing"] = _missing(value, what)
    return m


def gpu_config(gpu: GpuBlock) -> list[Measurement]:
    """One GPU's configuration facts (see the module docstring)."""
    mig = _text(gpu, "mig_mode", "MIG Mode Current", ("MIG Mode", "Current"), keep_na=True)
    mig.labels["pending"] = gpu.get(("MIG Mode", "Pending")) or ""
    reasons = ("Clocks Event Reasons", "Applications Clocks Setting")
    return [
        _flag(gpu, "persistence_mode", "Enabled", "Disabled", "Persistence Mode", ("Persistence Mode",)),
        mig,
        _mhz(gpu, "app_clock_graphics", "Applications Clocks Graphics", ("Applications Clocks", "Graphics")),
        _mhz(
            gpu,
            "default_app_clock_graphics",
            "Default Applications Clocks Graphics",
            ("Default Applications Clocks", "Graphics"),
        ),
        _mhz(gpu, "max_clock_graphics", "Max Clocks Graphics", ("Max Clocks", "Graphics")),
        _flag(
            gpu,
            "clocks_event_app_setting",
            "Active",
            "Not Active",
            "Clocks Event Reasons: Applications Clocks Setting",
            reasons,
            ("Clocks Throttle Reasons", "Applications Clocks Setting"),  # drivers before 535
        ),
        *fabric(gpu),
    ]


def fabric(gpu: GpuBlock) -> list[Measurement]:
    """fabric_state and fabric_status; "N/A" is kept as the text (a GPU outside any fabric)."""
    out = []
    for name, key in (("fabric_state", "State"), ("fabric_status", "Status")):
        value = gpu.get(("Fabric", key))
        m = Measurement(name=name, gpu=gpu.index, labels={"bus": gpu.bus})
        if value:
            m.text = value
        else:
            m.labels["missing"] = _missing(value, f"Fabric {key}")
        out.append(m)
    return out


def read_gpu_config(text: str) -> list[Measurement]:
    """`nvidia-smi -q` -> gpu_count and every GPU's configuration facts; EvidenceError when the
    output lists fewer GPU sections than it says are attached (cut short) or none at all."""
    doc = read_query(text)
    if doc.attached is None:
        raise EvidenceError("nvidia-smi -q has no 'Attached GPUs' count: not nvidia-smi -q output, or cut short")
    if doc.attached != len(doc.gpus):
        raise EvidenceError(
            f"nvidia-smi -q lists {len(doc.gpus)} GPU sections but says {doc.attached} are attached (output cut short?)"
        )
    out = [Measurement(name="gpu_count", value=float(doc.attached), unit="GPUs")]
    for gpu in doc.gpus:
        out += gpu_config(gpu)
    return out


@register_parser("nvidia_smi_q")
def parse_nvidia_smi_q(text: str) -> Parsed:
    measurements = read_gpu_config(text)
    warnings = [
        f"GPU {m.gpu}: {m.labels['missing']}"
        for m in measurements
        if m.labels.get("missing") and m.name not in ("fabric_state", "fabric_status")
    ]
    return Parsed(measurements, warnings)


@register_parser("nvidia_smi_fabric")
def parse_nvidia_smi_fabric(text: str) -> Parsed:
    """Each GPU's `Fabric` State and Status from `nvidia-smi -q` (or from one GPU's Fabric block
    alone, as pasted in bug reports: it is GPU 0 with no bus id)."""
    try:
        gpus = read_query(text).gpus
    except EvidenceError:
        gpus = [GpuBlock(index=0, bus="", values=read_tree(text.splitlines()))]
    out = [m for gpu in gpus for m in fabric(gpu)]
    if all(m.labels.get("missing") for m in out):
        raise EvidenceError("no 'Fabric' State/Status in this output: not nvidia-smi -q, or a driver before 530")
    return Parsed(out)
