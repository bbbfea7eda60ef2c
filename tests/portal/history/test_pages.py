"""History pages: a node's timeline and trends, a cluster's runs, result search and exports; their
content, filters, pagination, query counts and access rules (comparison: test_compare.py)."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json

import plotly.graph_objects as go
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from portal.catalog.models import TestPlan
from portal.history import selectors
from portal.inventory.models import Cluster, Node
from portal.runs import services
from portal.runs.models import CheckResult, Measurement, Run
from tests.portal.helpers import add_measurement, set_result
from tests.portal.history.helpers import chart_of, fill

pytestmark = pytest.mark.django_db

# --- access ------------------------------------------------------------------------------------


def _urls(run: Run) -> list[str]:
    return [
        reverse("history:node_detail", args=["c1", "n01"]),
        reverse("history:cluster_runs", args=["c1"]),
        reverse("history:run_compare") + f"?a={run.pk}",
        reverse("history:result_search"),
        reverse("history:run_results_csv", args=[run.pk]),
        reverse("history:run_results_json", args=[run.pk]),
        reverse("history:run_measurements_csv", args=[run.pk]),
    ]


def test_it_redirects_anonymous_visitors_to_the_login_page(client, cluster, make_run) -> None:
    run = make_run(cluster)
    for url in _urls(run):
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("login")), url


def test_it_forbids_users_without_a_role(client, make_user, cluster, make_run) -> None:
    run = make_run(cluster)
    client.force_login(make_user("nobody"))
    for url in _urls(run):
        assert client.get(url).status_code == 403, url


# --- node page ---------------------------------------------------------------------------------


def test_it_shows_a_nodes_timeline_with_the_group_results_that_include_it(viewer_client, cluster, hist_run) -> None:
    old = hist_run(cluster, started="2025-01-01T10:00:00")
    new = hist_run(cluster, started="2025-02-01T10:00:00")
    set_result(old, "n02", "ecc-health", "pass", "all fine")
    set_result(new, "n02", "ecc-health", "fail", "GPU 3: 2 uncorrectable ECC errors")
    set_result(
        new, "n01", "fs-aggregate", "fail", "n02 is slow",
        attribution={"n02": {"status": "fail", "reason": "n02 writes at 1 GB/s"}},
    )  # fmt: skip
    other = Cluster.objects.create(name="c2", transport="local")
    Node.objects.create(cluster=other, hostname="n02")

    response = viewer_client.get(reverse("history:node_detail", args=["c1", "n02"]))

    assert response.status_code == 200
    entries = response.context["entries"]
    assert [e.result.run_id for e in entries] == [new.pk] * 4 + [old.pk] * 4  # newest run first
    assert all(e.result.run.cluster_id == cluster.pk for e in entries)
    group = next(e for e in entries if e.result.item_key == "fs-aggregate" and e.result.run_id == new.pk)
    assert group.is_group and group.status == "fail" and group.reason == "n02 writes at 1 GB/s"
    html = response.content.decode()
    assert "n02 writes at 1 GB/s" in html and "GPU 3: 2 uncorrectable ECC errors" in html
    ecc = CheckResult.objects.get(run=new, node__hostname="n02", item_key="ecc-health")
    assert f'<a class="cell fail" href="{reverse("runs:result_detail", args=[ecc.pk])}"' in html
    assert reverse("history:node_detail", args=["c1", "n03"]) not in html
    assert viewer_client.get(reverse("history:node_detail", args=["c1", "nope"])).status_code == 404


def test_it_paginates_the_timeline(viewer_client, cluster, hist_run) -> None:
    for _ in range(13):  # 13 runs x 4 results = 52 results of n01: two pages of 50
        hist_run(cluster)

    first = viewer_client.get(reverse("history:node_detail", args=["c1", "n01"]))
    second = viewer_client.get(reverse("history:node_detail", args=["c1", "n01"]) + "?page=2")

    assert len(first.context["entries"]) == 50
    assert len(second.context["entries"]) == 2
    assert "page 1 of 2 (52 in all)" in first.content.decode()
    assert {e.result.pk for e in first.context["entries"]}.isdisjoint({e.result.pk for e in second.context["entries"]})


def test_it_charts_each_key_metric_across_runs(viewer_client, cluster, hist_run) -> None:
    runs = [hist_run(cluster, started=f"2025-0{m}-01T10:00:00") for m in (1, 2, 3)]
    for run, busbw in zip(runs, [470.0, 468.0, 380.0], strict=True):
        fill(run, "n01", busbw=busbw, gflops=[100000.0, 99000.0])
    fs = set_result(runs[2], "n01", "fs-aggregate", "pass")
    add_measurement(fs, "write_bw_sum", value=5e9, unit="B/s", labels={"host": "n02"})
    add_measurement(fs, "write_bw_sum", value=4e9, unit="B/s", labels={"host": "n01"})
    add_measurement(fs, "write_bw_sum", value=40e9, unit="B/s")  # the aggregate: not the node's own

    response = viewer_client.get(reverse("history:node_detail", args=["c1", "n01"]))

    busbw_chart = chart_of(response, "busbw")
    (line, bad) = busbw_chart["data"]
    assert line["name"] == "nccl-allreduce"
    assert line["y"] == [470.0, 468.0, 380.0]
    assert [x[:10] for x in line["x"]] == ["2025-01-01", "2025-02-01", "2025-03-01"]
    assert bad["name"] == "out of spec" and bad["y"] == [380.0]  # the drop is marked
    assert busbw_chart["layout"]["shapes"][0]["y0"] == 460.0  # the threshold is drawn
    gflops = chart_of(response, "gflops")
    assert [t["name"] for t in gflops["data"]] == ["GPU 0", "GPU 1"]
    assert gflops["data"][1]["y"] == [99000.0] * 3
    fs_write = chart_of(response, "fs_write")
    assert [(t["name"], t["y"]) for t in fs_write["data"]] == [("fs-aggregate", [4.0])]  # GB/s, n01's only
    html = response.content.decode()
    assert reverse("plotly_js") in html and 'id="history-charts"' in html and 'id="trend-busbw"' in html
    for chart in response.context["charts"]:
        go.Figure(chart["figure"])  # plotly accepts every figure as it is (validation was skipped)


def _seed(name: str, nodes: int, runs: int, plan: TestPlan, make_run) -> tuple[Cluster, list[Run]]:
    """A cluster of `nodes` nodes with `runs` runs, every result finished with key measurements."""
    cluster = Cluster.objects.create(name=name, transport="local")
    Node.objects.bulk_create(Node(cluster=cluster, hostname=f"{name}n{i:04d}") for i in range(nodes))
    made = []
    for r in range(runs):
        run = make_run(cluster, plan=plan)
        CheckResult.objects.filter(run=run).update(status="pass" if r == 0 else "fail")
        Measurement.objects.bulk_create(
            Measurement(result=result, name=name, value=value, gpu=gpu)
            for result in CheckResult.objects.filter(run=run, kind="burn_in")
            for name, value, gpu in [("gflops", 100000.0 - r, 0), ("gflops", 99000.0, 1)]
        )
        Measurement.objects.bulk_create(
            Measurement(result=result, name="busbw_peak", value=470.0 - 10 * r)
            for result in CheckResult.objects.filter(run=run, kind="nccl_allreduce")
        )
        made.append(run)
    return cluster, made


def _queries(client, url: str) -> int:
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url)
        assert response.status_code == 200, url
        if response.streaming:
            b"".join(response.streaming_content)
    return len(ctx)


def test_it_keeps_the_history_query_counts_constant_in_the_number_of_nodes(
    viewer_client, history_plan, make_run, django_assert_max_num_queries
) -> None:
    counts: dict[str, list[int]] = {}
    for size in (10, 100):
        cluster, runs = _seed(f"q{size}", size, 2, history_plan, make_run)
        host = f"q{size}n0001"
        urls = {
            "node": reverse("history:node_detail", args=[cluster.name, host]),
            "runs": reverse("history:cluster_runs", args=[cluster.name]),
            "compare": reverse("history:run_compare") + f"?a={runs[1].pk}",
            "search": reverse("history:result_search")
            + f"?cluster={cluster.name}&node=q{size}n[0000-0099]&status=fail",
            "csv": reverse("history:run_results_csv", args=[runs[1].pk]),
            "measurements": reverse("history:run_measurements_csv", args=[runs[1].pk]),
        }
        for key, url in urls.items():
            counts.setdefault(key, []).append(_queries(viewer_client, url))
        with django_assert_max_num_queries(15):  # 12 + the node's health, transitions and actions
            viewer_client.get(urls["node"])
        with django_assert_max_num_queries(16):  # per run: hostnames, node results, group results, key values
            viewer_client.get(urls["compare"])
        with django_assert_max_num_queries(10):
            viewer_client.get(urls["search"])
    for key, (small, large) in counts.items():
        assert small == large, f"{key}: {small} queries at 10 nodes, {large} at 100"


# --- cluster runs ------------------------------------------------------------------------------


def test_it_lists_a_clusters_runs_with_counts_and_pages(viewer_client, cluster, make_run, make_user) -> None:
    runs = [make_run(cluster) for _ in range(26)]
    set_result(runs[-1], "n01", "ecc-health", "fail", "bad")
    set_result(runs[-1], "n02", "ecc-health", "pass")
    set_result(runs[-1], "n03", "gpu-inventory", "error", "unreachable")
    Run.objects.filter(pk=runs[-1].pk).update(requested_by=make_user("olga", "operator"))

    response = viewer_client.get(reverse("history:cluster_runs", args=["c1"]))

    page = response.context["page"]
    assert [r.pk for r in page.object_list] == [r.pk for r in reversed(runs)][:25]
    newest = page.object_list[0]
    assert (newest.n_pass, newest.n_fail, newest.n_error, newest.n_results, newest.n_nodes) == (1, 1, 1, 8, 4)
    html = response.content.decode()
    assert '<span class="badge red">1 fail</span>' in html and '<span class="badge purple">1 error</span>' in html
    assert "olga" in html and reverse("history:run_results_csv", args=[newest.pk]) in html
    assert 'id="run-counts"' in html
    chart = response.context["charts"][0]["figure"]
    assert [t["name"] for t in chart["data"]] == ["pass", "warn", "fail", "error"]
    assert chart["data"][2]["y"][-1] == 1  # the newest run's fails, rightmost
    go.Figure(chart)
    second = viewer_client.get(reverse("history:cluster_runs", args=["c1"]) + "?page=2")
    assert [r.pk for r in second.context["page"].object_list] == [runs[0].pk]


# --- search and exports ------------------------------------------------------------------------


def test_it_searches_results_by_cluster_node_set_check_status_and_date(viewer_client, cluster, make_run) -> None:
    run = make_run(cluster)
    set_result(run, "n01", "ecc-health", "fail", "GPU 1 bad", finished_at=dt.datetime(2025, 3, 2, tzinfo=dt.UTC))
    set_result(run, "n02", "ecc-health", "fail", "GPU 2 bad", finished_at=dt.datetime(2025, 3, 5, tzinfo=dt.UTC))
    set_result(run, "n03", "ecc-health", "pass", finished_at=dt.datetime(2025, 3, 2, tzinfo=dt.UTC))
    other = Cluster.objects.create(name="c2", transport="local")
    Node.objects.create(cluster=other, hostname="n01")
    make_run(other)
    url = reverse("history:result_search")

    def found(query: str) -> list[tuple[str, str, str]]:
        response = viewer_client.get(url + query)
        assert response.status_code == 200, query
        return sorted((r.run.cluster.name, r.node.hostname, r.item_key) for r in response.context["page"].object_list)

    assert found("?cluster=c1&status=fail") == [("c1", "n01", "ecc-health"), ("c1", "n02", "ecc-health")]
    assert found("?node=n[01-02]&check=ecc_health&status=fail") == [
        ("c1", "n01", "ecc-health"),
        ("c1", "n02", "ecc-health"),
    ]
    assert found("?node=n01&check=gpu-inventory") == [("c1", "n01", "gpu-inventory"), ("c2", "n01", "gpu-inventory")]
    assert found("?cluster=c1&since=2025-03-01&until=2025-03-02") == [
        ("c1", "n01", "ecc-health"),
        ("c1", "n03", "ecc-health"),
    ]
    assert found("?cluster=c1&status=fail&since=2025-03-03") == [("c1", "n02", "ecc-health")]
    html = viewer_client.get(url + "?cluster=c1&status=fail").content.decode()
    assert "GPU 2 bad" in html and "2 results" in html


def test_it_finds_group_results_by_a_member_node(viewer_client, cluster, history_plan, make_run) -> None:
    run = make_run(cluster, plan=history_plan)
    set_result(run, "n01", "fs-aggregate", "fail", "slow")

    response = viewer_client.get(reverse("history:result_search") + "?node=n03&check=fs-aggregate")

    (result,) = response.context["page"].object_list
    assert result.scope == "group" and result.node.hostname == "n01"
    assert "n[01-04]" in response.content.decode()


def test_it_paginates_search_results_50_per_page(viewer_client, cluster, make_run) -> None:
    for _ in range(7):  # 7 runs x 8 results
        make_run(cluster)

    first = viewer_client.get(reverse("history:result_search") + "?cluster=c1")
    last = viewer_client.get(reverse("history:result_search") + "?cluster=c1&page=2")

    assert len(first.context["page"].object_list) == 50 and len(last.context["page"].object_list) == 6
    assert "?cluster=c1&amp;page=2" in first.content.decode()  # the filters stay on the page links


def test_it_shows_bad_filters_as_errors_on_the_page(viewer_client, cluster) -> None:
    url = reverse("history:result_search")
    cases = {
        "?node=gpu[01-": "not a node set",
        "?node=gpu[1-99999]": "narrow it",
        "?since=2025-03-05&until=2025-03-01": "&#x27;since&#x27; is after &#x27;until&#x27;",
        "?since=yesterday": "Enter a valid date",
        "?cluster=nope": "there is no cluster named &#x27;nope&#x27;",
        "?status=broken": "Select a valid choice",
    }
    for query, message in cases.items():
        response = viewer_client.get(url + query)
        assert response.status_code == 400, query
        body = response.content.decode()
        assert message in body, query
        assert 'class="form-errors"' in body, query
    # An export request gets its errors as plain text.
    response = viewer_client.get(url + "?node=gpu[01-&format=csv")
    assert response.status_code == 400 and "node: not a node set" in response.content.decode()
    response = viewer_client.get(url + "?format=xml")
    assert response.status_code == 400 and "unknown export format 'xml'" in response.content.decode()


def test_it_exports_search_results_as_csv_and_json(viewer_client, cluster, make_run) -> None:
    run = make_run(cluster)
    set_result(run, "n01", "ecc-health", "fail", '=HYPERLINK("http://evil")')
    set_result(run, "n02", "ecc-health", "fail", "GPU 2, bad")

    response = viewer_client.get(reverse("history:result_search") + "?cluster=c1&status=fail&format=csv")

    assert response.streaming and response["Content-Type"] == "text/csv"
    assert 'filename="kiln-results.csv"' in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert sorted((r["node"], r["check"], r["status"]) for r in rows) == [
        ("n01", "ecc-health", "fail"), ("n02", "ecc-health", "fail"),
    ]  # fmt: skip
    reasons = {r["node"]: r["reason"] for r in rows}
    assert reasons == {"n01": '\'=HYPERLINK("http://evil")', "n02": "GPU 2, bad"}  # no formula runs in Excel
    response = viewer_client.get(reverse("history:result_search") + "?cluster=c1&status=fail&format=json")
    doc = json.loads(b"".join(response.streaming_content))
    assert doc["filters"] == {"cluster": "c1", "status": "fail"}
    assert sorted(r["node"] for r in doc["results"]) == ["n01", "n02"]
    assert doc["results"][0]["url"].startswith("/results/")


def test_it_exports_a_runs_results_and_flattened_measurements(viewer_client, cluster, history_plan, make_run) -> None:
    run = make_run(cluster, plan=history_plan)
    fill(run, "n01", busbw=470.0, gflops=[100000.0])
    fs = set_result(run, "n01", "fs-aggregate", "pass", attribution={"n02": {"status": "warn", "reason": "slow"}})
    add_measurement(fs, "write_bw_sum", value=5e9, unit="B/s", labels={"host": "n02"})

    doc = json.loads(b"".join(viewer_client.get(reverse("history:run_results_json", args=[run.pk])).streaming_content))
    assert (doc["run"], doc["cluster"], doc["plan"]) == (run.pk, "c1", "hist")
    assert len(doc["results"]) == 4 * 3 + 1
    group = next(r for r in doc["results"] if r["scope"] == "group")
    assert (group["node"], group["launcher"], group["attribution"]) == (
        "n[01-04]",
        "n01",
        {"n02": {"status": "warn", "reason": "slow"}},
    )
    text = b"".join(viewer_client.get(reverse("history:run_results_csv", args=[run.pk])).streaming_content).decode()
    assert len(list(csv.DictReader(io.StringIO(text)))) == 13

    response = viewer_client.get(reverse("history:run_measurements_csv", args=[run.pk]))
    assert response.streaming and f"kiln-run-{run.pk}-measurements.csv" in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert [
        (r["node"], r["check"], r["name"], r["gpu"], r["value"])
        for r in rows
        if r["name"] != "ecc_volatile_uncorrected"
    ] == [
        ("n01", "nccl-allreduce", "busbw_peak", "", "470.0"),
        ("n01", "burn-in", "gflops", "0", "100000.0"),
        ("n[01-04]", "fs-aggregate", "write_bw_sum", "", "5000000000.0"),
    ]
    assert json.loads(rows[-1]["labels"]) == {"host": "n02"}
    assert rows[0]["threshold"] == ">= 460" and rows[0]["ok"] == "True"


def test_closed_runs_are_listed_from_their_summary_and_active_ones_counted(
    viewer_client, cluster, make_run, django_assert_max_num_queries
) -> None:
    closed, active = make_run(cluster), make_run(cluster)
    CheckResult.objects.filter(run=closed).update(status="pass")
    set_result(closed, "n02", "ecc-health", "fail", "3 uncorrectable")
    services.run_finalize(run_id=closed.pk)
    closed.refresh_from_db()
    cells = {"pass": 7, "fail": 1}  # the grid's cells: as many as results, no multi-node check here
    assert closed.summary == {
        "results": 8,
        "nodes": 4,
        "counts": {"pass": 7, "fail": 1},
        "cells": cells,
        "slowest": closed.summary["slowest"],  # the run page's (tests/portal/test_run_page.py)
    }
    set_result(active, "n01", "ecc-health", "warn", "hot")

    CheckResult.objects.filter(run=closed).update(status="error")  # the page must not count these again
    response = viewer_client.get(reverse("history:cluster_runs", args=["c1"]))
    listed = {r.pk: (r.n_pass, r.n_warn, r.n_fail, r.n_error, r.n_results, r.n_nodes) for r in response.context["page"]}
    assert listed == {closed.pk: (7, 0, 1, 0, 8, 4), active.pk: (0, 1, 0, 0, 8, 4)}

    runs = selectors.cluster_runs(cluster=cluster).filter(pk=closed.pk)
    with django_assert_max_num_queries(1):  # the run itself; its summary needs no count
        selectors.with_counts(list(runs))
