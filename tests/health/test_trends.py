"""Nodes at risk: the documented monotonic trend rule, over real runs of a cluster."""

from __future__ import annotations

import pytest

from portal.health.selectors import nodes_at_risk
from portal.health.trends import RULE_BY_KEY, worsening
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
