"""The run's metric list (RunMetric): written with each result's measurements, read by the fleet
charts' picker instead of a DISTINCT over every measurement of the run."""

from __future__ import annotations

from django.db import connection
from django.test.utils import CaptureQueriesContext

from checks.core.base import Measurement as CheckMeasurement
from checks.core.base import Verdict
from portal.charts import selectors as charts
from portal.runs import services
from portal.runs.models import RunMetric
from tests.portal.helpers import add_measurement, set_result


def record(result, measurements: list[CheckMeasurement]) -> None:
    assert services.record_from_check(
        result=result, claim="t", verdict=Verdict("pass", ""), measurements=measurements, outputs=[]
    )


def test_recording_lists_each_numeric_metric_once_and_the_picker_reads_that_list(cluster, make_run) -> None:
    run = make_run(cluster)
    for node in cluster.nodes.all()[:2]:
        first, ecc = services.results_claim(run_id=run.pk, node_id=node.pk, claim="t")
        record(
            first,
            [
                CheckMeasurement(name="temp", value=61.0, unit="C", gpu=0, labels={"phase": "load"}),
                CheckMeasurement(name="temp", value=62.0, unit="C", gpu=1, labels={"phase": "load"}),
                CheckMeasurement(name="temp", value=40.0, unit="C", gpu=0, labels={"phase": "idle"}),
                CheckMeasurement(name="driver", text="550.54.15"),  # text: not a metric to chart
                CheckMeasurement(name="odd", value=1.0, labels={"phase": 3}),  # a non-text phase reads as none
            ],
        )

        record(ecc, [CheckMeasurement(name="ecc_volatile_uncorrected", value=0.0, unit="errors", gpu=0)])

    listed = sorted(RunMetric.objects.filter(run=run).values_list("item_key", "name", "phase", "unit"))
    key = first.item_key
    assert listed == [
        ("ecc-health", "ecc_volatile_uncorrected", "", "errors"),
        (key, "odd", "", ""),
        (key, "temp", "idle", "C"),
        (key, "temp", "load", "C"),
    ]
    with CaptureQueriesContext(connection) as queries:
        choices = charts.run_metric_choices(run=run)
    # Only what the ECC check declares judged is offered; the inventory declares none of these.
    assert [(c.item_key, c.name, c.phase, c.unit) for c in choices] == [
        ("ecc-health", "ecc_volatile_uncorrected", "", "errors")
    ]
    assert not any('"runs_measurement"' in q["sql"] for q in queries.captured_queries)


def test_a_run_recorded_before_the_list_existed_is_read_from_its_measurements(cluster, make_run) -> None:
    run = make_run(cluster)
    result = set_result(run, "n01", "ecc-health", "pass")
    add_measurement(result, "ecc_volatile_uncorrected", value=0.0, unit="errors", gpu=0)
    add_measurement(result, "ecc_mode", text="Enabled")
    add_measurement(set_result(run, "n01", "gpu-inventory", "pass"), "gpu_count", value=8.0, unit="GPUs")
    assert not RunMetric.objects.filter(run=run).exists()

    assert [(c.item_key, c.name, c.unit) for c in charts.run_metric_choices(run=run)] == [
        ("ecc-health", "ecc_volatile_uncorrected", "errors")
    ]
