"""Run comparison: deltas in each metric's direction, key values stored at close, a broken tool's
numbers, filters and bad input."""

from __future__ import annotations

import pytest
from django.urls import reverse

from portal.history.services import run_key_values_store
from portal.runs import services
from portal.runs.models import CheckResult, Measurement, RunKeyValue
from tests.portal.helpers import add_measurement, set_result
from tests.portal.history.helpers import fill

pytestmark = pytest.mark.django_db

# --- compare -----------------------------------------------------------------------------------


def test_it_compares_two_runs_with_deltas_in_each_metrics_direction(viewer_client, cluster, hist_run) -> None:
    base = hist_run(cluster, started="2025-01-01T10:00:00")
    new = hist_run(cluster, started="2025-02-01T10:00:00")
    fill(base, "n01", busbw=470.0, gflops=[100000.0, 100000.0])
    fill(new, "n01", busbw=376.0, gflops=[100000.0, 90000.0], ecc_uncorrected=2)
    fill(base, "n02", busbw=470.0, gflops=[90000.0, 90000.0])
    fill(new, "n02", busbw=471.0, gflops=[99000.0, 99000.0])

    response = viewer_client.get(reverse("history:run_compare") + f"?a={new.pk}")  # b defaults to the previous run

    assert response.status_code == 200
    comparison = response.context["comparison"]
    assert comparison.b.pk == base.pk
    by = {(n.subject, d.metric.key): d for n in comparison.nodes for d in n.deltas}
    busbw = by[("n01", "busbw")]
    assert (busbw.a, busbw.b, busbw.delta, busbw.delta_pct, busbw.direction) == (376.0, 470.0, -94.0, -20.0, "worse")
    gflops = by[("n01", "gflops")]
    assert (gflops.a, gflops.a_gpu, gflops.b, gflops.direction) == (90000.0, 1, 100000.0, "worse")  # the worst GPU
    assert by[("n01", "ecc_uncorrected")].direction == "worse"  # lower is better: 0 -> 2
    assert by[("n02", "gflops")].direction == "better"
    assert by[("n02", "busbw")].direction == "same"  # +0.2 %: noise
    changes = {(c.subject, c.check): c for n in comparison.nodes for c in n.changes}
    assert changes[("n01", "nccl-allreduce")].direction == "worse"
    assert (changes[("n01", "ecc-health")].b, changes[("n01", "ecc-health")].a) == ("pass", "fail")
    assert comparison.counts["status_worse"] == 2 and comparison.counts["metrics_worse"] == 3
    html = response.content.decode()
    assert "-94" in html and "-20.0 %" in html and "pass → fail" in html
    assert html.count('<tr class="worse">') == 5


def test_a_comparison_of_finished_runs_reads_the_key_values_stored_when_they_closed(
    viewer_client, cluster, hist_run, django_capture_on_commit_callbacks
) -> None:
    base, new = hist_run(cluster), hist_run(cluster)
    fill(base, "n01", busbw=470.0, gflops=[100000.0, 100000.0])
    fill(new, "n01", busbw=376.0, gflops=[100000.0, 90000.0], ecc_uncorrected=2)
    url = reverse("history:run_compare") + f"?a={new.pk}&b={base.pk}"

    def deltas() -> dict:
        comparison = viewer_client.get(url).context["comparison"]
        return {(n.subject, d.metric.key): (d.a, d.a_gpu, d.b, d.direction) for n in comparison.nodes for d in n.deltas}

    live = deltas()  # both runs still going: read from their measurements
    assert live[("n01", "gflops")] == (90000.0, 1, 100000.0, "worse")
    assert not RunKeyValue.objects.exists()
    for run in (base, new):
        CheckResult.objects.filter(run=run, status="queued").update(status="pass")
        with django_capture_on_commit_callbacks(execute=True):
            services.run_finalize(run_id=run.pk)
    stored = {(v.subject, v.metric): (v.value, v.gpu) for v in RunKeyValue.objects.filter(run=new)}
    assert stored[("n01", "gflops")] == (90000.0, 1) and stored[("n01", "busbw")] == (376.0, None)

    Measurement.objects.filter(result__run__in=[base, new]).delete()  # the stored rows are what is read now
    assert deltas() == live
    assert run_key_values_store(run_id=new.pk) == 0  # idempotent: refolded from what is left (nothing)
    assert deltas()[("n01", "gflops")] == (None, None, 100000.0, "gone")


@pytest.mark.parametrize("broken", [float("nan"), float("inf"), float("-inf")])
def test_a_broken_tools_number_is_not_compared(viewer_client, cluster, hist_run, broken: float) -> None:
    """NaN or inf on a GPU (kept on the result that it made `error`) neither picks the node's worst
    GPU nor makes the change look like noise: the finite GPUs are compared, stored or not."""
    base, new = hist_run(cluster), hist_run(cluster)
    fill(base, "n01", busbw=470.0, gflops=[100000.0, 100000.0])
    fill(new, "n01", busbw=470.0, gflops=[90000.0, 100000.0])
    burn = new.results.get(node__hostname="n01", item_key="burn-in")
    add_measurement(burn, "gflops", value=broken, unit="Gflop/s", gpu=2, ok=False)
    url = reverse("history:run_compare") + f"?a={new.pk}&b={base.pk}"
    for stored in (False, True):
        if stored:
            CheckResult.objects.filter(run__in=[base, new], status="queued").update(status="pass")
            for run in (base, new):
                services.run_finalize(run_id=run.pk)
                run_key_values_store(run_id=run.pk)
            assert RunKeyValue.objects.filter(run=new).exists()
        comparison = viewer_client.get(url).context["comparison"]
        (gflops,) = [d for n in comparison.nodes for d in n.deltas if d.metric.key == "gflops"]
        assert (gflops.a, gflops.a_gpu, gflops.direction) == (90000.0, 0, "worse"), stored


