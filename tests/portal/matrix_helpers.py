"""Results of the matrix chart family's kinds for the portal and browser tests: topology, host_bw and
rdma_bw judged by their real checks from real tool outputs (tests/fixtures), recorded through the run
services as the worker records them."""

from __future__ import annotations

from checks.core.base import Measurement, Verdict
from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem
from portal.inventory.models import Cluster, Node
from portal.runs import services
from portal.runs.models import CheckResult, Run, Scope
from tests.checks import test_host_bw as host_bw
from tests.checks import test_rdma_bw as rdma
from tests.checks import test_topology as topology

HOSTS = ["n01", "n02", "n03", "n04"]  # the `cluster` fixture's nodes
HOSTILE = "<img/src=x/onerror=alert(1)>"
H100_TOPO = topology.H100.read_text()
# GPU3's own NIC (NIC3, mlx5_3) moved to a slot across the host bridges: NODE both ways, so its
# nearest NICs are mlx5_0..mlx5_3, all NODE, beyond the H100 profile's PXB.
GPU3_ROW = "GPU3    NV18    NV18    NV18     X      NV18    NV18    NV18    NV18    NODE    NODE    NODE    PIX"
NIC3_ROW = "NIC3    NODE    NODE    NODE    PIX "


def far_nic(text: str = H100_TOPO) -> str:
    text = text.replace(GPU3_ROW, GPU3_ROW[:-3] + "NODE", 1)
    return text.replace(NIC3_ROW, "NIC3    NODE    NODE    NODE    NODE", 1)


def matrix_run(cluster: Cluster) -> Run:
    """A run of topology, host-bw, rdma-bw and gpu-inventory (no chart) on every node of `cluster`."""
    plan = TestPlan.objects.create(slug="matrices", name="Matrices")
    for order, slug in enumerate(["topology", "host-bw", "rdma-bw", "gpu-inventory"]):
        TestPlanItem.objects.create(plan=plan, check_definition=CheckDefinition.objects.get(slug=slug), order=order)
    return services.run_start(cluster=cluster, plan=plan, enqueue=False)


def record_node(run: Run, host: str, item_key: str, verdict: Verdict, measurements: list[Measurement]) -> CheckResult:
    """Claim the node's results as a worker task does and record one of them."""
    node = Node.objects.get(cluster=run.cluster, hostname=host)
    claimed = {r.item_key: r for r in services.results_claim(run_id=run.pk, node_id=node.pk, claim=f"t-{host}")}
    result = claimed[item_key]
    assert services.result_record(result=result, claim=f"t-{host}", verdict=verdict, measurements=measurements)
    return CheckResult.objects.get(pk=result.pk)


def record_topology(run: Run, stdout: str, host: str = "n01") -> CheckResult:
    measurements, verdict = topology.judge(stdout)
    return record_node(run, host, "topology", verdict, measurements)


def record_rdma(run: Run, rates: dict[tuple[str, str, str], float]) -> CheckResult:
    params = rdma.RdmaBwParams()
    measurements, verdict, _ = rdma.judge(rdma.outputs(params, HOSTS, rates), params, hosts=HOSTS)
    result = CheckResult.objects.get(run=run, scope=Scope.GROUP)
    CheckResult.objects.filter(pk=result.pk).update(claimed_by="dispatched")
    claimed = services.group_result_claim(result_id=result.pk, claim="t-rdma")
    assert claimed is not None
    assert services.result_record(
        result=claimed, claim="t-rdma", verdict=verdict, measurements=measurements, node_set=run.node_set
    )
    return CheckResult.objects.get(pk=result.pk)


# GPU2's host-to-device copy 10% under a floor of 12.30 GB/s (11.07 in the real T4 capture's row, its SUM
# moved with it); the other GPUs read 12.33-12.35, just over it.
H2D_FLOOR = 12.30
SLOW_H2D = 11.07


def record_host_bw_one_slow(run: Run, host: str = "n02") -> CheckResult:
    """A host-bw result judged from the real 4x T4 nvbandwidth capture, GPU 2's host-to-device copy
    10% under its floor and every other cell in spec (peer floor 1 GB/s)."""
    stdout = host_bw.text(host_bw.T4).replace(host_bw.T4_H2D_ROW, " 0     12.35     12.34     11.07     12.33", 1)
    stdout = stdout.replace(host_bw.T4_H2D_SUM, "SUM host_to_device_memcpy_ce 48.09", 1)
    measurements, verdict = host_bw.judge(
        stdout, gpus=4, profile=None, min_h2d_gbps=H2D_FLOOR, min_d2h_gbps=10.0, min_d2d_gbps=1.0
    )
    return record_node(run, host, "host-bw", verdict, measurements)
