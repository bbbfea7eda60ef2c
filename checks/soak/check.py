"""power_soak: the whole-cluster heat soak of the power-and-cooling acceptance.

Every node of the run starts gpu_burn on all its GPUs at the same moment, under the probe's
sampling mode with node power (`python3 - --sample 1 --node-power --start-at EPOCH -- gpu_burn
[-tc] DURATION`): NVML GPU power and the BMC's node power at 1 Hz, on one time base. Meanwhile the
worker reads the PDUs' phase currents and the CDUs' supply/return/flow over Redfish where the
facility model names endpoints (checks/soak/samples.py FACILITY_READERS). The readings are put
on one grid and judged by checks/soak/judge.py against the facility model: node peak and
steady power, non-GPU draw, rack budgets, PDU phases against 80% of their breakers and their
balance, A/B feed failover, UPS capacity against 120% of the peak, and the liquid's share of the
heat per loop. A GPU held back by heat or its power brake during the soak fails its node, as in
burn-in (checks/core/sampling.py JUDGED_CLOCK_REASONS): a loop at full load behaves differently from one
node at a time.

No evidence, no pass: a node whose probe could not run, printed nothing usable, or whose BMC gave
no power readings is `error` naming why, and so is every rack, PDU phase, UPS or loop whose sum
needs it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from checks.core.base import (
    ERROR,
    FAIL,
    PASS,
    Command,
    CommandOutput,
    GroupContext,
    GroupVerdict,
    Measurement,
    NodeContext,
    ParamsError,
    Series,
    Verdict,
    register,
    worst_status,
)
from checks.core.evidence import Rule
from checks.core.fanout import FacilityReader, FanOutCheck
from checks.core.presentation import CapacityLayout, CapacityMeasure, CertificateSection, Presentation, SubjectKind
from checks.core.sampling import JUDGED_CLOCK_REASONS, SAMPLING_LABEL
from checks.soak.data import PROFILE_THRESHOLDS, SoakThresholds
from checks.soak.judge import SOAK_EVIDENCE, judge_soak, soak_charts
from checks.soak.samples import FACILITY_READERS, Assembled, assemble, facility_errors


@dataclass
class PowerSoakParams:
    # 30 min by default, the power-and-cooling acceptance's soak length (the steady window, the
    # last quarter, is then 7.5 min); the demo's plan sets a short one.
    duration_s: int = 1800
    # Node power sampled at 1 Hz, time-aligned with NVML's samples (one time base for every reading).
    sample_interval_s: float = 1.0
    # gpu_burn -tc: tensor-core GEMM keeps an H100 at its board power limit, the highest sustained
    # draw gpu_burn's modes reach (the soak is about power, not FP64 correctness).
    use_tensor_cores: bool = True
    # The tool on the nodes' PATH (gpu-burn's build names it gpu_burn); a full path where it is not.
    gpu_burn_path: str = "gpu_burn"
    # Seconds before the common start, so that every node's command has begun by then: 5 s, plus
    # 0.25 s per node for the connects and execs the worker's threads make in parallel (paramiko:
    # ~60 ms per connect, 80-125 ms per exec, paramiko as measured on 2-core machines).
    start_slack_s: float = 5.0
    start_per_node_s: float = 0.25

    def __post_init__(self) -> None:
        if self.duration_s < 10:
            raise ParamsError(f"param 'duration_s': must be >= 10, got {self.duration_s}")
        if not 0.1 <= self.sample_interval_s <= 60:
            raise ParamsError(f"param 'sample_interval_s': must be in 0.1..60, got {self.sample_interval_s}")
        if self.duration_s / self.sample_interval_s > 200_000:
            raise ParamsError("params: more than 200,000 samples per node (raise sample_interval_s)")
        if not self.gpu_burn_path or self.gpu_burn_path.startswith("-"):
            raise ParamsError("param 'gpu_burn_path': must be a path")
        for name in ("start_slack_s", "start_per_node_s"):
            if not 0 <= getattr(self, name) <= 600:
                raise ParamsError(f"param {name!r}: must be in 0..600 s")

    @property
    def limit_s(self) -> float:
        # The before/after probes, gpu_burn's start-up and its 30 s SIGTERM grace (burn-in's rule).
        return float(self.duration_s + max(120, int(self.duration_s * 0.05)))


@register
class PowerSoak(FanOutCheck):
    key: ClassVar[str] = "power_soak"
    fewer_nodes_advice: ClassVar[str] = "soak fewer nodes at once (by rack)"
    name: ClassVar[str] = "Power and cooling heat soak"
    description: ClassVar[str] = (
        "Every node burns all GPUs at once: node, rack, PDU phase, A/B feed, UPS and cooling loop judged "
        "against the facility model."
    )
    # 60 samples at the default 1 Hz: the judge needs 54 (90% coverage, at least 40:
    # checks/soak/data.py), 15 in the steady window. The BMC readings are a compiled simulator
    # (testbed/sim/fake_ipmitool.c, ~1 ms of CPU each): the Python one (~50 ms each) lost up to 15% of
    # the readings of eight nodes at 1 Hz on a busy 2-core machine, so the demo had sampled every 2 s.
    simulator_params: ClassVar[dict[str, Any]] = {"duration_s": 60, "sample_interval_s": 1.0}
    Params: ClassVar[type] = PowerSoakParams

    def declared_s(self, params: Any) -> float:
        # Every node burns for duration_s from a common start, start_slack_s after the commands go out.
        return float(params.duration_s) + params.start_slack_s

    Thresholds: ClassVar[type] = SoakThresholds
    profile_thresholds: ClassVar[dict[str, dict[str, Any]]] = PROFILE_THRESHOLDS
    evidence: ClassVar[dict[str, Rule]] = SOAK_EVIDENCE
    facility_readers: ClassVar[dict[str, FacilityReader]] = FACILITY_READERS
    needs_facility: ClassVar[bool] = True
    min_nodes: ClassVar[int] = 1
    # Every node's exit status is judged with that node (a node whose burn failed is its own
    # `error`, not the whole soak's): node_problem in checks/soak/samples.py.
    ok_exit_codes: ClassVar[tuple[int, ...]] = tuple(range(256))
    # The cluster's capacity page draws it; the certificate lists each facility subject's verdict.
    presentation: ClassVar[Presentation] = Presentation(
        chart="capacity",
        rank=60,
        capacity=CapacityLayout(
            measures=(
                CapacityMeasure("node", "peak", "node_peak_power_w"),
                CapacityMeasure("node", "steady", "node_steady_power_w"),
                CapacityMeasure("node", "gpu", "node_gpu_power_w"),
                CapacityMeasure("node", "non_gpu", "node_non_gpu_power_w"),
                CapacityMeasure("rack", "peak", "rack_peak_power_w"),
                CapacityMeasure("rack", "steady", "rack_steady_power_w"),
                CapacityMeasure("pdu_phase", "current", "phase_peak_current_a"),
                CapacityMeasure("pdu_phase", "imbalance", "pdu_phase_imbalance"),
                CapacityMeasure("feed", "capacity", "feed_capacity_w"),
                CapacityMeasure("ups", "capacity", "ups_capacity_w"),
                CapacityMeasure("ups", "load", "ups_peak_load_w"),
                CapacityMeasure("loop", "supply", "loop_supply_c"),
                CapacityMeasure("loop", "return", "loop_return_c"),
                CapacityMeasure("loop", "flow", "loop_flow_lpm"),
                CapacityMeasure("loop", "heat", "loop_heat_removed_w"),
                CapacityMeasure("loop", "power", "loop_power_w"),
                CapacityMeasure("loop", "capture", "loop_capture_ratio"),
            ),
            cluster_series="cluster_power_w",
            rack_series="rack_power_w",
        ),
        certificate_section=CertificateSection(
            title="Power and cooling",
            subjects=(
                SubjectKind("rack", "Racks"),
                SubjectKind("pdu_phase", "PDU phases"),
                SubjectKind("feed", "A/B feeds"),
                SubjectKind("ups", "UPS"),
                SubjectKind("loop", "Cooling loops"),
                SubjectKind("soak", "Soak"),
            ),
        ),
    )

    def node_commands(self, params: Any, group: GroupContext, node: NodeContext) -> list[Command]:
        from checks.probe import probe_source  # lazy: reading the script is I/O, not needed to judge

        p: PowerSoakParams = params
        burn = (p.gpu_burn_path, *(("-tc",) if p.use_tensor_cores else ()), str(p.duration_s))
        argv: tuple[str, ...] = ("python3", "-", "--sample", f"{p.sample_interval_s:g}", "--node-power")
        # The executor sets the common start; without one (a single node's command shown or
        # fuzzed on its own) the node starts at once.
        if group.start_at is not None:
            argv += ("--start-at", f"{group.start_at:.3f}")
        argv += ("--", *burn)
        delay = self.start_delay_s(p, len(group.nodes))
        label = f"{SAMPLING_LABEL} on {node.hostname}"
        return [Command(argv=argv, stdin=probe_source(), timeout=delay + p.limit_s, label=label)]

    def judge_fan_out(
        self,
        params: Any,
        thresholds: Any,
        per_node: dict[str, list[CommandOutput]],
        facility: list[CommandOutput],
        group: GroupContext,
    ) -> tuple[list[Measurement], GroupVerdict, list[Series]]:
        p: PowerSoakParams = params
        t: SoakThresholds = thresholds
        model = group.facility or {}
        got = assemble(per_node, facility, p.sample_interval_s, p.duration_s)
        result = judge_soak(model, got.samples, t)
        nodes = result.node_verdicts()
        _node_causes(nodes, got)
        _throttled(nodes, got)
        statuses = [f.status for f in result.findings if f.kind != "node"] + [v.status for v in nodes.values()]
        status = worst_status(statuses) if statuses else ERROR
        reason = _reason(result.verdict.reason, status, nodes, facility_errors(facility))
        verdict = GroupVerdict(status, reason, list(result.verdict.findings), node_verdicts=nodes)
        return result.measurements, verdict, _series(model, got.samples, t)


def _node_causes(nodes: dict[str, Verdict], got: Assembled) -> None:
    """A node whose output could not be read: its own cause, not only "no power readings"."""
    for host, why in got.problems.items():
        nodes[host] = Verdict(ERROR, f"node {host}: {why}")


def _throttled(nodes: dict[str, Verdict], got: Assembled) -> None:
    """A GPU slowed by heat or its power brake during the soak fails its node (burn-in's rule)."""
    for host, doc in got.docs.items():
        events = doc.throttle_events(JUDGED_CLOCK_REASONS)
        if not events:
            continue
        named = "; ".join(e.describe() for e in events[:3]) + (
            f" and {len(events) - 3} more" if len(events) > 3 else ""
        )
        before = nodes.get(host)
        text = f"node {host}: clocks held back under the soak: {named}"
        nodes[host] = Verdict(FAIL, f"{text}; {before.reason}" if before and before.status != PASS else text)


def _reason(judged: str, status: str, nodes: dict[str, Verdict], errors: dict[str, list[str]]) -> str:
    bad = sorted(h for h, v in nodes.items() if v.status in (FAIL, ERROR))
    parts = [judged] if judged else []
    if bad and status != PASS:
        parts.append("nodes: " + "; ".join(nodes[h].reason for h in bad[:3]) + (" ..." if len(bad) > 3 else ""))
    unread = {name: why for name, why in errors.items() if why}
    if unread:
        parts.append("facility endpoints: " + "; ".join(f"{n}: {w[0]}" for n, w in sorted(unread.items())[:3]))
    return "; ".join(parts)


def _series(model: dict[str, Any], samples: dict[str, Any], t: SoakThresholds) -> list[Series]:
    """Cluster and rack power over the soak, as stored (the capacity page and the certificate)."""
    charts = soak_charts(model, samples, t)
    if isinstance(charts, str):
        return []
    found = [charts.cluster, *charts.racks.values()]
    return [s for s in found if any(v is not None and math.isfinite(v) for v in s.y)]
