"""The fleet distribution and the rack heatmap take higher-is-better and the per-GPU folding from the
check kind's declaration, never from the metric's name: "power" in power_limit_w once read as
"higher is worse", so a node with one GPU capped at 400 W showed as 700 W (the max over its GPUs)
and the heatmap coloured the capped node as the best."""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import timezone

from checks import presented
from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem
from portal.inventory.models import Cluster
from portal.runs import services
from portal.runs.models import CheckResult, Run
from tests.portal.helpers import add_measurement

pytestmark = pytest.mark.django_db

CAPPED = "n03"


def plan_of(*slugs: str) -> TestPlan:
    plan = TestPlan.objects.create(slug="fleet-direction", name="Fleet direction")
    for order, slug in enumerate(slugs):
        TestPlanItem.objects.create(plan=plan, check_definition=CheckDefinition.objects.get(slug=slug), order=order)
    return plan


@pytest.fixture
def viewer(client, make_user):
    client.force_login(make_user("vera", "viewer"))
    return client


@pytest.fixture
def run(cluster: Cluster) -> Run:
    """Every node's 8 GPUs at 700 W, but one GPU of n03 capped at 400 W; every GPU's nearest NIC one
    PCIe switch away (rank 1), but n02's GPU 5 across the CPU interconnect (rank 3)."""
    run = services.run_start(cluster=cluster, plan=plan_of("gpu-power-limit", "topology"), enqueue=False)
    for result in CheckResult.objects.filter(run=run).select_related("node"):
        host = result.node.hostname
        for gpu in range(8):
            if result.kind == "gpu_power_limit":
                watts = 400.0 if (host, gpu) == (CAPPED, 2) else 700.0
                add_measurement(result, "power_limit_w", value=watts, unit="W", gpu=gpu, threshold=">= 700")
            else:
                rank = 3.0 if (host, gpu) == ("n02", 5) else 1.0
                add_measurement(result, "gpu_nearest_nic_link", value=rank, gpu=gpu, labels={"nic": "mlx5_0"})
        result.status, result.finished_at = "pass", timezone.now()
        result.save()
    return run


def cells(figure: dict) -> dict[str, float]:
    heat = figure["data"][0]
    return {
        heat["text"][i][j].partition("<br>")[0]: heat["z"][i][j]
        for i in range(len(heat["y"]))
        for j in range(len(heat["x"]))
        if heat["text"][i][j]
    }


def low_end(heat: dict) -> str:
    return str(heat["colorscale"][0][1])


def high_end(heat: dict) -> str:
    return str(heat["colorscale"][-1][1])


def red(colour: str) -> bool:
    """An "rgb(r,g,b)" colour that is more red than green."""
    r, g, _ = (int(part) for part in colour.removeprefix("rgb(").removesuffix(")").split(","))
    return r > g


def test_a_capped_gpu_sets_its_nodes_power_limit(viewer, run) -> None:
    url = reverse("charts:run_distribution", args=[run.pk]) + "?check=gpu-power-limit&metric=power_limit_w"

    dist = viewer.get(url).context["dist"]

    values = {p.node: p.value for p in dist.points}
    assert values == {"n01": 700.0, "n02": 700.0, CAPPED: 400.0, "n04": 700.0}
    assert dist.aggregate == "min" and dist.better == "higher"
    assert next(p.gpu for p in dist.points if p.node == CAPPED) == 2  # the hover names the capped GPU


def test_the_rack_heatmap_colours_the_capped_node_as_the_bad_one(viewer, run) -> None:
    response = viewer.get(reverse("charts:run_rack", args=[run.pk]) + "?metric=gpu-power-limit:power_limit_w")

    heat = response.context["figure"]["data"][0]
    z = cells(response.context["figure"])
    assert z[CAPPED] == 400.0 == heat["zmin"]
    assert red(low_end(heat))  # reversed, 400 W would be the green one


def test_the_nearest_nic_link_reads_lower_is_better(viewer, run) -> None:
    dist = viewer.get(
        reverse("charts:run_distribution", args=[run.pk]) + "?check=topology&metric=gpu_nearest_nic_link"
    ).context["dist"]
    assert dist.better == "lower" and dist.aggregate == "max"
    assert {p.node: p.value for p in dist.points}["n02"] == 3.0  # the farthest GPU sets the node's value

    heat = viewer.get(reverse("charts:run_rack", args=[run.pk]) + "?metric=topology:gpu_nearest_nic_link").context[
        "figure"
    ]["data"][0]
    assert cells({"data": [heat]})["n02"] == 3.0 == heat["zmax"]
    assert red(high_end(heat)) and not red(low_end(heat))  # the farthest link is red


def test_every_fleet_metric_declares_its_direction() -> None:
    """What the pickers offer (Presentation.fleet_metrics) each has a direction and a folding, and
    the kind's declarations do not disagree about it."""
    missing, disagree = [], []
    for kind, shown in presented():
        for name in sorted(shown.fleet_metrics()):
            declared = shown.direction(name)
            if declared is None:
                missing.append(f"{kind}: {name}")
                continue
            said = {o.low_is_bad for o in shown.outliers if name in o.names}
            said |= {t.direction < 0 for t in shown.trends if t.name == name}
            if said - {declared.better == "higher"}:
                disagree.append(f"{kind}: {name}")
    assert missing == [], "declare a KeyMetric or FleetMetric for: " + ", ".join(missing)
    assert disagree == [], "directions disagree for: " + ", ".join(disagree)
