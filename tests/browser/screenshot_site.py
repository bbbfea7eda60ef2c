"""The data set of the screenshot tests (tests/browser/test_screenshots.py): one of every main page's
subject, made once per module through the services, cheaply.

The demo cluster (8 simulated nodes, demo03 with ECC errors on GPU 5, demo06 on the wrong driver):
- run B, the `triage` plan (inventory, software, ECC, NCCL) in an open campaign: its campaign page
  shows the two triage lines;
- run A, the `shots` plan (the quick sweep with load temperatures, plus burn-in, filesystem, topology
  and multi-node NCCL at simulator speed (simulator_params): one result for each chart family) in a second
  campaign, whose three failures are waived, signed by both sides and certified;
- run C, the `triage` plan, left running: demo01 done, demo02's first check on its node, the rest
  waiting or queued (the live-run test then runs demo03's checks while the page is open);
- run D, the demo's heat soak (a plan of one multi-node check) recorded after SOAK_WALL_S of wall
  time, its eight nodes' outputs each that long: the runs list shows its wall time, not their sum.
Runs are executed inline in this thread, as `kiln_run --inline` does (no broker, no worker): about
40 s with the certificate, on a busy two-core machine. The capacity page draws the synthetic 12-node
heat soak of tests/portal/capacity_helpers.py on cluster dc1 (a real soak takes a minute at least).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from io import StringIO
from typing import Any

from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.db import connection, transaction
from django.urls import reverse
from django.utils import timezone

# The logged-in user of the screenshots holds every role, so each page shows all it can (the run
# buttons, the waiver and signature forms): the widest version of each page.
USERNAME = "shots"
NOTE = "GPU 5 swap scheduled; the customer accepts the node meanwhile"
# The chart families of result pages (portal/charts/templates/charts/family/): each must be among the pages.
RESULT_FAMILIES = ("nccl", "burn_in", "dlc", "ecc", "filesystem", "matrix")
DLC_PARAMS = {"idle_s": 1, "load_s": 3, "sensor_source": "ipmitool"}
# The soak's wall time in the data set: long enough to tell from 0 s in the runs list, short enough to wait.
SOAK_WALL_S = 2.0


@dataclass
class Site:
    """What the tests open: page name -> path, and the issued certificate's PDF."""

    pages: dict[str, str] = field(default_factory=dict)
    pdf: bytes = b""
    certificate: str = ""
    live_run: int = 0
    soak_run: int = 0


def _user(username: str, full_name: str, *groups: str) -> User:
    user = User.objects.create_user(username=username, password=f"pw-{username}")
    user.first_name, user.last_name = full_name.split(" ", 1)
    user.save()
    user.groups.set(Group.objects.filter(name__in=groups))
    return user


def _plan(slug: str, name: str, items: list[tuple[str, dict[str, Any]]]) -> Any:
    from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem

    plan = TestPlan.objects.create(slug=slug, name=name, description=f"{name} (screenshot tests).")
    for order, (check, params) in enumerate(items):
        definition = CheckDefinition.objects.get(slug=check)
        TestPlanItem.objects.create(plan=plan, check_definition=definition, order=order, param_overrides=params)
    return plan


def _plans() -> tuple[Any, Any]:
    from checks.core.base import simulator_params
    from portal.catalog.models import TestPlan

    quick = [(i.check_definition.slug, i.param_overrides) for i in TestPlan.objects.get(slug="quick").items.all()]
    # Load temperatures too (the DLC chart's idle and load columns). Shorter than its simulator_params (2 s + 5 s,
    # sized to judge a hot GPU on its steady state): these pages need both phases drawn, not a verdict.
    quick = [(s, DLC_PARAMS if s == "dlc-temperature" else p) for s, p in quick]
    extra = ["burn-in", "fs-throughput", "topology", "nccl-allreduce-multi"]
    shots = _plan("shots", "Screenshots (every chart)", quick + [(s, simulator_params(s)) for s in extra])
    nccl = dict(quick)["nccl-allreduce"]
    sweep = [("gpu-inventory", {}), ("sw-consistency", {}), ("ecc-health", {}), ("nccl-allreduce", nccl)]
    triage = _plan("triage", "Triage sweep", sweep)
    return shots, triage


