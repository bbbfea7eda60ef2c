"""Run and result charts on seeded results: the fleet pickers offer only the metrics
the checks declare judged, grouped by check; the NCCL curve is drawn against the floor recorded on
its own result, over the sizes that floor judged."""

from __future__ import annotations

import pytest
from django.urls import reverse

from portal.runs.models import Measurement, RunMetric
from tests.portal.helpers import add_measurement
from tests.portal.test_charts_pages import _clear_cache, chart_plan, result_of, run, viewer  # noqa: F401

pytestmark = pytest.mark.django_db

# Recorded by the checks but never judged across the fleet: evidence bookkeeping.
BOOKKEEPING = [
    ("nccl_allreduce", "ranks", 8.0),
    ("nccl_allreduce", "size_max", 8.0 * 2**30),
    ("burn_in", "gpu_present", 1.0),
]


def _bookkeeping(run) -> None:  # noqa: F811
    for kind, name, value in BOOKKEEPING:
        add_measurement(result_of(run, kind), name, value=value)


def test_the_distribution_picker_offers_judged_metrics_grouped_by_check(viewer, run) -> None:  # noqa: F811
    _bookkeeping(run)

    response = viewer.get(reverse("charts:run_distribution", args=[run.pk]))

    offered = {(c.item_key, c.name) for c in response.context["choices"]}
    assert ("nccl-allreduce", "busbw_peak") in offered and ("burn-in", "gflops") in offered
    assert ("fs-aggregate", "write_bw_sum") in offered
    assert not offered & {("nccl-allreduce", "ranks"), ("nccl-allreduce", "size_max"), ("burn-in", "gpu_present")}
    html = response.content.decode()
    assert html.count("<optgroup") == len({c.item_key for c in response.context["choices"]}) >= 3
    assert '<optgroup label="NCCL all-reduce (node) · nccl-allreduce">' in html
    assert "gpu_present" not in html and "ranks" not in html


def test_the_picker_reads_the_runs_metric_list_through_the_same_filter(viewer, run) -> None:  # noqa: F811
    RunMetric.objects.bulk_create(
        [
            RunMetric(run=run, item_key="nccl-allreduce", name="busbw_peak", unit="GB/s"),
            RunMetric(run=run, item_key="nccl-allreduce", name="ranks"),
            RunMetric(run=run, item_key="ecc-health", name="ecc_volatile_uncorrected", unit="errors"),
        ]
    )

    response = viewer.get(reverse("charts:run_rack", args=[run.pk]))

    html = response.content.decode()
    assert 'value="nccl-allreduce:busbw_peak"' in html and 'value="ecc-health:ecc_volatile_uncorrected"' in html
    assert "nccl-allreduce:ranks" not in html
    assert html.count("<optgroup") == 2


def test_an_undeclared_metric_asked_by_name_is_not_drawn(viewer, run) -> None:  # noqa: F811
    _bookkeeping(run)

    response = viewer.get(reverse("charts:run_distribution", args=[run.pk]) + "?check=burn-in&metric=gpu_present")

    assert response.context["figure"] is None


def test_the_nccl_curve_is_drawn_against_its_results_recorded_floor_from_the_judged_size(viewer, run) -> None:  # noqa: F811
    result = result_of(run, "nccl_allreduce")
    Measurement.objects.filter(result=result, name="busbw_peak").update(
        threshold=">= 431", labels={"peak_min_bytes": str(2**29), "size": str(2**30)}
    )

    figure = viewer.get(reverse("charts:result_figure", args=[result.pk])).json()

    (floor,) = [s for s in figure["layout"]["shapes"] if s["type"] == "line"]
    assert floor["y0"] == 431.0  # the result's own floor, not the plan's 460
    assert floor["x0"] == 2**29  # judged from 512 MiB up
    assert floor["x1"] == 2**30  # to the largest size measured


def test_every_node_of_the_run_keeps_its_own_floor(viewer, run) -> None:  # noqa: F811
    Measurement.objects.filter(result=result_of(run, "nccl_allreduce", "n02"), name="busbw_peak").update(
        threshold=">= 300"
    )
    Measurement.objects.filter(result=result_of(run, "nccl_allreduce", "n04"), name="busbw_peak").update(threshold="")

    figure = viewer.get(reverse("charts:run_nccl", args=[run.pk]) + "?check=nccl-allreduce").context["figure"]

    assert sorted(s["y0"] for s in figure["layout"]["shapes"]) == [300.0, 460.0]
