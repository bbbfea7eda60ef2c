"""topology: where each GPU's nearest NIC sits on the PCIe tree, and whether the node is wired like its peers.

Evidence: `nvidia-smi topo -m` (read only), parsed by checks/topology/matrix.py (parser kind
`nvidia_smi_topo`; its docstring gives the measurements and the link ranks X < NV# < PIX < PXB < PHB
< NODE < SYS). On a rail-optimised HGX/DGX node every GPU shares a PCIe switch with its own compute
NIC; a NIC in the wrong slot, a riser cabled to the other socket or a BIOS that re-roots a switch
leaves a GPU whose traffic to the fabric crosses the CPU: NCCL then runs that rail without GPUDirect
RDMA (slower, and the whole job with it) while every per-device check still passes.

Thresholds:
- `max_gpu_nic_link`: the farthest link allowed between a GPU and its nearest NIC (PIX, PXB, PHB,
  NODE or SYS; "" = not judged: the verdict is `warn` at most). A GPU whose nearest NIC is farther
  fails, naming both ("GPU3's nearest NIC mlx5_0 is NODE (across PCIe host bridges within one NUMA
  node); allowed PIX or PXB").
- `expect_nic_per_gpu`: NICs each GPU must reach at or within that link (true = 1, or a count; none
  / false / 0 = not required). A GPU short of them fails; a matrix with no NIC at all fails.

Without a NIC requirement a matrix with no NIC is `warn` (nothing to judge). An unreadable matrix
(cut, junk, an unknown link type) is `error` (checks/topology/matrix.py).

Cross-node agreement (`consensus`): each GPU's nearest NIC and link, each GPU's NUMA node, the GPU and
NIC counts are compared with the run's strict majority; the odd node out is flagged ("GPU3 nearest NIC
mlx5_0 NODE differs from 7 of 8 nodes (mlx5_3 PIX)"), thresholds or not.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from checks.core.base import (
    ERROR,
    FAIL,
    PASS,
    WARN,
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
from checks.core.evidence import COUNT, Rule
from checks.core.presentation import KeyMetric, MatrixChart, Presentation, PromMetric
from checks.gpu.inventory import inventory_consensus
from checks.topology.matrix import (
    LINK_RANKS,
    MAX_RANK,
    PCIE_LINKS,
    link_rank,
    link_words,
    parse_topology,
    topology_measurements,
)

TOPO_LABEL = "nvidia-smi topo"
RANK_LEGEND = "0 self, 1 NVLink, 2 PIX, 3 PXB, 4 PHB, 5 NODE, 6 SYS"
# The link types by rank, as the matrix chart's colour bar names them (NV# for every NVLink bond).
RANK_NAMES = tuple(("NV#" if t == "NV" else t) for t, _ in sorted(LINK_RANKS.items(), key=lambda tr: tr[1]))
LINK_RANK = Rule("a link distance rank", low=0, high=MAX_RANK, integer=True)
# Linux numbers NUMA nodes below MAX_NUMNODES = 1 << CONFIG_NODES_SHIFT, and NODES_SHIFT is at most 10
# on x86-64 and arm64 (arch/x86/Kconfig, arch/arm64/Kconfig: "range 1 10").
NUMA_NODE = Rule("a NUMA node", low=0, high=1023, integer=True)
CONSENSUS_NAMES = frozenset({"nic_count", "gpu_nearest_nic_link", "gpu_numa_affinity"})  # what topology_facts reads


def nics_needed(value: object) -> int:
    """`expect_nic_per_gpu` as a count: true -> 1, false / none / "" -> 0, an integer >= 0 as is."""
    if value is None or value is False:
        return 0
    if value is True:
        return 1
    if isinstance(value, str):
        text = value.strip().lower()
        words = {"": 0, "false": 0, "no": 0, "off": 0, "none": 0, "true": 1, "yes": 1, "on": 1}
        if text in words:
            return words[text]
        if text.isdigit():
            return int(text)
    elif isinstance(value, int) and value >= 0:
        return value
    elif isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    raise ParamsError(f"threshold 'expect_nic_per_gpu': expected true/false or a NIC count >= 0, got {value!r}")


@dataclass
class TopologyParams:
    # nvidia-smi topo -m reads the PCIe tree through NVML in about a second on an 8-GPU node; 30 s lets a
    # wedged driver be reported as a timeout rather than hang the run (conservative default; tune per site).
    timeout_s: int = 30


@dataclass
class TopologyThresholds:
    # The farthest link allowed between each GPU and its nearest NIC, in nvidia-smi's words (PIX, PXB,
    # PHB, NODE, SYS); "" = not judged. Profiles set PXB for HGX/DGX (profile_thresholds, with sources).
    max_gpu_nic_link: str = ""
    # NICs each GPU must reach at or within max_gpu_nic_link (at any link when that is unset): true = 1,
    # or a count; None / false / 0 = not required.
    expect_nic_per_gpu: bool | int | None = None

    def __post_init__(self) -> None:
        link = str(self.max_gpu_nic_link or "").strip().upper()
        if link and link not in PCIE_LINKS:
            raise ParamsError(f"threshold 'max_gpu_nic_link': one of {', '.join(PCIE_LINKS)} or empty, got {link!r}")
        self.max_gpu_nic_link = link
        nics_needed(self.expect_nic_per_gpu)


# How the certificate names these measurements (checks/core/presentation.py measurement_labels).
TOPOLOGY_LABELS = (("gpu_nearest_nic_link", "GPU-to-nearest-NIC link (0 self … 6 SYS)"),)


@register
class GpuNicTopology(Check):
    key: ClassVar[str] = "topology"
    name: ClassVar[str] = "GPU-NIC topology"
    description: ClassVar[str] = (
        "Each GPU's nearest NIC on the PCIe tree (nvidia-smi topo -m) within the allowed link; the odd "
        "node out is flagged."
    )
    Params: ClassVar[type] = TopologyParams
    Thresholds: ClassVar[type] = TopologyThresholds
    evidence: ClassVar[dict[str, Rule]] = {
        "gpu_nic_link": LINK_RANK,
        "gpu_nearest_nic_link": LINK_RANK,
        "nic_count": COUNT,
        "gpu_numa_affinity": NUMA_NODE,
    }
    profile_thresholds: ClassVar[dict[str, dict[str, Any]]] = {
        # Rail-optimised HGX/DGX: each GPU shares a PCIe switch with its own compute NIC. NVIDIA's
        # GPUDirect Storage guide asks to "ensure GPUs and NICs are under the same switch", with the DGX
        # A100 as the compatible example (docs.nvidia.com/ai-enterprise/deployment/bare-metal/latest/
        # gds-appendix-pci-validation.html); the HGX AI Factory reference architecture (H100, H200,
        # B200) connects the GPUs "using a rail-optimized network topology through their respective
        # SuperNICs" (docs.nvidia.com/reference-architectures/hgx-ai-factory-h100-h200-b200/
        # network-logical-architecture). PXB is also NCCL's default GPUDirect RDMA limit (netGdrLevel =
        # PATH_PXB in ncclTopoCheckGdr, src/graph/paths.cc): a farther NIC runs without GPUDirect RDMA.
        # DGX A100 prints PXB (two switch levels), HGX H100 PIX (tests/fixtures/nvidia-smi-topo).
        "H100-SXM-8": {"max_gpu_nic_link": "PXB", "expect_nic_per_gpu": True},
        "H200-SXM-8": {"max_gpu_nic_link": "PXB", "expect_nic_per_gpu": True},
        "A100-SXM-8": {"max_gpu_nic_link": "PXB", "expect_nic_per_gpu": True},
    }
    presentation: ClassVar[Presentation] = Presentation(
        measurement_labels=TOPOLOGY_LABELS,
        chart="matrix",
        rank=55,
        matrices=(
            # Every GPU x NIC link; a GPU's nearest NIC(s) beyond max_gpu_nic_link are marked.
            MatrixChart(
                "Link from each GPU to each NIC", ("gpu_nic_link",), "gpu", "nic", colour_by="rank",
                ranks=RANK_NAMES, marks="gpu_nearest_nic_link", rows_title="GPU", cols_title="NIC",
            ),
        ),
        key_metrics=(
            KeyMetric(
                "nearest_nic_link", f"Farthest GPU-to-nearest-NIC link ({RANK_LEGEND})", "gpu_nearest_nic_link",
                "rank", better="lower", per_gpu=True, gpu_agg="max", tolerance_pct=0.0,
            ),
        ),
        prometheus=(
            PromMetric(
                "gpu_nearest_nic_link", "kiln_gpu_nearest_nic_link_rank",
                f"Link from the GPU to its nearest NIC ({RANK_LEGEND}; nvidia-smi topo -m)", "nic", None,
            ),
        ),
    )  # fmt: skip
    consensus_names: ClassVar[frozenset[str] | None] = CONSENSUS_NAMES

    def commands(self, params: Any, node: NodeContext) -> list[Command]:
        argv = ("nvidia-smi", "topo", "-m")
        return [Command(argv=argv, timeout=float(params.timeout_s), label=TOPO_LABEL, read_only=True)]

    def parse(self, outputs: list[CommandOutput]) -> list[Measurement]:
        out = next((o for o in outputs if o.command.label == TOPO_LABEL), outputs[0])
        try:
            topo = parse_topology(out.stdout)
        except EvidenceError as exc:
            said = [line.strip() for line in out.stderr.splitlines() if line.strip()]
            raise EvidenceError(str(exc) + (f" (stderr: {said[-1][:200]})" if said else "")) from None
        return topology_measurements(topo)

    def describe_failure(self, output: CommandOutput) -> str:
        """nvidia-smi prints why it failed on stdout ("NVIDIA-SMI has failed because it couldn't
        communicate with the NVIDIA driver"): the last line of stderr, else of stdout."""
        for stream in (output.stderr, output.stdout):
            lines = [line.strip() for line in stream.splitlines() if line.strip()]
            if lines:
                return lines[-1][:300]
        return "no output"

    def evaluate(self, measurements: list[Measurement], thresholds: Any, node: NodeContext) -> Verdict:
        t: TopologyThresholds = thresholds
        gpus = sorted({m.gpu for m in measurements if m.name == "gpu_numa_affinity" and m.gpu is not None})
        count = next((m for m in measurements if m.name == "nic_count"), None)
        if count is None or count.value is None or not gpus:
            return Verdict(ERROR, "topology matrix unreadable: no GPU or NIC count recorded")
        need = nics_needed(t.expect_nic_per_gpu)
        if not count.value:
            return _no_nics(count, len(gpus), need, t)
        nearest = {m.gpu: m for m in measurements if m.name == "gpu_nearest_nic_link"}
        pairs: dict[int | None, list[Measurement]] = defaultdict(list)
        for m in measurements:
            if m.name == "gpu_nic_link":
                pairs[m.gpu].append(m)
        findings: list[Finding] = []
        for gpu in gpus:
            findings += _judge_gpu(gpu, nearest.get(gpu), pairs[gpu], need, t)
        summary = _summary(len(gpus), int(count.value), nearest.values(), t)
        if not t.max_gpu_nic_link:
            findings.append(Finding(WARN, f"{summary}; GPU-NIC links not judged (no max_gpu_nic_link set)"))
        if not findings:
            findings.append(Finding(PASS, summary))
        return Verdict.from_findings(findings, pass_reason=summary)

    @classmethod
    def consensus(cls, per_node: dict[str, list[Measurement]]) -> dict[str, str]:
        facts = {host: topology_facts(measurements) for host, measurements in per_node.items()}
        return inventory_consensus({host: f for host, f in facts.items() if f})


def _summary(gpus: int, nics: int, nearest: Iterable[Measurement], t: TopologyThresholds) -> str:
    types = sorted({m.text for m in nearest if m.text}, key=lambda x: (link_rank(x) or 0, x))
    summary = f"{gpus} GPUs, {nics} NIC{'s' if nics != 1 else ''}: each GPU's nearest NIC is {'/'.join(types)}"
    return summary + (f", within {t.max_gpu_nic_link}" if t.max_gpu_nic_link else "")


def _allowed(link: str) -> str:
    """'PIX or PXB': the link types at or within `link`."""
    allowed = list(PCIE_LINKS[: PCIE_LINKS.index(link) + 1])
    return allowed[0] if len(allowed) == 1 else f"{', '.join(allowed[:-1])} or {allowed[-1]}"


def _names(text: str) -> str:
    names = text.split(",")
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _judge_gpu(
    gpu: int, nearest: Measurement | None, pairs: list[Measurement], need: int, t: TopologyThresholds
) -> list[Finding]:
    """One GPU's nearest NIC against `max_gpu_nic_link`, and its NIC count within it against `need`."""
    if nearest is None or nearest.value is None or not pairs:
        return [Finding(ERROR, f"GPU{gpu}: no link to a NIC recorded (the matrix lists NICs)")]
    limit = LINK_RANKS[t.max_gpu_nic_link] if t.max_gpu_nic_link else MAX_RANK
    if t.max_gpu_nic_link:
        nearest.threshold, nearest.ok = f"<= {t.max_gpu_nic_link}", nearest.value <= limit
        if not nearest.ok:
            nics = nearest.labels.get("nic", "?")
            what = f"nearest NICs {_names(nics)} are" if "," in nics else f"nearest NIC {nics} is"
            words = link_words(nearest.text)
            return [
                Finding(FAIL, f"GPU{gpu}'s {what} {nearest.text} ({words}); allowed {_allowed(t.max_gpu_nic_link)}")
            ]
    within = [m for m in pairs if m.value is not None and m.value <= limit]
    if len(within) < need:
        where = f"at or within {t.max_gpu_nic_link}" if t.max_gpu_nic_link else "listed"
        return [Finding(FAIL, f"GPU{gpu} has {len(within)} NIC(s) {where}, expected {need}")]
    return []


def _no_nics(count: Measurement, gpus: int, need: int, t: TopologyThresholds) -> Verdict:
    """A matrix of GPUs only: a failure when each GPU must have a NIC, else nothing to judge (warn)."""
    if need:
        count.threshold, count.ok = ">= 1", False
        where = f" at or within {t.max_gpu_nic_link}" if t.max_gpu_nic_link else ""
        reason = f"no NIC in the topology matrix ({gpus} GPUs); expected {need} per GPU{where}"
        return Verdict.from_findings([Finding(FAIL, reason)])
    return Verdict.from_findings(
        [Finding(WARN, f"{gpus} GPUs and no NIC in the topology matrix: GPU-NIC placement not judged")]
    )


def topology_facts(measurements: list[Measurement]) -> dict[str, str]:
    """The per-node facts `GpuNicTopology.consensus` compares: the GPU and NIC counts, each GPU's nearest
    NIC(s) and link, each GPU's NUMA node. Unknown facts are left out (judged per node, not by the majority)."""
    facts: dict[str, str] = {}
    gpus = sum(1 for m in measurements if m.name == "gpu_numa_affinity")  # one per GPU row of the matrix
    if gpus:
        facts["GPU count"] = str(gpus)
    for m in measurements:
        if m.name == "nic_count" and m.value is not None:
            facts["NIC count"] = f"{m.value:g}"
        elif m.name == "gpu_nearest_nic_link" and m.gpu is not None and m.text:
            facts[f"GPU{m.gpu} nearest NIC"] = f"{m.labels.get('nic', '?')} {m.text}"
        elif m.name == "gpu_numa_affinity" and m.gpu is not None and m.value is not None:
            facts[f"GPU{m.gpu} NUMA node"] = f"{m.value:g}"
    return facts
