"""/metrics: bearer token, Prometheus exposition parsed by prometheus_client's own parser."""

from __future__ import annotations

import datetime as dt
from typing import Any
from urllib.parse import urlencode

import pytest
from django.test import Client
from django.urls import reverse
from prometheus_client.parser import text_string_to_metric_families

from tests.health.helpers import finish
from tests.portal.helpers import add_measurement

pytestmark = pytest.mark.django_db


def scrape(client: Client, token: str, query: str = "") -> dict[str, Any]:
    """The scrape parsed by prometheus_client's parser, which also refuses a family split in two."""
    response = client.get(reverse("health:metrics") + query, HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/plain")
    text = b"".join(response.streaming_content).decode()
    families = list(text_string_to_metric_families(text))
    names = [f.name for f in families]
    assert len(names) == len(set(names)), names  # one HELP/TYPE group per family
    return {f.name: f for f in families}


def test_it_needs_a_bearer_token_and_never_redirects_to_login(client, token) -> None:
    response = client.get(reverse("health:metrics"))
    assert response.status_code == 401 and response["WWW-Authenticate"].startswith("Bearer")
    assert client.get(reverse("health:metrics"), HTTP_AUTHORIZATION="Bearer wrong").status_code == 403


def test_it_is_off_without_a_configured_token(client, settings) -> None:
    settings.KILN_METRICS_TOKEN = ""
    assert client.get(reverse("health:metrics"), HTTP_AUTHORIZATION="Bearer ").status_code == 403


def test_it_exports_health_and_each_clusters_aggregates_and_per_gpu_detail_on_request(
    client, token, cluster, make_run, django_capture_on_commit_callbacks
) -> None:
    old = make_run(cluster)
    add_measurement(
        old.results.get(node__hostname="n01", item_key="ecc-health"), "ecc_aggregate_corrected", value=1, gpu=2
    )
    finish(old, capture=django_capture_on_commit_callbacks)
    run = make_run(cluster)
    ecc = run.results.get(node__hostname="n01", item_key="ecc-health")
    add_measurement(ecc, "ecc_aggregate_corrected", value=7, gpu=2)
    add_measurement(ecc, "ecc_volatile_uncorrected", value=0, gpu=2)
    add_measurement(run.results.get(node__hostname="n03", item_key="ecc-health"), "ecc_aggregate_corrected", value=3)
    finish(run, {"n02": ("fail", "GPU 3 ECC")}, django_capture_on_commit_callbacks)
    families = scrape(client, token)
    # One health series per node: its current state.
    state = {s.labels["node"]: (s.labels["state"], s.value) for s in families["kiln_node_health_state"].samples}
    assert state == {"n01": ("healthy", 1.0), "n02": ("failed", 1.0), "n03": ("healthy", 1.0), "n04": ("healthy", 1.0)}
    assert len(families["kiln_node_health_checked_timestamp_seconds"].samples) == 4
    # No per-GPU family by default: the cluster's aggregates of the nodes' latest values instead.
    assert "kiln_gpu_ecc_errors" not in families
    stats = {
        (s.labels["counter"], s.labels["stat"]): s.value
        for s in families["kiln_cluster_measurement"].samples
        if s.labels["metric"] == "kiln_gpu_ecc_errors"
    }
    assert stats[("aggregate_corrected", "min")] == 3.0 and stats[("aggregate_corrected", "max")] == 7.0
    assert stats[("aggregate_corrected", "p50")] == 3.0 and stats[("aggregate_corrected", "mean")] == 5.0
    assert stats[("volatile_uncorrected", "max")] == 0.0
    counts = {
        (s.name, s.labels["counter"]): s.value
        for name in ("kiln_cluster_measurement_values", "kiln_cluster_measurement_nodes")
        for s in families[name].samples
    }
    assert counts == {
        ("kiln_cluster_measurement_values", "aggregate_corrected"): 2.0,
        ("kiln_cluster_measurement_values", "volatile_uncorrected"): 1.0,
        ("kiln_cluster_measurement_nodes", "aggregate_corrected"): 2.0,
        ("kiln_cluster_measurement_nodes", "volatile_uncorrected"): 1.0,
    }
    assert {s.labels["cluster"] for s in families["kiln_cluster_measurement"].samples} == {"c1"}
    detail = scrape(client, token, "?cluster=c1&detail=1")
    ecc_samples = {
        (s.labels["node"], s.labels["gpu"], s.labels["counter"]): s.value for s in detail["kiln_gpu_ecc_errors"].samples
    }
    assert ecc_samples == {
        ("n01", "2", "aggregate_corrected"): 7.0,
        ("n01", "2", "volatile_uncorrected"): 0.0,
        ("n03", "", "aggregate_corrected"): 3.0,
    }
    assert all(s.labels["cluster"] == "c1" for s in detail["kiln_gpu_ecc_errors"].samples)
    assert "kiln_cluster_measurement" in detail and "kiln_node_health_state" in detail


def test_detail_is_one_clusters_unless_the_setting_gives_it_to_every_scrape(
    client, token, cluster, make_run, settings, django_capture_on_commit_callbacks
) -> None:
    run = make_run(cluster)
    add_measurement(run.results.get(node__hostname="n01", item_key="ecc-health"), "ecc_volatile_corrected", value=2)
    finish(run, capture=django_capture_on_commit_callbacks)
    url = reverse("health:metrics")
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    assert client.get(url + "?detail=1", **auth).status_code == 400  # every cluster's GPUs: not on request
    assert client.get(url + "?cluster=c1&detail=yes", **auth).status_code == 400
    assert client.get(url + "?cluster=nope&detail=1", **auth).status_code == 404
    assert "kiln_gpu_ecc_errors" not in scrape(client, token, "?cluster=c1&detail=0")
    settings.KILN_METRICS_DETAIL = True  # the operator's choice: every scrape carries them
    assert [s.value for s in scrape(client, token)["kiln_gpu_ecc_errors"].samples] == [2.0]
    assert "kiln_gpu_ecc_errors" not in scrape(client, token, "?detail=0")


def test_percentiles_are_nearest_rank_values() -> None:
    from portal.health.metrics import nearest_rank

    values = [float(v) for v in range(1, 101)]  # 1..100
    assert [nearest_rank(values, q) for q in (0.0, 0.01, 0.1, 0.5, 0.9, 0.99, 1.0)] == [1, 1, 10, 50, 90, 99, 100]
    assert nearest_rank([8.0, 16.0], 0.5) == 8.0  # a value some link has, never 12
    assert nearest_rank([5.0], 0.99) == 5.0


def test_the_aggregates_read_every_nodes_stored_values_not_only_the_runs(
    client, token, cluster, make_run, django_capture_on_commit_callbacks
) -> None:
    """A run of one node re-renders its cluster's aggregates over every node's latest values."""
    from portal.inventory.models import Node

    first = make_run(cluster)
    for i, result in enumerate(first.results.filter(item_key="ecc-health").order_by("node__hostname")):
        add_measurement(result, "ecc_volatile_corrected", value=10 * (i + 1), gpu=0)  # 10, 20, 30, 40
    finish(first, capture=django_capture_on_commit_callbacks)
    one = make_run(cluster, nodes=list(Node.objects.filter(hostname="n04")))
    add_measurement(one.results.get(item_key="ecc-health"), "ecc_volatile_corrected", value=1, gpu=0)
    finish(one, capture=django_capture_on_commit_callbacks)
    stats = {s.labels["stat"]: s.value for s in scrape(client, token)["kiln_cluster_measurement"].samples}
    assert stats["min"] == 1.0 and stats["max"] == 30.0 and stats["p50"] == 10.0 and stats["mean"] == 61 / 4


def test_its_query_count_does_not_grow_with_nodes(
    client, token, cluster, make_run, django_assert_max_num_queries
) -> None:
    from portal.inventory.models import Node

    finish(make_run(cluster))
    Node.objects.bulk_create(Node(cluster=cluster, hostname=f"x{i:03d}") for i in range(50))
    with django_assert_max_num_queries(8):
        assert client.get(reverse("health:metrics"), HTTP_AUTHORIZATION=f"Bearer {token}").status_code == 200


def test_it_serves_one_cluster_when_asked(client, token, cluster, make_run, django_capture_on_commit_callbacks) -> None:
    from portal.inventory.models import Cluster, Node

    other = Cluster.objects.create(name="c2", profile="H100-SXM-8", transport="local")
    Node.objects.create(cluster=other, hostname="m01")
    for c in (cluster, other):
        run = make_run(c)
        add_measurement(run.results.filter(item_key="ecc-health").first(), "ecc_aggregate_corrected", value=3, gpu=0)
        finish(run, capture=django_capture_on_commit_callbacks)
    both = scrape(client, token)
    assert {s.labels["cluster"] for s in both["kiln_cluster_measurement"].samples} == {"c1", "c2"}
    only = scrape(client, token, "?cluster=c2")
    assert {s.labels["node"] for s in only["kiln_node_health_state"].samples} == {"m01"}
    assert {s.labels["cluster"] for s in only["kiln_cluster_measurement"].samples} == {"c2"}
    detail = scrape(client, token, "?cluster=c2&detail=1")
    assert [s.labels["node"] for s in detail["kiln_gpu_ecc_errors"].samples] == ["m01"]
    missing = client.get(reverse("health:metrics") + "?cluster=nope", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert missing.status_code == 404


def test_values_are_rendered_when_a_run_finishes_and_backfilled_after_migrate(
    client, token, cluster, make_run, django_capture_on_commit_callbacks
) -> None:
    from portal.health.models import ClusterMetrics, NodeMetrics
    from portal.health.services import node_metrics_backfill

    run = make_run(cluster)
    add_measurement(run.results.get(node__hostname="n03", item_key="ecc-health"), "ecc_volatile_corrected", value=5)
    assert "kiln_cluster_measurement" not in scrape(client, token)  # nothing before the run finishes
    finish(run, capture=django_capture_on_commit_callbacks)
    stored = NodeMetrics.objects.get(node__hostname="n03", family="kiln_gpu_ecc_errors")
    assert 'node="n03"' in stored.samples and stored.samples.endswith(" 5.0\n")
    assert stored.values == {"volatile_corrected": [5.0]}
    failing = NodeMetrics.objects.get(node__hostname="n03", family="kiln_node_check_failing")
    assert failing.values == {"ecc_health": 0, "gpu_inventory": 0} and failing.samples == ""

    def ecc_max() -> list[float]:
        return [s.value for s in scrape(client, token)["kiln_cluster_measurement"].samples if s.labels["stat"] == "max"]

    assert ecc_max() == [5.0]

    NodeMetrics.objects.all().delete()  # a database whose runs finished before rows were stored
    ClusterMetrics.objects.all().delete()
    assert node_metrics_backfill() == 5  # n03's ECC family and every judged node's failing-checks family
    assert node_metrics_backfill() == 0  # once: rows exist now
    assert ecc_max() == [5.0]

    NodeMetrics.objects.update(values=None)  # stored before the values were kept
    assert node_metrics_backfill() == 5 and node_metrics_backfill() == 0
    assert not NodeMetrics.objects.filter(values__isnull=True).exists()

    ClusterMetrics.objects.all().delete()  # nodes stored, their cluster's aggregates not
    assert node_metrics_backfill() == 0 and ecc_max() == [5.0]


def test_a_label_value_is_escaped(client, token, cluster, make_run, django_capture_on_commit_callbacks) -> None:
    from portal.inventory.models import Cluster, Node

    host, name = 'n"01\\x', 'c"1\\\nü'
    Node.objects.filter(hostname="n01").update(hostname=host)
    Cluster.objects.filter(pk=cluster.pk).update(name=name)
    run = make_run(cluster)
    add_measurement(run.results.get(node__hostname=host, item_key="ecc-health"), "ecc_volatile_corrected", value=1)
    finish(run, {host: ("fail", "GPU 0 ECC")}, django_capture_on_commit_callbacks)
    families = scrape(client, token)
    [failing] = families["kiln_node_check_failing"].samples
    assert failing.labels == {"cluster": name, "node": host, "kind": "ecc_health"}
    assert {s.labels["cluster"] for s in families["kiln_cluster_measurement"].samples} == {name}
    assert {s.labels["cluster"] for s in families["kiln_cluster_check_failing_nodes"].samples} == {name}
    detail = scrape(client, token, "?" + urlencode({"cluster": name, "detail": "1"}))
    assert [s.labels["node"] for s in detail["kiln_gpu_ecc_errors"].samples] == [host]


def test_health_lines_are_what_prometheus_client_writes(cluster) -> None:
    """The health families are written by hand for speed: the same text as prometheus_client's own
    rendering, escaping included (a quote, a backslash, a line feed, non-ASCII)."""
    from prometheus_client.core import GaugeMetricFamily

    from portal.health.metrics import CHECKED_FAMILY, STATE_FAMILY, _health, render
    from portal.health.models import NodeHealth
    from portal.inventory.models import Node

    Node.objects.filter(hostname="n01").update(hostname='n"0\\1\nü')
    at = dt.datetime(2026, 12, 2, 10, 0, 0, 123456, tzinfo=dt.UTC)
    NodeHealth.objects.create(node=Node.objects.get(hostname="n02"), state="failed", checked_at=at)
    state = GaugeMetricFamily(*STATE_FAMILY, labels=["cluster", "node", "state"])
    checked = GaugeMetricFamily(*CHECKED_FAMILY, labels=["cluster", "node"])
    for node in Node.objects.order_by("cluster_id", "id"):
        now = NodeHealth.objects.filter(node=node).values_list("state", flat=True).first() or "unknown"
        state.add_metric(["c1", node.hostname, now], 1.0)
        if node.hostname == "n02":
            checked.add_metric(["c1", node.hostname], at.timestamp())
    assert "".join(_health(Node.objects.all())) == render([state]) + render([checked])


def test_the_aggregate_lines_are_what_prometheus_client_writes() -> None:
    """The cluster families are written by hand too: the same text as prometheus_client's."""
    from prometheus_client.core import GaugeMetricFamily

    from portal.health.metrics import AGGREGATE, STATS, _sample_lines, cluster_samples

    name = 'c"\\\nü'
    got = cluster_samples(name, [("kiln_gpu_temp_celsius", {"load": [71.5, 70.0]})], [])
    family = GaugeMetricFamily(AGGREGATE, "", labels=["cluster", "metric", "phase", "stat"])
    for stat, value in zip([s for s, _ in STATS] + ["mean"], [70.0] * 4 + [71.5] * 3 + [70.75], strict=True):
        family.add_metric([name, "kiln_gpu_temp_celsius", "load", stat], value)
    assert got[AGGREGATE] == _sample_lines(family)


def test_after_close_runs_inline_when_the_broker_refuses_its_task(cluster, make_run, monkeypatch) -> None:
    """In a worker the after-close steps go to their own task; a broker that is down then must not
    lose them: they run in the closing task instead."""
    import types

    import celery

    from portal.health import signals, tasks

    run = make_run(cluster)
    request = types.SimpleNamespace(is_eager=False, called_directly=False, id="task-1")
    monkeypatch.setattr(celery, "current_task", types.SimpleNamespace(request=request))
    evaluated: list[int] = []
    monkeypatch.setattr(signals, "evaluate", evaluated.append)

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise ConnectionError("broker down")

    monkeypatch.setattr(tasks.run_closed, "apply_async", refuse)
    signals.after_close(run.pk)
    assert evaluated == [run.pk]

    sent: list[Any] = []
    monkeypatch.setattr(tasks.run_closed, "apply_async", lambda args, kwargs=None, **options: sent.append(args))
    signals.after_close(run.pk)
    assert evaluated == [run.pk] and sent == [(run.pk,)]  # sent, not run here


def test_a_default_scrape_has_two_series_per_node_whatever_it_measured(
    client, token, cluster, make_run, django_capture_on_commit_callbacks
) -> None:
    """Per node its state and when it was judged (and a series per failing check): none per GPU or
    per measurement, however many each node has."""
    run = make_run(cluster)
    for result in run.results.filter(item_key="ecc-health"):
        for gpu in range(8):
            for counter in ("volatile_uncorrected", "aggregate_corrected"):
                add_measurement(result, f"ecc_{counter}", value=gpu, gpu=gpu)
    finish(run, {"n02": ("fail", "GPU 3 ECC")}, django_capture_on_commit_callbacks)
    families = scrape(client, token)
    per_node = [s for family in families.values() for s in family.samples if "node" in s.labels]
    assert len(per_node) == 2 * 4 + 1  # 4 nodes, one failing check
    assert len(scrape(client, token, "?cluster=c1&detail=1")["kiln_gpu_ecc_errors"].samples) == 4 * 8 * 2
