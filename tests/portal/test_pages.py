"""What the pages show: cluster nodes with their latest status, the run grid, one result's evidence."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from portal.inventory.models import Cluster, Node
from tests.portal.helpers import add_measurement, set_result

pytestmark = pytest.mark.django_db


@pytest.fixture
def viewer_client(client, make_user):
    client.force_login(make_user("vera", "viewer"))
    return client


def test_it_pages_a_large_clusters_nodes_with_a_constant_query_count(viewer_client, make_run) -> None:
    from portal.runs.views import NODES_PAGE

    counts = []
    for size in (10, NODES_PAGE * 2 + 5):
        cluster = Cluster.objects.create(name=f"big{size}", profile="H100-SXM-8", transport="local")
        Node.objects.bulk_create(Node(cluster=cluster, hostname=f"b{size}n{i:04d}") for i in range(size))
        run = make_run(cluster)
        set_result(run, f"b{size}n0000", "ecc-health", "pass", "all within spec")
        set_result(run, f"b{size}n{size - 1:04d}", "ecc-health", "fail", "GPU 1: Xid 79")
        url = reverse("inventory:cluster_detail", args=[cluster.name])
        viewer_client.get(url)  # warm-up: the session's first request reads more
        with CaptureQueriesContext(connection) as queries:
            response = viewer_client.get(url)
        counts.append(len(queries))
    assert counts[0] == counts[1], counts
    assert [row["node"].hostname for row in response.context["nodes"]][:2] == ["b205n0000", "b205n0001"]
    assert len(response.context["nodes"]) == NODES_PAGE and "page 1 of 3 (205 in all)" in response.content.decode()
    last = viewer_client.get(url + "?page=3")
    rows = last.context["nodes"]
    assert [r["node"].hostname for r in rows] == [f"b205n{i:04d}" for i in range(200, 205)]
    assert rows[-1]["worst"] == "fail" and "GPU 1: Xid 79" in last.content.decode()


def test_it_shows_a_clusters_nodes_with_their_latest_status(viewer_client, cluster, make_run) -> None:
    old = make_run(cluster)
    set_result(old, "n01", "gpu-inventory", "pass")
    set_result(old, "n01", "ecc-health", "fail", "GPU 3: 2 uncorrectable ECC errors")
    set_result(old, "n02", "ecc-health", "fail", "GPU 7: row remap pending")
    new = make_run(cluster, nodes=list(cluster.nodes.filter(hostname="n01")))
    set_result(new, "n01", "ecc-health", "pass", "all within spec")
    # still running: not a "latest status" yet
    set_result(new, "n01", "gpu-inventory", "running")

    response = viewer_client.get(reverse("inventory:cluster_detail", args=[cluster.name]))

    assert response.status_code == 200
    rows = {row["node"].hostname: row for row in response.context["nodes"]}
    assert list(rows) == ["n01", "n02", "n03", "n04"]
    assert {r.kind: r.status for r in rows["n01"]["last"]} == {"ecc_health": "pass", "gpu_inventory": "pass"}
    assert rows["n01"]["worst"] == "pass"
    assert rows["n02"]["worst"] == "fail"
    assert rows["n03"]["last"] == [] and rows["n03"]["worst"] == ""
    html = response.content.decode()
    for hostname in rows:
        assert f"{hostname}</a></td>" in html
    assert "GPU 7: row remap pending" in html
    assert "GPU 3: 2 uncorrectable ECC errors" not in html  # superseded by the newer pass
    assert html.count("never checked") == 2


def test_it_shows_the_run_grid_with_counts_and_progress(viewer_client, cluster, make_run) -> None:
    run = make_run(cluster)
    set_result(run, "n01", "gpu-inventory", "pass")
    set_result(run, "n01", "ecc-health", "pass")
    set_result(run, "n02", "gpu-inventory", "pass")
    set_result(run, "n02", "ecc-health", "fail", "GPU 5: 3 uncorrectable ECC errors")
    set_result(run, "n03", "gpu-inventory", "running", command_started_at=timezone.now())

    response = viewer_client.get(reverse("runs:run_detail", args=[run.pk]))

    html = response.content.decode()
    assert response.status_code == 200
    assert "<html" in html and f"Run #{run.pk}" in html
    assert "4/8 checks (50%)" in html
    assert 'style="width: 50%"' in html
    assert '<span class="badge green">3 pass</span>' in html
    assert '<span class="badge red">1 fail</span>' in html
    assert '<span class="badge grey">3 queued</span>' in html
    assert '<span class="badge blue">1 running</span>' in html
    assert "GPU 5: 3 uncorrectable ECC errors" in html
    grid = response.context["grid"]
    assert [row.node.hostname for row in grid.rows] == ["n01", "n02", "n03", "n04"]
    assert [c.item_key for c in grid.rows[0].cells] == ["gpu-inventory", "ecc-health"]
    assert grid.rows[1].worst == "fail"
    assert 'hx-trigger="every 2s"' in html  # the run is active: the grid polls


def test_it_returns_only_the_grid_fragment_to_htmx(viewer_client, cluster, make_run) -> None:
    run = make_run(cluster)

    response = viewer_client.get(reverse("runs:run_detail", args=[run.pk]), headers={"HX-Request": "true"})

    html = response.content.decode()
    assert response.status_code == 200
    assert html.lstrip().startswith('<div id="run-grid"')
    assert "<html" not in html and "<h1>" not in html
    assert "0/8 checks (0%)" in html


def test_it_stops_polling_once_the_run_is_finished(viewer_client, cluster, make_run) -> None:
    from portal.runs import services

    run = make_run(cluster)
    services.run_cancel(run=run)

    html = viewer_client.get(reverse("runs:run_detail", args=[run.pk]), headers={"HX-Request": "true"}).content.decode()

    assert 'data-status="cancelled"' in html
    assert "hx-get" not in html


def test_it_filters_the_grid_to_problem_nodes(viewer_client, cluster, make_run) -> None:
    run = make_run(cluster)
    for hostname in ("n01", "n02", "n03", "n04"):
        set_result(run, hostname, "gpu-inventory", "pass")
        set_result(run, hostname, "ecc-health", "pass")
    set_result(run, "n02", "ecc-health", "fail", "GPU 1: ECC")
    set_result(run, "n04", "gpu-inventory", "error", "unreachable: no route to host")

    response = viewer_client.get(reverse("runs:run_detail", args=[run.pk]), {"problems": "1"})
    fragment = viewer_client.get(
        reverse("runs:run_detail", args=[run.pk]), {"problems": "1"}, headers={"HX-Request": "true"}
    ).content.decode()

    assert [row.node.hostname for row in response.context["grid"].rows] == ["n02", "n04"]
    html = response.content.decode()
    assert ">n02</a></td>" in html and ">n04</a></td>" in html
    assert ">n01</a></td>" not in html and ">n03</a></td>" not in html
    assert ">n01</a></td>" not in fragment and ">n02</a></td>" in fragment
    # counts still cover the whole run
    assert '<span class="badge green">6 pass</span>' in html
    all_rows = viewer_client.get(reverse("runs:run_detail", args=[run.pk])).context["grid"].rows
    assert len(all_rows) == 4


def test_it_says_so_when_no_node_has_a_problem(viewer_client, cluster, make_run) -> None:
    run = make_run(cluster)
    html = viewer_client.get(reverse("runs:run_detail", args=[run.pk]), {"problems": "1"}).content.decode()
    assert "No problem nodes." in html


def test_it_shows_a_results_evidence_escaped(viewer_client, cluster, make_run) -> None:
    run = make_run(cluster)
    result = set_result(
        run,
        "n02",
        "ecc-health",
        "fail",
        "GPU 5: 3 uncorrectable <b>ECC</b> errors",
        command="python3 - < probe.py",
        stdout='{"gpus": []}\n<script>alert("pwned")</script>\n',
        stderr="warning: <img src=x onerror=alert(1)>",
        exit_code=0,
        duration_s=1.25,
    )
    add_measurement(result, "ecc_uncorrectable_volatile", value=3, unit="errors", gpu=5, threshold="<= 0", ok=False)
    add_measurement(result, "ecc_mode", text="Enabled", gpu=5, ok=True)
    add_measurement(result, "gpu_count", value=8, ok=True)

    response = viewer_client.get(reverse("runs:result_detail", args=[result.pk]))

    html = response.content.decode()
    assert response.status_code == 200
    node_table = html[html.index('id="node-measurements"') : html.index('id="gpu-measurements"')]
    assert "<td>gpu_count</td>" in node_table and "<td>8</td>" in node_table
    gpu_table = html[html.index('id="gpu-measurements"') : html.index("<h2>Command</h2>")]
    assert "<th>ecc_uncorrectable_volatile</th>" in gpu_table and "<th>ecc_mode</th>" in gpu_table
    assert "<td>5</td>" in gpu_table  # the GPU's row
    assert ">3 errors</td>" in gpu_table and "bad" in gpu_table
    assert "&lt;= 0" in gpu_table and ">Enabled</td>" in gpu_table
    assert "GPU 5: 3 uncorrectable &lt;b&gt;ECC&lt;/b&gt; errors" in html
    assert "python3 - &lt; probe.py" in html
    assert "&lt;script&gt;alert(&quot;pwned&quot;)&lt;/script&gt;" in html
    assert '<script>alert("pwned")' not in html
    assert "<img src=x" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "exit code 0" in html


def test_a_measurement_taken_per_gpu_and_per_label_is_listed_with_its_labels(viewer_client, cluster, make_run) -> None:
    """A GPU's link to each NIC: several values of one name on one GPU have no single pivot cell."""
    run = make_run(cluster)
    result = set_result(run, "n02", "ecc-health", "pass", "8 GPUs")
    add_measurement(result, "gpu_nic_link", value=2, text="PIX", gpu=0, labels={"nic": "mlx5_0"})
    add_measurement(result, "gpu_nic_link", value=6, text="SYS", gpu=0, labels={"nic": "<b>mlx5_1</b>"})
    add_measurement(result, "gpu_numa_affinity", value=0, gpu=0)

    html = viewer_client.get(reverse("runs:result_detail", args=[result.pk])).content.decode()

    node_table = html[html.index('id="node-measurements"') : html.index('id="gpu-measurements"')]
    assert "GPU 0 nic=mlx5_0" in node_table and "GPU 0 nic=&lt;b&gt;mlx5_1&lt;/b&gt;" in node_table
    gpu_table = html[html.index('id="gpu-measurements"') : html.index("<h2>Command</h2>")]
    assert "<th>gpu_numa_affinity</th>" in gpu_table and "gpu_nic_link" not in gpu_table


