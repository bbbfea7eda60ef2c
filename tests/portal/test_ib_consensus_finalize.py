"""ib_ports without an expected port count is compared with the run's majority when the run ends
(IbPorts.consensus through runs.services._apply_consensus): the node with 1 of 8 ports is `fail`,
the others keep their "not judged" `warn`."""

from __future__ import annotations

from pathlib import Path

import pytest

from checks import get_check, run_check
from checks.core.base import Command, CommandOutput, NodeContext
from checks.core.profiles import resolve_thresholds
from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem
from portal.inventory.models import Cluster, Node
from portal.runs import services
from portal.runs.models import CheckResult
from tests.portal.helpers import add_measurement, set_result

pytestmark = pytest.mark.django_db

IBSTAT = Path(__file__).resolve().parents[1] / "fixtures" / "ibstat" / "ibstat_H100_node_8xNDR400_some_down.txt"


def judged(stdout: str, hostname: str):
    cmd = Command(argv=("ibstat",), timeout=30, label="ibstat")
    thresholds = resolve_thresholds("ib_ports", "generic")
    return run_check(
        get_check("ib_ports"), None, thresholds, [CommandOutput(cmd, stdout, "", 0)], NodeContext(hostname)
    )


def test_it_fails_the_node_below_the_run_majority_when_the_run_ends() -> None:
    cluster = Cluster.objects.create(name="generic", profile="generic", transport="local")
    Node.objects.bulk_create(Node(cluster=cluster, hostname=f"g{i:02d}") for i in range(1, 9))
    plan = TestPlan.objects.create(slug="ib-only", name="ib only")
    TestPlanItem.objects.create(plan=plan, check_definition=CheckDefinition.objects.get(slug="ib-ports"), order=0)
    run = services.run_start(cluster=cluster, plan=plan, enqueue=False)
    full = IBSTAT.read_text()
    one_port = full[: full.index("CA '", 1)]
    for i in range(1, 9):
        host = f"g{i:02d}"
        measurements, verdict = judged(one_port if host == "g05" else full, host)
        assert verdict.status == "warn" and "not judged" in verdict.reason
        result = set_result(run, host, "ib-ports", verdict.status, verdict.reason)
        for m in measurements:
            add_measurement(
                result, m.name, value=m.value, unit=m.unit, gpu=m.gpu, text=m.text, threshold=m.threshold,
                ok=m.ok, labels=m.labels,
            )  # fmt: skip

    finished = services.run_finalize(run_id=run.pk)

    odd = CheckResult.objects.get(run=run, node__hostname="g05")
    assert odd.status == "fail"
    assert odd.reason == "1 active InfiniBand ports, 7 of 8 nodes have 8"
    others = set(CheckResult.objects.filter(run=run).exclude(node__hostname="g05").values_list("status", flat=True))
    assert others == {"warn"}
    assert finished.status == "fail"
