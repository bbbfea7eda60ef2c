"""NCCL all-to-all across nodes: nccl-tests `alltoall_perf` over the run's nodes from a launcher.

Expert-parallel (MoE) training moves its tokens with all-to-all, and all-to-all is the collective
that loads a fat tree's bisection: every GPU sends to every other GPU, so (N-1)/N of each node's
traffic crosses the network, over every path between the nodes at once. An all-reduce, whose rings
and trees follow the rails, can pass on a fabric whose bisection is short; this check cannot.

Evidence, error rules, localisation and commands are all-reduce's (checks/nccl/allreduce.py,
`NcclGroupCheck`); what differs:

- the program is `alltoall_perf` and any other collective's output is `error`;
- the floor depends on the number of nodes. nccl-tests reports busbw = algbw x (n-1)/n for
  all-to-all (doc/PERFORMANCE.md); of each GPU's data 1/N stays on its node, so with N nodes busbw
  is N/(N-1) x the network bandwidth each GPU gets (nccl-tests issue #130): twice that on 2 nodes,
  close to it on many. The threshold `min_gpu_net_gbps` is that per-GPU network floor, and a run
  over N nodes is judged against `min_gpu_net_gbps` x N/(N-1) (the reason shows the arithmetic).
  One floor then holds for the whole group, its halves and the pairs localisation runs: a node
  that is slow in a large group is slow, by the same measure, in a pair.
"""

from __future__ import annotations

from typing import Any, ClassVar

from checks.core.base import GroupContext, register
from checks.core.presentation import KeyMetric, Presentation
from checks.nccl.allreduce import BUSBW_FLOOR, NcclGroupCheck
from checks.nccl.params import NcclAlltoallParams, NcclAlltoallThresholds, NcclThresholds


def floor_scale(nodes: int) -> float:
    """N/(N-1): busbw over the network bandwidth per GPU of an all-to-all over N nodes (1 for one
    node, where no traffic crosses the network and the network floor does not apply)."""
    return nodes / (nodes - 1) if nodes >= 2 else 1.0


@register
class NcclAlltoallMulti(NcclGroupCheck):
    key: ClassVar[str] = "nccl_alltoall_multi"
    name: ClassVar[str] = "NCCL all-to-all (across nodes)"
    description: ClassVar[str] = (
        "alltoall_perf across the run's nodes (expert-parallel traffic, the fabric's bisection) against a"
        " per-GPU network floor; a slow run is bisected to the node at fault."
    )
    collective: ClassVar[str] = "alltoall"
    floor_threshold: ClassVar[str] = "min_gpu_net_gbps"
    Params: ClassVar[type] = NcclAlltoallParams
    Thresholds: ClassVar[type] = NcclAlltoallThresholds
    presentation: ClassVar[Presentation] = Presentation(
        chart="nccl",
        rank=12,
        curves="busbw",
        series_threshold=BUSBW_FLOOR,
        key_metrics=(
            KeyMetric(
                "alltoall_busbw", "NCCL all-to-all bus bandwidth (peak)", "busbw_peak", "GB/s",
                group_value_on_node=True,
            ),
        ),
    )  # fmt: skip
    profile_thresholds: ClassVar[dict[str, dict[str, Any]]] = {
        # Conservative default; tune per site. All-to-all cannot aggregate NICs: each GPU gets one
        # NIC's bandwidth (NCCL maintainer, nccl-tests issue #267: 6x H100 nodes, 8x 400G CX-7),
        # and "CX-7 NICs at NDR rate (400Gbps) should achieve up to 48-49GB/s per NIC" (same
        # issue; #290: "46-48GB/s per NIC"). 36 GB/s is 75% of 48: a node with one port trained at
        # 200G (~24) or a fabric with half its bisection fails; a 2-node run needs 72.
        "H100-SXM-8": {"min_gpu_net_gbps": 36.0},
        # Conservative default; tune per site: H200 HGX uses the same 8x 400G NDR / ConnectX-7 rails.
        "H200-SXM-8": {"min_gpu_net_gbps": 36.0},
        # Conservative default; tune per site: 8x 200G HDR per DGX A100, ~24 GB/s per NIC (NCCL
        # maintainer in nccl issue #812, quoted in #1576: "On an Nvidia DGX-A100 system we have
        # 8x200Gbit/s IB cards and we measure 192GB/s AllReduce BusBW", 24 per NIC); 18 is 75% of it.
        "A100-SXM-8": {"min_gpu_net_gbps": 18.0},
    }

    def judged_thresholds(self, thresholds: Any, group: GroupContext) -> tuple[NcclThresholds, str]:
        """The busbw floor of a run over this group: `min_gpu_net_gbps` x N/(N-1), to 0.1 GB/s."""
        t: NcclAlltoallThresholds = thresholds
        nodes = len(group.nodes)
        if t.min_gpu_net_gbps is None:
            return NcclThresholds(min_busbw_gbps=None, max_wrong=t.max_wrong), ""
        floor = round(t.min_gpu_net_gbps * floor_scale(nodes), 1)
        note = f"{t.min_gpu_net_gbps:g} GB/s per GPU x {nodes}/{nodes - 1} for {nodes} nodes" if nodes >= 2 else ""
        return NcclThresholds(min_busbw_gbps=floor, max_wrong=t.max_wrong), note
