"""rdma_bw: RDMA bandwidth (and latency) of every HCA port, rail by rail.

perftest between node pairs: on every rail, mlx5_k of one node writes to mlx5_k of its partner
(`ib_write_bw -d mlx5_k -p PORT -F --report_gbits -a`, with `--use_cuda=GPU` for GPUDirect RDMA
when the params ask for it), after an `ib_write_lat` between the same ports. Pairs follow a ring
over the run's nodes in hostname order (checks/rdma/plan.py): every node serves its predecessor
and is the client of its successor on every rail, so every port is measured as a sender and as a
receiver, against two different partners, and every pair of the run runs at once.

A fan-out check (checks/core/fanout.py): each node runs one command over its own connection, the pair
runner (checks/probe/rdma_pairs.py, fed on stdin to `python3 -`), which starts this node's
perftest servers at once and its clients at the run's common start, then prints every process's
output as one JSON document. The judge (checks/rdma/judge.py) reads each pair from both ends and
names what is at fault: a port slow both ways, or the link of one pair.

No evidence, no pass: a pair whose ends did not both run and print a whole perftest report on the
planned HCA is `error`, and so is a pair asked to use GPU memory whose output shows none.
"""

from __future__ import annotations

from typing import Any, ClassVar

from checks.core.base import (
    ERROR,
    FAIL,
    PASS,
    WARN,
    Command,
    CommandOutput,
    Finding,
    GroupContext,
    GroupVerdict,
    Measurement,
    NodeContext,
    Series,
    Verdict,
    register,
    worst_status,
)
from checks.core.evidence import FLAG, Rule
from checks.core.fanout import FanOutCheck
from checks.core.presentation import MatrixChart, Presentation
from checks.rdma.judge import (
    PairResult,
    Processes,
    RdmaBwThresholds,
    judge_pair,
    localise,
    node_verdicts,
    read_runner,
)
from checks.rdma.plan import RdmaBwParams, plan_pairs, runner_argv, runner_spec

PAIRS_LABEL = "perftest pairs"

PROFILE_THRESHOLDS: dict[str, dict[str, Any]] = {
    # 8x ConnectX-7 NDR 400 Gb/s, one per GPU (HGX H100 / H200). 360 Gb/s per pair: the GPUDirect
    # ib_write_bw floor of Azure's health checks for ND H200 v5 (Azure/azurehpc-health-checks
    # conf/nd96isr_h200_v5.conf `check_ib_bw_gdr 360`; ND H100 v5 uses 375,
    # conf/nd96isr_h100_v5.conf); a healthy NDR pair reaches 392 Gb/s
    # (tests/fixtures/perftest/ib_write_bw-cx7-ndr400-b2b-dac.txt). 200 Gb/s per GPU over the node's
    # rails: an integrator's GPU-cluster acceptance checklist.
    "H100-SXM-8": {"min_bw_gbps": 360.0, "min_bw_per_gpu_gbps": 200.0, "link_type": "IB"},
    "H200-SXM-8": {"min_bw_gbps": 360.0, "min_bw_per_gpu_gbps": 200.0, "link_type": "IB"},
    # 8x ConnectX-6 HDR 200 Gb/s, one per GPU (HGX A100). 185 Gb/s per pair: Azure's GPUDirect floor
    # for ND A100 v4 (conf/nd96asr_v4.conf `check_ib_bw_gdr 185.0`); a healthy HDR pair reaches
    # 196.8 Gb/s (tests/fixtures/perftest/ib_write_bw-a-cx6-hdr200-client.txt). Per GPU the same
    # 185: one HDR port per GPU cannot carry the 200 Gb/s per GPU (line rate ~197 Gb/s).
    "A100-SXM-8": {"min_bw_gbps": 185.0, "min_bw_per_gpu_gbps": 185.0, "link_type": "IB"},
}

EVIDENCE: dict[str, Rule] = {
    # 1 s: a million times a healthy RDMA round trip; anything above is a misread.
    "pair_lat_typical_us": Rule("a latency", low=0.0, high=1e6),
    "gpu_buffer": FLAG,
}


