"""gpu_power_limit: every GPU may draw its rated board power.

A GPU capped below its rated power (an `nvidia-smi -pl` left over from a test, a DCGM or BMC power
policy, a node-level cap) passes every functional check and still runs large jobs slower: under
load it throttles on `sw_power_cap` long before its thermal limits. Evidence: the probe's
`power.limit_w` (NVML nvmlDeviceGetEnforcedPowerLimit, the limit the GPU actually enforces) and
`power.draw_w` (recorded, not judged: one instant of an idle node says nothing about a cap).

A missing limit is an `error` naming the GPU; a limit that cannot exist (zero, negative, above
any board's power) is impossible evidence; with no floor configured the result is a `warn`
"not judged", never a pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from checks.core.base import ERROR, FAIL, PASS, Finding, Measurement, NodeContext, ParamsError, Verdict, register
from checks.core.evidence import Rule
from checks.core.presentation import (
    CertificateChart,
    KeyMetric,
    OutlierMetric,
    Presentation,
    PromMetric,
    TrendRule,
    lowest,
)
from checks.core.probe_check import PROBE_EVIDENCE, Facts, Probe, ProbeCheck, ProbeParams

# The largest board power of any NVIDIA data-centre GPU (B200 HGX: 1,000 W, NVIDIA DGX B200
# datasheet) with room to spare: a limit above it is a misread, not a GPU.
MAX_BOARD_POWER_W = 2000.0


@dataclass
class PowerThresholds:
    # Lowest acceptable enforced power limit per GPU, W; None = not judged (hardware profiles set it).
    min_power_limit_w: float | None = None

    def __post_init__(self) -> None:
        if self.min_power_limit_w is not None and not 0 < self.min_power_limit_w <= MAX_BOARD_POWER_W:
            raise ParamsError(
                f"threshold 'min_power_limit_w': must be in (0, {MAX_BOARD_POWER_W:g}] W, got {self.min_power_limit_w}"
            )


@register
class GpuPowerLimit(ProbeCheck):
    key: ClassVar[str] = "gpu_power_limit"
    name: ClassVar[str] = "GPU power limit"
    description: ClassVar[str] = "Each GPU's enforced power limit is at least its rated board power (no leftover cap)."
    Params: ClassVar[type] = ProbeParams
    Thresholds: ClassVar[type] = PowerThresholds
    evidence: ClassVar[dict[str, Rule]] = {
        **PROBE_EVIDENCE,
        "power_limit_w": Rule("an enforced power limit", low=1.0, high=MAX_BOARD_POWER_W),
    }
    profile_thresholds: ClassVar[dict[str, dict[str, Any]]] = {
        # H100 SXM5 datasheet: max thermal design power (TDP) up to 700 W.
        "H100-SXM-8": {"min_power_limit_w": 700.0},
        # H200 SXM datasheet: max TDP up to 700 W.
        "H200-SXM-8": {"min_power_limit_w": 700.0},
        # A100 SXM4 80GB datasheet: max TDP 400 W.
        "A100-SXM-8": {"min_power_limit_w": 400.0},
    }
    presentation: ClassVar[Presentation] = Presentation(
        rank=60,
        key_metrics=(
            KeyMetric(
                "power_limit", "GPU enforced power limit", "power_limit_w", "W",
                per_gpu=True, gpu_agg="min", tolerance_pct=0.0,
            ),
        ),
        # Any step down of a limit is a reconfiguration worth a look (1 W: NVML reports whole mW).
        trends=(TrendRule("power_limit_w", -1, 1.0, False, "GPU power limit lowered", "W"),),
        prometheus=(PromMetric("power_limit_w", "kiln_gpu_power_limit_watts", "Enforced GPU power limit, W"),),
        outliers=(
            OutlierMetric(
                "power_limit", "lowest GPU power limit", ("power_limit_w",), "W", True, lowest("power_limit_w")
            ),
        ),
        certificate_charts=(
            CertificateChart(
                "Enforced power limit per GPU", "bars", ("power_limit_w",), "W", x_title="node (a bar per GPU)"
            ),
        ),
    )  # fmt: skip

    def measure(self, probe: Probe) -> list[Measurement]:
        out: list[Measurement] = []
        for gpu in probe.gpus:
            if gpu.answered:
                out += [
                    gpu.number("power_limit_w", "power", "limit_w", unit="W"),
                    gpu.number("power_draw_w", "power", "draw_w", unit="W"),
                ]
        return out

    def evaluate(self, measurements: list[Measurement], thresholds: Any, node: NodeContext) -> Verdict:
        t: PowerThresholds = thresholds
        facts = Facts(measurements)
        if not facts.listed:
            return Verdict(ERROR, "probe listed no GPUs")
        findings: list[Finding] = []
        for i in facts.listed:
            if i in facts.silent:
                findings.append(Finding(ERROR, f"GPU {i}: no power data (GPU not responding: {facts.silent[i]})"))
                continue
            limit = facts.get("power_limit_w", i)
            if limit.value is None:
                findings.append(
                    Finding(ERROR, f"GPU {i}: power limit unavailable ({facts.missing('power_limit_w', i)})")
                )
            elif t.min_power_limit_w is not None:
                limit.threshold, limit.ok = f">= {t.min_power_limit_w:g}", limit.value >= t.min_power_limit_w
                if not limit.ok:
                    findings.append(
                        Finding(FAIL, f"GPU {i}: power limit {limit.value:g} W, rated {t.min_power_limit_w:g} W")
                    )
        unlisted = facts.unlisted() or []
        if unlisted:
            findings.append(Finding(ERROR, f"GPUs {unlisted}: counted by the driver, no power data"))
        limits = sorted({v for i in facts.answered if (v := facts.value("power_limit_w", i)) is not None})
        pass_reason = f"{len(facts.answered)} GPUs, power limit {', '.join(f'{v:g}' for v in limits)} W"
        if not findings:
            findings.append(Finding(PASS, pass_reason))
        return Verdict.from_findings(findings, pass_reason=pass_reason)
