"""Nodes at risk: the documented monotonic trend rule, over real runs of a cluster."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from portal.health.models import NodeHealth, NodeRisk
from portal.health.selectors import nodes_at_risk
from portal.health.services import risks
from portal.health.trends import RULE_BY_KEY, worsening
from portal.inventory.models import Cluster, Node
from portal.runs.models import Measurement, Run
from tests.health.helpers import finish
from tests.portal.helpers import add_measurement

ECC = RULE_BY_KEY[("ecc_health", "ecc_aggregate_corrected")]
TEMP = RULE_BY_KEY[("dlc_temperature", "temp_gpu_steady")]
BUSBW = RULE_BY_KEY[("nccl_allreduce", "busbw_peak")]


def test_it_flags_a_steady_climb_only() -> None:
    assert worsening([0, 2, 5, 9], ECC)
    assert worsening([0, 0, 1, 3], ECC)  # flat steps allowed, two rises
    assert not worsening([0, 0, 0, 4], ECC)  # one jump is an event, not a trend
    assert not worsening([0, 3, 2, 5], ECC)  # not monotonic
    assert not worsening([3, 5], ECC)  # too few sweeps
    assert worsening([40, 41.5, 43.2], TEMP) and not worsening([40, 40.5, 41], TEMP)  # +3 C minimum
    assert worsening([480, 470, 455], BUSBW) and not worsening([480, 479, 478], BUSBW)  # 3 % minimum
    assert not worsening([455, 470, 480], BUSBW)


@pytest.mark.django_db
def test_it_lists_passing_nodes_whose_ecc_climbs(cluster, make_run) -> None:
    for counts in ([1, 0], [3, 0], [6, 0], [9, 1]):
        run = make_run(cluster)
        for host, value in zip(["n01", "n02"], counts, strict=True):
            add_measurement(
                run.results.get(node__hostname=host, item_key="ecc-health"),
                "ecc_aggregate_corrected",
                value=value,
                gpu=4,
            )
        finish(run)
    risks = nodes_at_risk(cluster=cluster, keep=5)
    assert [(r.hostname, r.gpu, r.values) for r in risks] == [("n01", 4, [1.0, 3.0, 6.0, 9.0])]
    assert risks[0].what == "correctable ECC climbing on GPU 4: 1 → 3 → 6 → 9 errors"


@pytest.mark.django_db
def test_it_ignores_failed_results_and_looks_at_the_last_sweeps_only(cluster, make_run) -> None:
    for value in (1, 3, 6, 6, 6, 6):
        run = make_run(cluster)
        add_measurement(
            run.results.get(node__hostname="n01", item_key="ecc-health"), "ecc_aggregate_corrected", value=value, gpu=0
        )
        finish(run)
    assert nodes_at_risk(cluster=cluster, keep=4) == []  # 3, 6, 6, 6: one rise in the window
    assert len(nodes_at_risk(cluster=cluster, keep=6)) == 1


@pytest.mark.django_db
def test_the_page_reads_the_risks_computed_when_each_run_finished(
    cluster, make_run, django_capture_on_commit_callbacks, django_assert_max_num_queries
) -> None:
    for counts in ([1, 0], [3, 0], [6, 0], [9, 1]):
        run = make_run(cluster)
        for host, value in zip(["n01", "n02"], counts, strict=True):
            result = run.results.get(node__hostname=host, item_key="ecc-health")
            add_measurement(result, "ecc_aggregate_corrected", value=value, gpu=4)
        finish(run, capture=django_capture_on_commit_callbacks)  # health, then trends, on commit

    assert list(NodeRisk.objects.values_list("node__hostname", "gpu", "values")) == [("n01", 4, [1.0, 3.0, 6.0, 9.0])]
    assert not NodeHealth.objects.filter(node__cluster=cluster, risks_at__isnull=True).exists()
    Measurement.objects.filter(name="ecc_aggregate_corrected").delete()  # the page must not read these
    with django_assert_max_num_queries(2):  # the stored risks, and no node left to compute
        risks = nodes_at_risk(cluster=cluster)
    assert [(r.hostname, r.gpu, r.values) for r in risks] == [("n01", 4, [1.0, 3.0, 6.0, 9.0])]

    NodeHealth.objects.filter(node__hostname="n01").update(state="failed")
    assert nodes_at_risk(cluster=cluster) == [], "a failed node is news already: no trend shown"


def climbing_ecc(cluster: Cluster, make_run: Callable[..., Run], hosts: list[str]) -> Run:
    """Three runs in which the hosts' correctable ECC climbs 1 -> 3 -> 6; the last one."""
    for value in (1, 3, 6):
        run = make_run(cluster)
        for host in hosts:
            result = run.results.get(node__hostname=host, item_key="ecc-health")
            add_measurement(result, "ecc_aggregate_corrected", value=value, gpu=0)
        finish(run)
    return run


@pytest.mark.django_db
def test_a_refresh_reads_and_stores_in_as_many_queries_whatever_the_nodes(cluster, make_run) -> None:
    large = Cluster.objects.create(name="c2", profile="H100-SXM-8", transport="local")
    Node.objects.bulk_create(Node(cluster=large, hostname=f"m{i:02d}", rack="R1") for i in range(1, 25))
    counted = []
    for where, hosts in ((cluster, ["n01", "n02"]), (large, [f"m{i:02d}" for i in range(1, 25)])):
        run = climbing_ecc(where, make_run, hosts)
        with CaptureQueriesContext(connection) as queries:
            assert risks.risks_refresh(run_id=run.pk) == len(hosts)
        counted.append(len(queries))
    assert counted[0] == counted[1]


@pytest.mark.django_db
def test_a_refresh_replaces_a_nodes_risks(cluster, make_run) -> None:
    runs = [climbing_ecc(cluster, make_run, ["n01", "n02", "n03"])]
    assert risks.risks_refresh(run_id=runs[-1].pk) == 3
    assert NodeRisk.objects.count() == 3

    run = make_run(cluster)  # the climb stops on n01 only: 6 -> 2
    for host, value in (("n01", 2), ("n02", 9), ("n03", 9)):
        add_measurement(
            run.results.get(node__hostname=host, item_key="ecc-health"), "ecc_aggregate_corrected", value=value, gpu=0
        )
    finish(run)
    risks.risks_refresh(run_id=run.pk)
    assert sorted(NodeRisk.objects.values_list("node__hostname", flat=True)) == ["n02", "n03"]
