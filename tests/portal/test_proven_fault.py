"""A proven fault beside missing evidence, end to end: the real gpu_burn output of wilicc/gpu-burn
issue 12 (16 GPUs FAULTY or with a wrapped error counter) judged with no telemetry is recorded as
`fail`; the run closes `fail`, `kiln_run` exits 1 and the triage gives the GPU's hardware action,
not "could not tell"."""

from __future__ import annotations

from pathlib import Path

import pytest

from checks import get_check, run_check
from checks.core.base import NodeContext
from checks.core.presentation import REPLACE_FAULTY_GPU
from checks.core.profiles import resolve_thresholds
from checks.core.raw_outputs import RAW_JUDGES
from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem
from portal.execution.management.commands.kiln_run import exit_code
from portal.runs import services
from portal.runs.triage import run_triage
from tests.portal.helpers import set_result

pytestmark = pytest.mark.django_db

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu-burn"
ISSUE_12 = FIXTURES / "gpu_burn_16gpu_negative_error_counts_warning_issue12.txt"


@pytest.fixture
def burn_plan(db) -> TestPlan:
    plan = TestPlan.objects.create(slug="burn", name="Burn and ECC")
    for order, slug in enumerate(["burn-in", "ecc-health"]):
        TestPlanItem.objects.create(plan=plan, check_definition=CheckDefinition.objects.get(slug=slug), order=order)
    return plan


def test_faulty_gpus_without_telemetry_fail_the_run_with_the_hardware_action(cluster, make_run, burn_plan) -> None:
    nodes = list(cluster.nodes.order_by("hostname")[:2])
    run = make_run(cluster, nodes=nodes, plan=burn_plan)
    claimed = services.results_claim(run_id=run.pk, node_id=nodes[0].pk, claim="t")
    burn = next(r for r in claimed if r.item_key == "burn-in")
    raw = RAW_JUDGES["gpu_burn"]
    outputs = raw.build(ISSUE_12.read_text())
    node = NodeContext(hostname=nodes[0].hostname, expected_gpus=16)
    measurements, verdict = run_check(
        get_check(raw.check), None, resolve_thresholds(raw.check, "generic"), outputs, node
    )
    assert services.record_from_check(
        result=burn, claim="t", verdict=verdict, measurements=measurements, outputs=outputs
    )
    set_result(run, nodes[0].hostname, "ecc-health", "pass", "all within spec")
    set_result(run, nodes[1].hostname, "burn-in", "error", "unreachable: [Errno 113] No route to host")
    set_result(run, nodes[1].hostname, "ecc-health", "error", "unreachable: [Errno 113] No route to host")

    burn.refresh_from_db()
    assert burn.status == "fail"
    assert "GPU 1: compute errors" in burn.reason and "and could not tell: no telemetry samples" in burn.reason

    closed = services.run_finalize(run_id=run.pk)
    assert closed.status == "fail"
    assert closed.reason == "2 error, 1 fail, 1 pass"  # what could not be told is still counted
    assert exit_code(closed) == 1

    lines = run_triage(run_id=run.pk)
    assert [(line.status, line.action) for line in lines][0] == ("fail", REPLACE_FAULTY_GPU)
    assert sorted(g.index for _, g in lines[0].gpus) == list(range(16))
    assert lines[1].status == "error" and lines[1].node_set == nodes[1].hostname