def test_it_compares_lower_is_better_metrics_the_other_way(viewer_client, cluster, hist_run) -> None:
    base, new = hist_run(cluster), hist_run(cluster)
    for run, temp in ((base, 70.0), (new, 80.0)):
        result = set_result(run, "n01", "burn-in", "pass")
        result.kind = "dlc_temperature"
        result.save()
        add_measurement(result, "temp_gpu_steady", value=temp, gpu=0, labels={"phase": "load"})
        add_measurement(result, "temp_gpu_steady", value=temp - 40, gpu=0, labels={"phase": "idle"})

    comparison = viewer_client.get(reverse("history:run_compare") + f"?a={new.pk}&b={base.pk}").context["comparison"]
    (delta,) = [d for n in comparison.nodes for d in n.deltas]
    assert (delta.metric.key, delta.a, delta.b, delta.direction) == ("temp_gpu", 80.0, 70.0, "worse")
    reverse_ = viewer_client.get(reverse("history:run_compare") + f"?a={base.pk}&b={new.pk}").context["comparison"]
    assert [d.direction for n in reverse_.nodes for d in n.deltas] == ["better"]


def test_it_filters_a_comparison_to_what_got_worse(viewer_client, cluster, hist_run) -> None:
    base, new = hist_run(cluster), hist_run(cluster)
    fill(base, "n01", busbw=470.0, gflops=[1.0])
    fill(new, "n01", busbw=400.0, gflops=[1.0])
    fill(base, "n02", busbw=470.0, gflops=[1.0])
    fill(new, "n02", busbw=470.0, gflops=[1.0])

    response = viewer_client.get(reverse("history:run_compare") + f"?a={new.pk}&b={base.pk}&worse=on")

    nodes = response.context["comparison"].nodes
    assert [n.subject for n in nodes] == ["n01"]
    assert [d.metric.key for d in nodes[0].deltas] == ["busbw"]
    assert [c.check for c in nodes[0].changes] == ["nccl-allreduce"]


def test_it_explains_bad_compare_input(viewer_client, cluster, make_run) -> None:
    first = make_run(cluster)
    url = reverse("history:run_compare")
    cases = {
        "?a=abc": "Enter a whole number",
        "?a=99999": "there is no run #99999",
        f"?a={first.pk}&b=99999": "there is no run #99999",
        f"?a={first.pk}": "is the first run of c1",
        f"?a={first.pk}&b={first.pk}": "pick two different runs",
    }
    for query, message in cases.items():
        response = viewer_client.get(url + query)
        assert response.status_code == 400, query
        assert message in response.content.decode(), query
    assert viewer_client.get(url).status_code == 200  # the empty form


def test_runs_of_two_clusters_pair_their_nodes_by_hostname(viewer_client, cluster, hist_run) -> None:
    """A cluster rebuilt under a new name (or a spare set) keeps its hostnames: the comparison pairs
    the nodes by name, not by their rows, and counts the same statuses as unchanged."""
    from portal.inventory.models import Cluster, Node

    again = Cluster.objects.create(name="c1-rebuilt", profile="H100-SXM-8", transport="local")
    Node.objects.bulk_create(Node(cluster=again, hostname=f"n{i:02d}", rack="R1") for i in range(1, 5))
    base, new = hist_run(cluster), hist_run(again)
    fill(base, "n01", busbw=470.0, gflops=[100000.0, 100000.0])
    fill(new, "n01", busbw=376.0, gflops=[100000.0, 100000.0])
    fill(base, "n02", busbw=470.0, gflops=[100000.0, 100000.0])
    fill(new, "n02", busbw=470.0, gflops=[100000.0, 100000.0])

    comparison = viewer_client.get(reverse("history:run_compare") + f"?a={new.pk}&b={base.pk}").context["comparison"]
    changes = {(c.subject, c.check): (c.b, c.a) for n in comparison.nodes for c in n.changes}
    assert changes == {("n01", "nccl-allreduce"): ("pass", "fail")}
    # Every node result but the changed one, and each member's share of the plan's multi-node check.
    own = CheckResult.objects.filter(run=new, scope="node").count()
    shares = 4 * CheckResult.objects.filter(run=new, scope="group").count()
    assert shares and comparison.unchanged_statuses == own - 1 + shares
    by = {(n.subject, d.metric.key): d.direction for n in comparison.nodes for d in n.deltas}
    assert by[("n01", "busbw")] == "worse" and by[("n02", "busbw")] == "same"
