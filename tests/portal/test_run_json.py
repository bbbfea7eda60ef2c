"""`kiln_run --json`: the streamed text is exactly the document, read in chunks without raw output."""

from __future__ import annotations

import json

from django.db import connection
from django.test.utils import CaptureQueriesContext

from portal.runs import selectors
from portal.runs.models import CheckResult, Scope
from tests.portal.helpers import add_measurement, set_result


def streamed(run) -> str:
    return "".join(selectors.run_json_text(run=run))


def test_the_streamed_text_is_the_indented_document(cluster, make_run) -> None:
    run = make_run(cluster)
    result = set_result(run, "n02", "gpu-inventory", "fail", 'GPU 3 missing: "0000:9b:00.0"\n')
    add_measurement(result, "gpu_count", value=7.0, unit="GPUs", labels={"expected": "8"})
    add_measurement(result, "gpu_uuid", text="GPU-ab\u00e9", gpu=0)
    add_measurement(result, "busbw", value=float("nan"))  # a stored NaN prints as JSON's NaN, as before
    launcher = CheckResult.objects.filter(run=run, node__hostname="n01").first()
    CheckResult.objects.create(
        run=run, node=launcher.node, item_key="nccl", kind="nccl_allreduce", scope=Scope.GROUP,
        node_set="n[01-04]", status="pass", attribution={"n01": {"status": "pass"}}, position=9,
    )  # fmt: skip

    text = streamed(run)

    assert text == json.dumps(selectors.run_json(run=run), indent=2)
    doc = json.loads(text)
    assert len(doc["results"]) == 9 and doc["run"] == run.pk
    row = next(r for r in doc["results"] if r["node"] == "n02" and r["check"] == "gpu-inventory")
    by_name = {m["name"]: m for m in row["measurements"]}
    assert by_name["gpu_count"] == {
        "name": "gpu_count",
        "value": 7.0,
        "unit": "GPUs",
        "gpu": None,
        "labels": {"expected": "8"},
    }
    group = next(r for r in doc["results"] if r.get("scope") == "group")
    assert group["node"] == "n[01-04]" and group["launcher"] == "n01" and group["nodes"] == {"n01": {"status": "pass"}}


def test_a_run_without_results_streams_an_empty_list(cluster, make_run) -> None:
    run = make_run(cluster)
    CheckResult.objects.filter(run=run).delete()
    assert streamed(run) == json.dumps(selectors.run_json(run=run), indent=2)
    assert json.loads(streamed(run))["results"] == []


def test_it_reads_in_chunks_and_never_the_raw_output(cluster, make_run, monkeypatch) -> None:
    run = make_run(cluster)  # 8 results
    for result in CheckResult.objects.filter(run=run):
        add_measurement(result, "m", value=1.0)
    monkeypatch.setattr(selectors, "RUN_JSON_CHUNK", 3)
    with CaptureQueriesContext(connection) as queries:
        text = streamed(run)
    assert len(json.loads(text)["results"]) == 8
    sql = [q["sql"] for q in queries.captured_queries]
    result_reads = [s for s in sql if 'FROM "runs_checkresult"' in s]
    assert result_reads and all("stdout" not in s and "stderr" not in s for s in result_reads)
    assert sum('FROM "runs_measurement"' in s for s in sql) == 3, "one measurements query per chunk of 3 results"
