"""A result is recorded in one statement (portal/runs/recording.py): its measurements hold every
field as a model row would, whatever a parser left in the text, and nothing is written for a result
that is no longer running under the task's claim."""

from __future__ import annotations

import math

from django.db import connection
from django.test.utils import CaptureQueriesContext

from checks.core.base import Measurement as CheckMeasurement
from checks.core.base import Series as CheckSeries
from checks.core.base import Verdict
from portal.runs import services
from portal.runs.models import CheckResult, Measurement, RunMetric, Series


def test_recorded_measurements_hold_every_field_cut_and_made_storable(cluster, make_run) -> None:
    run = make_run(cluster)
    result, _ = services.results_claim(run_id=run.pk, node_id=cluster.nodes.get(hostname="n01").pk, claim="t")
    measurements = [
        CheckMeasurement(
            name="temp", value=61.5, unit="C", gpu=3, threshold="<= 85", ok=True, labels={"phase": "load"}
        ),
        CheckMeasurement(name="driver", text="550.54.15 é🔥"),  # no value, no GPU, no verdict; not ASCII
        CheckMeasurement(name="n" * 150, value=-0.0, text="t" * 600, unit="u" * 30, threshold="h" * 120, ok=False),
        CheckMeasurement(name="nul\x00name", text="a\x00b", labels={"sensor": "x\x00y", "deep": ["\x00", 1]}),
    ]

    assert services.record_from_check(
        result=result, claim="t", verdict=Verdict("pass", ""), measurements=measurements, outputs=[]
    )

    result = CheckResult.objects.get(pk=result.pk)
    stored = list(Measurement.objects.filter(result=result).order_by("id"))
    fields = [(m.name, m.value, m.text, m.unit, m.gpu, m.threshold, m.ok, m.labels) for m in stored]
    assert fields == [
        ("temp", 61.5, "", "C", 3, "<= 85", True, {"phase": "load"}),
        ("driver", None, "550.54.15 é🔥", "", None, "", None, {}),
        ("n" * 100, -0.0, "t" * 500, "u" * 20, None, "h" * 100, False, {}),
        ("nul\\x00name", None, "a\\x00b", "", None, "", None, {"sensor": "x\\x00y", "deep": ["\\x00", 1]}),
    ]
    assert {m.recorded_at for m in stored} == {result.finished_at}  # written with the result, at one time
    assert len({m.pk for m in stored}) == 4


def test_a_result_with_hundreds_of_measurements_series_and_metrics_is_one_statement(cluster, make_run) -> None:
    run = make_run(cluster)
    node = cluster.nodes.get(hostname="n02")
    result, following = services.results_claim(run_id=run.pk, node_id=node.pk, claim="t")
    many = [CheckMeasurement(name=f"m{i % 50}", value=float(i), gpu=i % 8, labels={"i": i}) for i in range(500)]
    many.append(CheckMeasurement(name="nan", value=math.nan, gpu=0))
    many += [CheckMeasurement(name="count", value=3), CheckMeasurement(name="huge", value=-(10**400))]  # ints
    curves = [CheckSeries(name="temp", unit="C", x=[0.0, 1.0, 2.0], y=[40.0, None, 42.0], gpu=g) for g in range(2)]

    with CaptureQueriesContext(connection) as queries:
        assert services.record_from_check(
            result=result,
            claim="t",
            verdict=Verdict("pass", ""),
            measurements=many,
            outputs=[],
            series=curves,
            starting=following.pk,
        )

    assert len(queries.captured_queries) == 1
    stored = list(Measurement.objects.filter(result=result).order_by("id"))
    assert [(m.name, m.value, m.gpu, m.labels) for m in stored[:500]] == [
        (f"m{i % 50}", float(i), i % 8, {"i": i}) for i in range(500)
    ]  # in the order recorded
    assert stored[500].name == "nan" and math.isnan(stored[500].value)
    assert [(m.name, m.value) for m in stored[501:]] == [("count", 3.0), ("huge", -math.inf)]
    assert [(s.name, s.gpu, s.y) for s in Series.objects.filter(result=result).order_by("gpu")] == [
        ("temp", 0, [40.0, None, 42.0]),
        ("temp", 1, [40.0, None, 42.0]),
    ]
    assert RunMetric.objects.filter(run=run, item_key=result.item_key).count() == 53
    assert (
        CheckResult.objects.get(pk=following.pk).command_started_at == CheckResult.objects.get(pk=result.pk).finished_at
    )


def test_nothing_is_written_for_a_result_no_longer_running_under_the_claim(cluster, make_run) -> None:
    run = make_run(cluster)
    result, following = services.results_claim(run_id=run.pk, node_id=cluster.nodes.get(hostname="n03").pk, claim="t")
    CheckResult.objects.filter(pk=result.pk).update(status="cancelled")

    assert not services.record_from_check(
        result=result,
        claim="t",
        verdict=Verdict("pass", ""),
        measurements=[CheckMeasurement(name="temp", value=1.0)],
        outputs=[],
        series=[CheckSeries(name="temp", unit="C", x=[0.0], y=[1.0])],
        starting=following.pk,
    )

    assert not Measurement.objects.filter(result=result).exists()
    assert not Series.objects.filter(result=result).exists()
    assert not RunMetric.objects.filter(run=run).exists()
    assert CheckResult.objects.get(pk=following.pk).command_started_at is None  # the mark went with the record