def _execute(run: Any) -> None:
    from portal.execution.groups import execute_run_inline

    nodes = run.results.values_list("node_id", flat=True).distinct()
    # One thread on SQLite: the live server shares its single in-memory connection.
    execute_run_inline(run_id=run.pk, node_ids=list(nodes), max_workers=1 if connection.vendor == "sqlite" else 8)
    run.refresh_from_db()


def _campaign_run(campaign: Any, user: User) -> Any:
    from portal.certificates import services

    with transaction.atomic():
        run = services.campaign_run_start(campaign=campaign, node_set="", user=user, enqueue=False)
    _execute(run)
    return run


def _certify(campaign: Any, vendor: User, customer: User) -> Any:
    """Waive every open cell (demo03's ECC, demo06's driver), sign on both sides, issue."""
    from portal.certificates import services
    from portal.certificates.selectors import campaign_state

    for cell in campaign_state(campaign=campaign).open_cells:
        services.waiver_grant(
            campaign=campaign, hostname=cell.hostname, item_key=cell.item_key, justification=NOTE, user=vendor
        )
    services.certificate_sign(campaign=campaign, user=vendor)
    services.certificate_sign(campaign=campaign, user=customer)
    certificate = services.certificate_issue(campaign_id=campaign.pk)
    assert certificate is not None, f"no certificate: {campaign.issue_error or 'see the audit'}"
    return certificate


def _live_run(cluster: Any, plan: Any, user: User) -> Any:
    """A run still running: demo01 finished, demo02's checks claimed by a worker, the rest queued."""
    from portal.execution.execution import execute_node
    from portal.runs import services
    from portal.runs.models import CheckResult

    run = services.run_start(cluster=cluster, plan=plan, requested_by=user, enqueue=False)
    node = dict(cluster.nodes.values_list("hostname", "id"))
    execute_node(run_id=run.pk, node_id=node["demo01"], claim="shots-demo01")
    first, *_ = services.results_claim(run_id=run.pk, node_id=node["demo02"], claim="shots-demo02")
    # What the lease keeper writes before a check's first command (portal/runs/leases.py): the first
    # check is on the node ("running"), the others wait their turn.
    CheckResult.objects.filter(pk=first.pk).update(command_started_at=timezone.now())
    run.refresh_from_db()
    assert run.status == "running", run.status
    return run


def _soak_run(cluster: Any, user: User) -> Any:
    """The demo's heat soak as a worker records it: claimed (the run starts), SOAK_WALL_S later every
    node's output, each SOAK_WALL_S long (side by side), then the run closes."""
    import time

    from checks.core.base import Command, CommandOutput, Verdict
    from portal.catalog.models import TestPlan
    from portal.runs import services
    from portal.runs.models import CheckResult, Scope

    run = services.run_start(
        cluster=cluster, plan=TestPlan.objects.get(slug="demo-power-cooling"), requested_by=user, enqueue=False
    )
    group = CheckResult.objects.get(run=run, scope=Scope.GROUP)
    CheckResult.objects.filter(pk=group.pk).update(claimed_by="dispatched")
    claimed = services.group_result_claim(result_id=group.pk, claim="shots-soak")
    assert claimed is not None
    time.sleep(SOAK_WALL_S)
    hosts = sorted(cluster.nodes.values_list("hostname", flat=True))
    outputs = [CommandOutput(Command(argv=("soak", h), timeout=60.0), "", "", 0, duration_s=SOAK_WALL_S) for h in hosts]
    attribution = {h: {"status": "pass", "reason": "within spec"} for h in hosts}
    verdict = Verdict(status="pass", reason="")
    services.record_from_check(
        result=claimed, claim="shots-soak", verdict=verdict, measurements=[], outputs=outputs, attribution=attribution
    )
    services.run_finalize(run_id=run.pk, dispatch=False)
    run.refresh_from_db()
    return run


def _result_pages(run: Any) -> dict[str, str]:
    """One result page per chart family of this run (a failing result first where there is one),
    and the failing inventory result the triage view links to."""
    from portal.charts.selectors import chart_kind
    from portal.runs.models import CheckResult

    pages: dict[str, str] = {}
    results = CheckResult.objects.filter(run=run).select_related("node")
    for result in sorted(results, key=lambda r: (r.status == "pass", r.node.hostname, r.position)):
        family = chart_kind(result.kind) or ("inventory" if result.kind == "gpu_inventory" else "")
        name = "result-" + family.replace("_", "-")
        if family and name not in pages:
            pages[name] = reverse("runs:result_detail", args=[result.pk])
    missing = [f for f in RESULT_FAMILIES if "result-" + f.replace("_", "-") not in pages]
    assert not missing, f"the data set has no result of these chart families: {missing}"
    return pages


