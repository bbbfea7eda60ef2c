"""A result's measurements are written in one COPY (services.measurements_write): every field as a
model row would hold it, whatever a parser left in the text."""

from __future__ import annotations

from django.db import connection
from django.test.utils import CaptureQueriesContext

from checks.core.base import Measurement as CheckMeasurement
from checks.core.base import Verdict
from portal.runs import services
from portal.runs.models import CheckResult, Measurement


def test_recorded_measurements_hold_every_field_cut_and_made_storable(cluster, make_run) -> None:
    run = make_run(cluster)
    result, _ = services.results_claim(run_id=run.pk, node_id=cluster.nodes.get(hostname="n01").pk, claim="t")
    measurements = [
        CheckMeasurement(
            name="temp", value=61.5, unit="C", gpu=3, threshold="<= 85", ok=True, labels={"phase": "load"}
        ),
        CheckMeasurement(name="driver", text="550.54.15"),  # no value, no GPU, no verdict
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
        ("driver", None, "550.54.15", "", None, "", None, {}),
        ("n" * 100, -0.0, "t" * 500, "u" * 20, None, "h" * 100, False, {}),
        ("nul\\x00name", None, "a\\x00b", "", None, "", None, {"sensor": "x\\x00y", "deep": ["\\x00", 1]}),
    ]
    assert {m.recorded_at for m in stored} == {result.finished_at}  # written with the result, at one time
    assert len({m.pk for m in stored}) == 4


def test_hundreds_of_measurements_are_one_statement(cluster, make_run) -> None:
    run = make_run(cluster)
    node = cluster.nodes.get(hostname="n02")
    result, _ = services.results_claim(run_id=run.pk, node_id=node.pk, claim="t")
    many = [CheckMeasurement(name=f"m{i}", value=float(i), gpu=i % 8) for i in range(500)]

    with CaptureQueriesContext(connection) as queries:
        written = services.measurements_write(
            result_id=result.pk, stored=services.stored_measurements(many), at=result.started_at
        )

    assert written == 500
    assert Measurement.objects.filter(result=result).count() == 500
    assert not any("INSERT" in q["sql"] and "runs_measurement" in q["sql"] for q in queries.captured_queries)
    assert services.measurements_write(result_id=result.pk, stored=[], at=result.started_at) == 0