def test_it_answers_404_for_missing_objects(viewer_client, cluster) -> None:
    assert viewer_client.get(reverse("inventory:cluster_detail", args=["nope"])).status_code == 404
    assert viewer_client.get(reverse("runs:run_detail", args=[999999])).status_code == 404
    assert viewer_client.get(reverse("runs:result_detail", args=[999999])).status_code == 404


def _cluster_with_run(name: str, size: int, make_run):
    cluster = Cluster.objects.create(name=name, profile="H100-SXM-8", transport="local")
    Node.objects.bulk_create(Node(cluster=cluster, hostname=f"{name}n{i:03d}") for i in range(size))
    run = make_run(cluster)
    set_result(run, f"{name}n000", "ecc-health", "fail", "GPU 0: ECC")
    set_result(run, f"{name}n001", "gpu-inventory", "pass")
    return run


def test_it_reads_the_run_page_in_a_constant_number_of_queries(
    viewer_client, make_run, django_assert_max_num_queries
) -> None:
    small = _cluster_with_run("small", 10, make_run)
    large = _cluster_with_run("large", 100, make_run)
    url = reverse("runs:run_detail", args=[small.pk])
    viewer_client.get(url)  # warm the session and anything cached per process
    with CaptureQueriesContext(connection) as small_queries:
        assert viewer_client.get(url).status_code == 200
    assert len(small_queries) < 15

    with django_assert_max_num_queries(len(small_queries)):
        response = viewer_client.get(reverse("runs:run_detail", args=[large.pk]))
    assert response.status_code == 200
    assert len(response.context["grid"].rows) == 100
    assert response.content.decode().count('class="cell ') >= 200