def site_build() -> Site:
    """The whole data set; returns the pages to open. Needs the demo's data folder and site keys."""
    from portal.certificates import services as campaigns
    from portal.charts.selectors import run_chart_links
    from portal.health.services.schedules import schedule_create
    from portal.inventory.models import Cluster
    from portal.runs.triage import run_triage
    from tests.portal.capacity_helpers import record_soak, soak_cluster

    call_command("kiln_demo", stdout=StringIO())
    user = _user(USERNAME, "Sam Shots", "operator", "approver", "vendor")
    vendor = _user("vera", "Vera Vendor", "approver", "vendor")
    customer = _user("carl", "Carl Customer", "approver", "customer")
    demo = Cluster.objects.get(name="demo")
    shots, triage = _plans()

    open_campaign = campaigns.campaign_create(cluster=demo, plan=triage, name="Nightly triage", user=user)
    run_b = _campaign_run(open_campaign, user)
    assert len(run_triage(run_id=run_b.pk)) == 2, "demo03's ECC and demo06's driver, on the triage pages"
    handover = campaigns.campaign_create(cluster=demo, plan=shots, name="Demo handover", user=user)
    run_a = _campaign_run(handover, user)
    assert run_a.status == "fail", run_a.status  # demo03 and demo06
    certificate = _certify(handover, vendor, customer)
    run_c = _live_run(demo, triage, user)
    run_d = _soak_run(demo, user)
    schedule_create(name="Nightly triage sweep", cluster=demo, plan=triage, crontab="0 2 * * *", created_by=user)
    record_soak(soak_cluster())

    pages = {
        "clusters": reverse("inventory:cluster_list"),
        "cluster": reverse("inventory:cluster_detail", args=["demo"]),
        "cluster-runs": reverse("history:cluster_runs", args=["demo"]),
        "run-start": reverse("runs:run_start", args=["demo"]),
        "run-live": reverse("runs:run_detail", args=[run_c.pk]),
        "run-finished": reverse("runs:run_detail", args=[run_a.pk]),
        "run-triage": reverse("runs:run_detail", args=[run_b.pk]),
        **_result_pages(run_a),
        **{
            "chart-" + re.sub(r"[^a-z0-9]+", "-", link.label.lower()).strip("-"): link.url
            for link in run_chart_links(run=run_a)
        },
        "capacity": reverse("charts:cluster_capacity", args=["dc1"]),
        "node-history": reverse("history:node_detail", args=["demo", "demo03"]),
        "compare": reverse("history:run_compare") + f"?a={run_a.pk}&b={run_b.pk}",
        "compare-picker": reverse("history:run_compare") + "?cluster=demo",
        "cluster-add": reverse("inventory:cluster_create"),
        "cluster-edit": reverse("inventory:cluster_edit", args=["demo"]),
        "nodes-add": reverse("inventory:node_add", args=["demo"]),
        "node-edit": reverse("inventory:node_edit", args=["demo", "demo03"]),
        "result-search": reverse("history:result_search") + "?cluster=demo",
        "campaigns": reverse("certificates:campaign_list"),
        "campaign-triage": reverse("certificates:campaign_detail", args=[open_campaign.pk]),
        "campaign-certified": reverse("certificates:campaign_detail", args=[handover.pk]),
        "certificate-verify": reverse("certificates:certificate_verify"),
        "public-verify": reverse("certificates:public_verify"),
        "health": reverse("health:overview"),
        "health-cluster": reverse("health:cluster", args=["demo"]),
        "health-schedules": reverse("health:schedules"),
        "facility": reverse("facility:page", args=["demo"]),
    }
    pages["run-soak"] = reverse("runs:run_detail", args=[run_d.pk])
    return Site(
        pages=pages, pdf=bytes(certificate.pdf), certificate=certificate.number, live_run=run_c.pk, soak_run=run_d.pk
    )
