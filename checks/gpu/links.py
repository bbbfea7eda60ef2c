"""gpu_links: each GPU's PCIe link (generation, width) and NVLinks (count active, speed).

Evidence: the probe JSON (PCIe current/max per GPU, and whether the GPU is idle) and
`nvidia-smi nvlink --status` (parser kind `nvlink_status`).

PCIe rule (why not just "current == max"): NVIDIA GPUs lower their PCIe link *generation* when
idle to save power (nvidia-smi's own docs: "Link Gen Current ... may be reduced when the GPU is
not in use"), so an idle, healthy GPU often reports Gen1. Width does not downshift that way: a
narrow link is a seating / riser / cable fault. So:
- width: current must be >= `min_pcie_width` (default: the GPU's own max width) - always judged;
- generation capability: max gen must be >= `min_pcie_gen` (a slot or retimer that cannot do it);
- current generation: judged against `min_pcie_gen` (default: the GPU's max) only when the GPU is
  *not* idle (probe clock_event_reasons has no `gpu_idle`); while idle it is recorded with
  labels["note"] and not judged.

NVLink: every GPU the probe lists must appear in the nvlink output; `expected_nvlinks_per_gpu`
links active (None = not judged, except that NVML's "all links are inactive" always fails) at
>= `min_nvlink_speed_gbs` GB/s each (as nvidia-smi prints it, gigabytes per second).

Measurements: pcie_gen_current, pcie_gen_max, pcie_width_current, pcie_width_max, gpu_idle (per
GPU); nvlink_speed (GB/s per link, labels link, state active|inactive); nvlinks_active (per GPU,
labels uuid, model, and note for NVML's message).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar

from checks.core.base import (
    ERROR,
    FAIL,
    PASS,
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
from checks.core.evidence import FLAG, Rule
from checks.core.parsers import Parsed, register_parser
from checks.core.presentation import RESEAT_LINK, Presentation, Remedy
from checks.core.probe_check import PROBE_EVIDENCE, Facts, Probe, ProbeCheck, ProbeParams

NVLINK_LABEL = "nvidia-smi nvlink"
# nvidia-smi reads NVLink state from NVML in a second or two on 8 GPUs; 30 s leaves room for a
# slow driver (conservative default; tune per site).
NVLINK_TIMEOUT_S = 30.0

_GPU = re.compile(r"^GPU (?P<index>\d+): (?P<model>.*?)(?: \(UUID: (?P<uuid>[^)]+)\))?\s*$")
_LINK = re.compile(r"^Link (?P<link>\d+): (?P<speed>[\d.]+) GB/s\s*$")
_LINK_INACTIVE = re.compile(r"^Link (?P<link>\d+): <inactive>\s*$")


def parse_nvlink_text(text: str) -> list[Measurement]:
    """`nvidia-smi nvlink --status` -> per-link speeds and per-GPU active counts."""
    out: list[Measurement] = []
    gpu: Measurement | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if match := _GPU.match(line):
            labels = {"model": match["model"].strip(), "uuid": match["uuid"] or ""}
            gpu = Measurement(name="nvlinks_active", value=0.0, unit="links", gpu=int(match["index"]), labels=labels)
            out.append(gpu)
            continue
        if gpu is None:
            continue
        if match := _LINK.match(line):
            labels = {"link": match["link"], "state": "active"}
            out.append(Measurement("nvlink_speed", float(match["speed"]), "GB/s", gpu.gpu, labels=labels))
            gpu.value = (gpu.value or 0) + 1
        elif match := _LINK_INACTIVE.match(line):
            labels = {"link": match["link"], "state": "inactive"}
            out.append(Measurement("nvlink_speed", 0.0, "GB/s", gpu.gpu, labels=labels))
        elif line.startswith("NVML:") or "inactive" in line.lower():
            gpu.labels["note"] = line  # "NVML: Unable to retrieve NVLink information as all links are inactive"
    if not any(m.name == "nvlinks_active" for m in out):
        first = next((line.strip() for line in text.splitlines() if line.strip()), "")
        raise EvidenceError(
            f"nvidia-smi nvlink listed no GPU ({first[:80]!r})" if first else "nvidia-smi nvlink printed nothing"
        )
    return out


@register_parser("nvlink_status")
def parse_nvlink_status(text: str) -> Parsed:
    measurements = parse_nvlink_text(text)
    warnings = [
        f"GPU {m.gpu}: {m.labels['note']}" for m in measurements if m.name == "nvlinks_active" and m.labels.get("note")
    ]
    return Parsed(measurements, warnings)


@dataclass
class LinksThresholds:
    # None = the GPU's own max generation / width (as NVML reports it).
    min_pcie_gen: int | None = None
    min_pcie_width: int | None = None
    # None = not judged (PCIe cards have none); profiles set the SXM baseboard's link count.
    expected_nvlinks_per_gpu: int | None = None
    # GB/s per link as nvidia-smi prints it; None = not judged.
    min_nvlink_speed_gbs: float | None = None

    def __post_init__(self) -> None:
        for name in ("min_pcie_gen", "min_pcie_width", "expected_nvlinks_per_gpu", "min_nvlink_speed_gbs"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ParamsError(f"threshold {name!r}: must be >= 0 or None, got {value}")


# How the certificate names these measurements (checks/core/presentation.py measurement_labels).
LINK_LABELS = (
    ("pcie_gen_max", "PCIe generation (max)"),
    ("pcie_width_current", "PCIe link width (current)"),
    ("nvlinks_active", "Active NVLinks"),
    ("nvlink_speed", "NVLink speed"),
)


@register
class GpuLinks(ProbeCheck):
    key: ClassVar[str] = "gpu_links"
    name: ClassVar[str] = "GPU links"
    description: ClassVar[str] = "PCIe generation and width, NVLink status."
    Params: ClassVar[type] = ProbeParams
    Thresholds: ClassVar[type] = LinksThresholds
    presentation: ClassVar[Presentation] = Presentation(
        measurement_labels=LINK_LABELS, remedies=(Remedy("link", RESEAT_LINK),)
    )
    evidence: ClassVar[dict[str, Rule]] = {
        **PROBE_EVIDENCE,
        # PCIe 1.0 to 7.0 (PCI-SIG released PCIe 7.0 in June 2025): NVML reports the generation number.
        "pcie_gen_current": Rule("a PCIe generation", low=1, high=7, integer=True),
        "pcie_gen_max": Rule("a PCIe generation", low=1, high=7, integer=True),
        "gpu_idle": FLAG,
    }
    profile_thresholds: ClassVar[dict[str, dict[str, Any]]] = {
        # H100 SXM5 datasheet: PCIe Gen5 x16 host interface; NVLink 900 GB/s = 18 fourth-gen
        # links (Hopper architecture whitepaper) of 25 GB/s per direction. nvidia-smi reports
        # each as 26.562 GB/s (signalling rate); a link trained down reports far less.
        "H100-SXM-8": {
            "min_pcie_gen": 5,
            "min_pcie_width": 16,
            "expected_nvlinks_per_gpu": 18,
            "min_nvlink_speed_gbs": 25.0,
        },
        # H200 SXM datasheet: PCIe Gen5 x16, NVLink 900 GB/s (the same 18 NVLink4 links as H100).
        "H200-SXM-8": {
            "min_pcie_gen": 5,
            "min_pcie_width": 16,
            "expected_nvlinks_per_gpu": 18,
            "min_nvlink_speed_gbs": 25.0,
        },
        # A100 SXM4 datasheet: PCIe Gen4 x16; NVLink 600 GB/s = 12 third-gen links (Ampere
        # architecture whitepaper) at 25 GB/s per direction, printed "25 GB/s" by nvidia-smi
        # (AzureHPC health checks' good_nvlink_status fixture).
        "A100-SXM-8": {
            "min_pcie_gen": 4,
            "min_pcie_width": 16,
            "expected_nvlinks_per_gpu": 12,
            "min_nvlink_speed_gbs": 25.0,
        },
    }

    def commands(self, params: Any, node: NodeContext) -> list[Command]:
        nvlink = Command(
            argv=("nvidia-smi", "nvlink", "--status"), timeout=NVLINK_TIMEOUT_S, label=NVLINK_LABEL, read_only=True
        )
        return [*super().commands(params, node), nvlink]

    def describe_failure(self, output: CommandOutput) -> str:
        if output.command.label == NVLINK_LABEL:
            said = [s.strip() for s in (output.stdout + "\n" + output.stderr).splitlines() if s.strip()]
            return said[-1][:300] if said else "no output"
        return super().describe_failure(output)

    def parse(self, outputs: list[CommandOutput]) -> list[Measurement]:
        probe_outputs = [o for o in outputs if o.command.label != NVLINK_LABEL]
        nvlink = [o for o in outputs if o.command.label == NVLINK_LABEL]
        measurements = super().parse(probe_outputs)
        if not nvlink:
            raise EvidenceError("no nvidia-smi nvlink output to judge")
        return measurements + parse_nvlink_text(nvlink[0].stdout)

    def measure(self, probe: Probe) -> list[Measurement]:
        out: list[Measurement] = []
        for gpu in probe.gpus:
            if not gpu.answered:
                continue
            out += [
                gpu.number("pcie_gen_current", "pcie", "gen_current"),
                gpu.number("pcie_gen_max", "pcie", "gen_max"),
                gpu.number("pcie_width_current", "pcie", "width_current", unit="lanes"),
                gpu.number("pcie_width_max", "pcie", "width_max", unit="lanes"),
            ]
            active = gpu.get("clock_event_reasons", "active")
            idle = Measurement(name="gpu_idle", gpu=gpu.index)
            if isinstance(active, list):
                idle.value = 1.0 if "gpu_idle" in active else 0.0
            else:
                idle.labels["missing"] = gpu.reason("clock_event_reasons")
            out.append(idle)
        return out

    def evaluate(self, measurements: list[Measurement], thresholds: Any, node: NodeContext) -> Verdict:
        t: LinksThresholds = thresholds
        facts = Facts(measurements)
        findings: list[Finding] = []
        if not facts.listed:
            return Verdict(ERROR, "probe listed no GPUs")
        for i in facts.listed:
            if i in facts.silent:
                findings.append(Finding(ERROR, f"GPU {i}: no link data (GPU not responding: {facts.silent[i]})"))
                continue
            findings += self._pcie(facts, t, i)
            findings += self._nvlink(measurements, facts, t, i)
        unlisted = facts.unlisted() or []
        if unlisted:
            findings.append(Finding(ERROR, f"GPUs {unlisted}: counted by the driver, no link data"))
        n = len(facts.answered)
        links = f", {t.expected_nvlinks_per_gpu} NVLinks each" if t.expected_nvlinks_per_gpu else ""
        pass_reason = f"{n} GPUs: PCIe at full width{links}"
        if not findings:
            findings.append(Finding(PASS, pass_reason))
        return Verdict.from_findings(findings, pass_reason=pass_reason)

    def _pcie(self, facts: Facts, t: LinksThresholds, i: int) -> list[Finding]:
        names = ("pcie_gen_current", "pcie_gen_max", "pcie_width_current", "pcie_width_max")
        gen, gen_max, width, width_max = (facts.get(n, i) for n in names)
        missing = [m for m in (gen, gen_max, width, width_max) if m.value is None]
        if missing:
            what = ", ".join(m.name for m in missing)
            return [Finding(ERROR, f"GPU {i}: {what} unavailable ({facts.missing(missing[0].name, i)})")]
        need_gen = t.min_pcie_gen if t.min_pcie_gen is not None else int(gen_max.value or 0)
        need_width = t.min_pcie_width if t.min_pcie_width is not None else int(width_max.value or 0)
        bad = False
        width.threshold, width.ok = f">= {need_width}", (width.value or 0) >= need_width
        bad |= not width.ok
        if t.min_pcie_gen is not None:
            gen_max.threshold, gen_max.ok = f">= {need_gen}", (gen_max.value or 0) >= need_gen
            bad |= not gen_max.ok
        idle = facts.value("gpu_idle", i)
        if idle == 1.0:
            gen.labels["note"] = "GPU idle: the link generation may be lowered to save power; not judged"
        else:
            gen.threshold, gen.ok = f">= {need_gen}", (gen.value or 0) >= need_gen
            bad |= not gen.ok
        if not bad:
            return []
        have = f"Gen{int(gen.value or 0)} x{int(width.value or 0)}"
        why = "" if gen_max.ok is not False else f" (GPU/slot capable of Gen{int(gen_max.value or 0)} only)"
        return [Finding(FAIL, f"GPU {i}: PCIe {have}, expected Gen{need_gen} x{need_width}{why}")]

    def _nvlink(self, measurements: list[Measurement], facts: Facts, t: LinksThresholds, i: int) -> list[Finding]:
        summary = next((m for m in measurements if m.name == "nvlinks_active" and m.gpu == i), None)
        if summary is None:
            return [Finding(ERROR, f"GPU {i}: not listed by nvidia-smi nvlink --status")]
        active = int(summary.value or 0)
        note = summary.labels.get("note", "")
        if t.expected_nvlinks_per_gpu is not None:
            expected = t.expected_nvlinks_per_gpu
            summary.threshold, summary.ok = f">= {expected}", active >= expected
            if not summary.ok:
                return [Finding(FAIL, f"GPU {i}: {active} of {expected} NVLinks active")]
        elif note and "inactive" in note:
            summary.ok = False
            return [Finding(FAIL, f"GPU {i}: all NVLinks inactive ({note})")]
        findings = []
        slow = []
        for m in measurements:
            if m.name != "nvlink_speed" or m.gpu != i or t.min_nvlink_speed_gbs is None:
                continue
            if m.labels.get("state") == "inactive" and t.expected_nvlinks_per_gpu is not None:
                continue  # counted above: enough others are active
            m.threshold, m.ok = f">= {t.min_nvlink_speed_gbs:g}", (m.value or 0) >= t.min_nvlink_speed_gbs
            if not m.ok:
                slow.append(f"{m.labels['link']} at {m.value:g} GB/s")
        if slow:
            listed = ", ".join(slow[:4]) + (f" and {len(slow) - 4} more" if len(slow) > 4 else "")
            findings.append(Finding(FAIL, f"GPU {i}: NVLink {listed}, expected >= {t.min_nvlink_speed_gbs:g} GB/s"))
        return findings