@register
class RdmaBandwidth(FanOutCheck):
    key: ClassVar[str] = "rdma_bw"
    fewer_nodes_advice: ClassVar[str] = "measure fewer nodes at once"
    name: ClassVar[str] = "RDMA bandwidth per rail"
    description: ClassVar[str] = (
        "perftest ib_write_bw/ib_write_lat from every HCA to the same HCA of the next node; names a slow port or pair."
    )
    # The simulated ib_write_lat answers at once: its window need not cover CUDA start-up (the
    # servers' start slack stays at its default, so a busy worker still has every server listening).
    # 20 s covers Python start-up: the demo's 64 latency clients, started at one moment beside a full
    # test run on 2 cores, did not all finish in 8 s.
    simulator_params: ClassVar[dict[str, Any]] = {"lat_timeout_s": 20, "bw_timeout_s": 30}
    Params: ClassVar[type] = RdmaBwParams
    Thresholds: ClassVar[type] = RdmaBwThresholds
    profile_thresholds: ClassVar[dict[str, dict[str, Any]]] = PROFILE_THRESHOLDS
    evidence: ClassVar[dict[str, Rule]] = EVIDENCE
    min_nodes: ClassVar[int] = 2
    # The runner's exit status is judged per node (a node whose runner failed is its ports' error).
    ok_exit_codes: ClassVar[tuple[int, ...]] = tuple(range(256))
    presentation: ClassVar[Presentation] = Presentation(
        chart="matrix",
        rank=12,
        matrices=(
            # One cell per pair: a node's HCA writing to the same HCA of the next node (hover: the server).
            MatrixChart(
                "RDMA write bandwidth per port, as client", ("pair_bw_gbps",), "client", "rail", unit="Gb/s",
                text_field=False, rows_title="client node", cols_title="HCA (rail)",
            ),
            MatrixChart(
                "RDMA write latency per port (typical), as client", ("pair_lat_typical_us",), "client", "rail",
                unit="us", text_field=False, rows_title="client node", cols_title="HCA (rail)",
            ),
            MatrixChart(
                "RDMA bandwidth per GPU over all rails, as client", ("node_bw_per_gpu_gbps",), "node", unit="Gb/s",
                text_field=False, rows_title="node", column_titles=("per GPU",),
            ),
        ),
    )  # fmt: skip

    def node_commands(self, params: Any, group: GroupContext, node: NodeContext) -> list[Command]:
        from checks.probe import rdma_pairs_source  # lazy: reading the script is I/O, not needed to judge

        p: RdmaBwParams = params
        if len(group.nodes) < 2:
            return []  # no partner, nothing to measure (min_nodes keeps such a run from starting)
        spec = runner_spec(p, group, node)
        timeout = self.start_delay_s(p, len(group.nodes)) + p.limit_s
        label = f"{PAIRS_LABEL} on {node.hostname}"
        return [Command(argv=runner_argv(spec), stdin=rdma_pairs_source(), timeout=timeout, label=label)]

    def declared_s(self, params: Any) -> float:
        # Every node waits for the common start (less the per-node part: a plan knows no node count);
        # the latency and bandwidth runs are the overhead.
        return float(params.start_slack_s)

    def judge_fan_out(
        self,
        params: Any,
        thresholds: Any,
        per_node: dict[str, list[CommandOutput]],
        facility: list[CommandOutput],
        group: GroupContext,
    ) -> tuple[list[Measurement], GroupVerdict, list[Series]]:
        p: RdmaBwParams = params
        t: RdmaBwThresholds = thresholds
        hosts = group.hostnames
        docs: dict[str, Processes | str] = {h: read_runner(per_node.get(h, [])) for h in hosts}
        results = [judge_pair(pair, docs, p, t) for pair in plan_pairs(p, hosts)]
        findings = localise(results, hosts)
        measurements = [m for r in results for m in r.measurements]
        measurements += _per_gpu(results, group, p, t, findings)
        nodes = node_verdicts(hosts, findings, len(p.rails))
        for host, doc in docs.items():
            if isinstance(doc, str):
                nodes[host] = Verdict(ERROR, f"{host}: {doc}")
        return measurements, _verdict(results, nodes, t), []


def _per_gpu(
    results: list[PairResult],
    group: GroupContext,
    p: RdmaBwParams,
    t: RdmaBwThresholds,
    findings: dict[str, list[tuple[str, str]]],
) -> list[Measurement]:
    """Each node's bandwidth as a sender over all its rails, per GPU; a node below the floor fails."""
    out: list[Measurement] = []
    for node in group.nodes:
        sent = [r.bw_gbps for r in results if r.pair.client == node.hostname]
        if not sent or any(bw is None for bw in sent):
            continue  # a rail not measured is already that node's error
        gpus = node.expected_gpus or len(p.rails)
        per_gpu = round(sum(bw or 0.0 for bw in sent) / gpus, 4)
        m = Measurement("node_bw_per_gpu_gbps", per_gpu, "Gb/s", labels={"node": node.hostname, "gpus": str(gpus)})
        if t.min_bw_per_gpu_gbps is not None:
            m.threshold, m.ok = f">= {t.min_bw_per_gpu_gbps:g}", per_gpu >= t.min_bw_per_gpu_gbps
            if not m.ok:
                findings_for = findings.setdefault(node.hostname, [])
                findings_for.append(
                    (FAIL, f"{per_gpu:g} Gb/s per GPU over {len(sent)} rails below {t.min_bw_per_gpu_gbps:g}")
                )
        out.append(m)
    return out


def _verdict(results: list[PairResult], nodes: dict[str, Verdict], t: RdmaBwThresholds) -> GroupVerdict:
    statuses = [v.status for v in nodes.values()] + [r.status for r in results]
    status = worst_status(statuses) if statuses else ERROR
    findings = [Finding(v.status, v.reason) for v in nodes.values() if v.status != PASS]
    if status == PASS:
        return _passed(results, nodes, t, findings)
    bad = [r for r in results if r.status != PASS]
    named = sorted(h for h, v in nodes.items() if v.status != PASS)
    errors = sum(1 for r in bad if r.status == ERROR)
    head = f"{len(bad)} of {len(results)} pairs out of spec or not measured ({errors} not measured)"
    if not bad:
        head = f"all {len(results)} pairs within spec"
    detail = "; ".join(nodes[h].reason for h in named[:3]) + (" ..." if len(named) > 3 else "")
    return GroupVerdict(status, f"{head}: {detail}" if detail else head, findings, node_verdicts=nodes)


def _passed(
    results: list[PairResult], nodes: dict[str, Verdict], t: RdmaBwThresholds, findings: list[Finding]
) -> GroupVerdict:
    """Every pair within spec: a pass, or `warn` when no bandwidth floor applied (not judged)."""
    measured = [r.bw_gbps for r in results if r.bw_gbps is not None]
    low = min(measured) if measured else 0.0
    reason = f"{len(results)} pairs on {len({r.pair.hca for r in results})} rails within spec; lowest {low:g} Gb/s"
    if t.min_bw_gbps is None:
        reason = f"not judged: no bandwidth floor for this hardware ({reason})"
        return GroupVerdict(WARN, reason, [*findings, Finding(WARN, reason)], node_verdicts=nodes)
    return GroupVerdict(PASS, reason, findings, node_verdicts=nodes)
