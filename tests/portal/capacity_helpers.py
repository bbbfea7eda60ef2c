"""Heat soak results for the capacity page and certificate tests: the synthetic 12-node soak of
tests/checks/soak_builder.py judged by the real judge, and recorded through the run services as the
worker records it (measurements with the subjects' verdict rows, the chart series, attribution)."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from checks.soak.data import SoakThresholds
from checks.soak.judge import judge_soak, soak_charts
from portal.catalog.models import TestPlan
from portal.inventory.models import Cluster, Node
from portal.runs import services
from portal.runs.models import CheckResult, Run, Scope
from tests.checks.soak_builder import HOSTS, Soak, rack_of

# HGX H100 8-GPU: 10.2 kW (checks/soak/data.py PROFILE_THRESHOLDS).
THRESHOLDS = SoakThresholds(node_max_w=10_200.0)


def soak_cluster(name: str = "dc1") -> Cluster:
    """A cluster with the soak's twelve nodes gpu01..gpu12 in racks r1..r3."""
    cluster = Cluster.objects.create(name=name, profile="H100-SXM-8", transport="local")
    Node.objects.bulk_create(Node(cluster=cluster, hostname=h, rack=rack_of(h)) for h in HOSTS)
    return cluster


def rename_rack(facility: dict[str, Any], old: str, new: str) -> None:
    """Give rack `old` another name everywhere the facility model names it."""
    for rack in facility["racks"]:
        if rack["name"] == old:
            rack["name"] = new
    for pdu in facility["pdus"]:
        if pdu["rack"] == old:
            pdu["rack"] = new
    for row in (*facility["ups"], *facility["loops"]):
        row["racks"] = [new if r == old else r for r in row["racks"]]
    facility["nodes"] = {h: new if r == old else r for h, r in facility["nodes"].items()}


def record_soak(
    cluster: Cluster,
    soak: Soak | None = None,
    *,
    run: Run | None = None,
    rename: dict[str, str] | None = None,
    loop_name: str = "",
) -> CheckResult:
    """Judge the soak and record it as the group result of a run of the built-in power-cooling plan
    (a new run unless `run` is given); returns the finished result. `rename`: racks to rename,
    `loop_name`: another name for the cooling loop."""
    if run is None:
        plan = TestPlan.objects.get(slug="power-cooling")
        run = services.run_start(cluster=cluster, plan=plan, enqueue=False)
    facility, samples = (soak or Soak()).build()
    for old, new in (rename or {}).items():
        rename_rack(facility, old, new)
    if loop_name:
        samples["loops"] = {loop_name: samples["loops"][facility["loops"][0]["name"]]}
        facility["loops"][0]["name"] = loop_name
    judged = judge_soak(facility, samples, THRESHOLDS)
    charts = soak_charts(facility, samples, THRESHOLDS)
    assert not isinstance(charts, str), charts
    verdict = judged.group_verdict()
    result = CheckResult.objects.get(run=run, scope=Scope.GROUP)
    CheckResult.objects.filter(pk=result.pk).update(claimed_by="dispatched")
    claimed = services.group_result_claim(result_id=result.pk, claim="test-soak")
    assert claimed is not None
    recorded = services.result_record(
        result=claimed,
        claim="test-soak",
        verdict=verdict,
        measurements=judged.measurements,
        series=[charts.cluster, *charts.racks.values()],
        attribution={h: {"status": v.status, "reason": v.reason} for h, v in verdict.node_verdicts.items()},
        node_set=run.node_set,
    )
    assert recorded
    Run.objects.filter(pk=run.pk).update(
        status=verdict.status, started_at=run.started_at or timezone.now(), finished_at=timezone.now()
    )
    return CheckResult.objects.get(pk=result.pk)
