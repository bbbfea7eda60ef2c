"""Chart pages and endpoints on seeded results: what they show, what they export, who may see them,
and query counts that do not grow with the node count."""

from __future__ import annotations

import csv
import io
import json

import plotly.graph_objects as go
import pytest
from django.core.cache import cache
from django.urls import reverse
from django.utils import timezone

from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem
from portal.inventory.models import Cluster, Node
from portal.runs import services
from portal.runs.models import CheckResult, Run, Series
from portal.runs.packing import pack
from tests.portal.helpers import add_measurement, set_result

pytestmark = pytest.mark.django_db

SLUGS = ["nccl-allreduce", "burn-in", "dlc-temperature", "fs-throughput", "ecc-health", "fs-aggregate"]
SIZES = [float(2**e) for e in range(20, 31)]


@pytest.fixture(autouse=True)
def _clear_cache():
    cache.clear()


@pytest.fixture
def chart_plan(db) -> TestPlan:
    plan = TestPlan.objects.create(slug="charts", name="Charts test plan")
    for order, slug in enumerate(SLUGS):
        TestPlanItem.objects.create(plan=plan, check_definition=CheckDefinition.objects.get(slug=slug), order=order)
    return plan


def make_cluster(size: int) -> Cluster:
    cluster = Cluster.objects.create(name=f"big{size}", profile="H100-SXM-8", transport="local")
    Node.objects.bulk_create(
        Node(cluster=cluster, hostname=f"g{i:03d}", rack=f"R{(i - 1) // 8 + 1}" if i % 10 else "", position=str(i % 8))
        for i in range(1, size + 1)
    )
    return cluster


def seed(run: Run, *, slow: str = "") -> None:
    """Every node: an NCCL curve and peak, burn-in Gflop/s per GPU, an fs result; the aggregate."""
    finished = timezone.now()
    for result in CheckResult.objects.filter(run=run).select_related("node"):
        host = result.node.hostname
        factor = 0.8 if host == slow else 1.0
        result.status, result.finished_at = "pass", finished
        if result.kind == "nccl_allreduce":
            Series.objects.create(result=result, name="busbw", unit="GB/s", x_unit="B", x=SIZES,
                                  y=[factor * 47 * i for i in range(11)])  # fmt: skip
            add_measurement(result, "busbw_peak", value=factor * 470 + len(host) % 3, unit="GB/s", threshold=">= 460")
        elif result.kind == "burn_in":
            for gpu in range(8):
                add_measurement(result, "gflops", value=factor * 100_000 + gpu, unit="Gflop/s", gpu=gpu)
                add_measurement(result, "temp_max", value=70.0 + gpu, unit="C", gpu=gpu)
        elif result.kind == "fs_throughput":
            add_measurement(result, "write_bw_sum", value=factor * 5e9, unit="B/s", threshold=">= 2 GB/s")
            add_measurement(result, "read_bw_sum", value=6e9, unit="B/s")
            add_measurement(result, "write_bw", value=5e9, unit="B/s", labels={"job": "seqwrite"})
        elif result.kind == "fs_aggregate":
            add_measurement(result, "aggregate_write_bw", value=4e10, unit="B/s", labels={"nodes": "4"})
            for node in run.cluster.nodes.all():
                add_measurement(
                    result,
                    "write_bw_sum",
                    value=4.5e9,
                    unit="B/s",
                    labels={"host": node.hostname, "node": node.hostname},
                )
        result.save()


@pytest.fixture
def viewer(client, make_user):
    client.force_login(make_user("vera", "viewer"))
    return client


@pytest.fixture
def run(cluster, chart_plan) -> Run:
    run = services.run_start(cluster=cluster, plan=chart_plan, enqueue=False)
    seed(run, slow="n03")
    return run


def result_of(run: Run, kind: str, host: str = "n01") -> CheckResult:
    return CheckResult.objects.get(run=run, kind=kind, node__hostname=host)


def no_cdn(html: str) -> None:
    assert "cdn" not in html.lower()
    assert 'src="https://' not in html and 'src="http://' not in html


# --- result pages -------------------------------------------------------------------------------------


def test_it_draws_the_nccl_curve_with_the_plans_floor(viewer, run) -> None:
    result = result_of(run, "nccl_allreduce")

    page = viewer.get(reverse("runs:result_detail", args=[result.pk])).content.decode()
    figure = viewer.get(reverse("charts:result_figure", args=[result.pk])).json()

    assert reverse("charts:result_figure", args=[result.pk]) in page
    assert reverse("plotly_js") in page
    no_cdn(page)
    assert [t["name"] for t in figure["data"]] == ["n01"]
    assert figure["data"][0]["x"] == SIZES
    assert figure["layout"]["xaxis"]["type"] == "log"
    floor = run.plan_snapshot["items"][0]["thresholds"]["min_busbw_gbps"]
    assert [s["y0"] for s in figure["layout"]["shapes"]] == [floor]


def test_it_draws_one_line_per_labelled_pair_of_a_group_result(viewer, run) -> None:
    result = result_of(run, "fs_aggregate")  # any group result will do for the curve naming
    result.kind = "nccl_allreduce_multi"
    result.save()
    for pair in ("n01,n02", "n03,n04"):
        Series.objects.create(result=result, name="busbw", x=SIZES[:2], y=[1.0, 2.0], labels={"pair": pair})

    figure = viewer.get(reverse("charts:result_figure", args=[result.pk])).json()

    assert [t["name"] for t in figure["data"]] == ["pair n01,n02", "pair n03,n04"]


def burn_in_series(result: CheckResult, points: int) -> None:
    x = [float(t) for t in range(points)]
    rows = []
    for gpu in range(8):
        for name, base in (("temp_gpu", 60.0), ("temp_memory", 65.0), ("power_w", 600.0), ("sm_clock_mhz", 1980.0)):
            y = [base + (t % 7) for t in range(points)]
            if name == "temp_gpu" and gpu == 2:
                y[points // 2] = 95.0  # a one-sample spike
            rows.append(Series(result=result, name=name, gpu=gpu, x=x, y=y))
    Series.objects.bulk_create(rows)


def test_it_downsamples_a_day_of_burn_in_and_keeps_spikes_throttles_and_the_slowdown(viewer, run) -> None:
    result = result_of(run, "burn_in")
    burn_in_series(result, 86_400)
    add_measurement(result, "throttle_event", value=5, gpu=2, text="hw_thermal_slowdown",
                    labels={"start_t": "43200", "end_t": "43205"})  # fmt: skip
    add_measurement(result_of(run, "dlc_temperature"), "slowdown_temp", value=87.0, gpu=0)

    response = viewer.get(reverse("charts:result_figure", args=[result.pk]))

    figure = response.json()
    lines = [t for t in figure["data"] if t["mode"] == "lines"]
    assert len(lines) == 24  # temperature, power, SM clock x 8 GPUs
    assert all(len(t["x"]) <= 1500 for t in lines)
    assert figure["meta"] == {"stored_points": 24 * 86_400, "drawn_points": sum(len(t["x"]) for t in lines)}
    gpu2_temp = next(t for t in lines if t["name"] == "GPU 2" and t["yaxis"] == "y")
    assert 95.0 in gpu2_temp["y"]
    assert (gpu2_temp["x"][0], gpu2_temp["x"][-1]) == (0, 86_399)
    shapes = figure["layout"]["shapes"]
    assert any(s["type"] == "line" and s["y0"] == 87.0 for s in shapes)
    assert any(s["type"] == "rect" and s["x0"] == 43200.0 for s in shapes)
    assert len(response.content) < 1_000_000


def test_it_draws_the_nodes_bmc_power_in_its_own_panel_when_sampled(viewer, run) -> None:
    result = result_of(run, "burn_in")
    burn_in_series(result, 60)
    add_measurement(result, "throttle_event", value=5, gpu=2, text="hw_slowdown", labels={"start_t": "3", "end_t": "8"})
    before = viewer.get(reverse("charts:result_figure", args=[result.pk])).json()
    Series.objects.create(result=result, name="node_power", unit="W", gpu=None, x=[0.0, 1.0, 2.0],
                          y=[None, 6843.0, 6851.0])  # fmt: skip
    result.finished_at = None  # a new figure, not the cached one
    result.save()

    figure = viewer.get(reverse("charts:result_figure", args=[result.pk])).json()

    assert {t["yaxis"] for t in before["data"] if t["mode"] == "lines"} == {"y", "y2", "y3"}  # none: 3 panels
    node = [t for t in figure["data"] if t.get("name") == "node"]
    assert [(t["yaxis"], t["y"], t["showlegend"]) for t in node] == [("y3", [None, 6843.0, 6851.0], True)]
    titles = [a["text"] for a in figure["layout"]["annotations"] if a.get("text", "").endswith(")")]
    assert titles[:4] == ["GPU temperature (C)", "Power (W)", "Node power (BMC) (W)", "SM clock (MHz)"]
    [marker] = [t for t in figure["data"] if t["name"] == "throttle"]
    assert marker["yaxis"] == "y4"  # still on the clock panel


def test_it_draws_a_stored_series_from_its_downsampled_view(viewer, run) -> None:
    result = result_of(run, "burn_in")
    n = 20_000
    row = Series(
        result=result, name="temp_gpu", gpu=0, x=[float(t) for t in range(n)], y=[60.0 + t % 5 for t in range(n)]
    )
    row.save()  # the view (VIEW_POINTS, LTTB) is made when the points are stored
    assert 0 < len(row.view()[0]) <= 1500
    # The chart reads the view alone: without its full points the series is drawn the same.
    Series.objects.filter(pk=row.pk).update(x_packed=pack([]), y_packed=pack([]))

    figure = viewer.get(reverse("charts:result_figure", args=[result.pk])).json()

    line = next(t for t in figure["data"] if t["mode"] == "lines" and t["name"] == "GPU 0")
    assert line["x"][0] == 0 and line["x"][-1] == n - 1 and len(line["x"]) <= 1500
    assert figure["meta"]["stored_points"] == n


def test_it_exports_every_point_of_every_series(viewer, run) -> None:
    result = result_of(run, "burn_in")
    burn_in_series(result, 3_000)
    Series.objects.filter(result=result, name="power_w", gpu=1).update(y_packed=pack([None] + [600.0] * 2_999))

    csv_response = viewer.get(reverse("charts:series_csv", args=[result.pk]))
    json_response = viewer.get(reverse("charts:series_json", args=[result.pk]))

    assert csv_response.streaming and csv_response["Content-Type"] == "text/csv"
    rows = list(csv.reader(io.StringIO(b"".join(csv_response.streaming_content).decode())))
    assert rows[0] == ["series", "gpu", "labels", "x", "x_unit", "y", "unit"]
    assert len(rows) == 1 + 32 * 3_000
    assert ["power_w", "1", "", "0.0", "s", "", ""] in rows[:20_000]  # an unreadable sample stays empty
    doc = json.loads(b"".join(json_response.streaming_content))
    assert len(doc["series"]) == 32
    assert all(len(s["x"]) == len(s["y"]) == 3_000 for s in doc["series"])
    assert doc["node"] == "n01" and "attachment" in json_response["Content-Disposition"]


def test_it_draws_dlc_idle_and_load_per_gpu(viewer, run) -> None:
    result = result_of(run, "dlc_temperature")
    for gpu, (idle, load) in enumerate([(30.0, 60.0), (31.0, 61.0), (32.0, 80.0)]):
        add_measurement(result, "temp_gpu_steady", value=idle, gpu=gpu, labels={"phase": "idle"})
        add_measurement(result, "temp_gpu_steady", value=load, gpu=gpu, labels={"phase": "load"})
        add_measurement(result, "slowdown_temp", value=87.0, gpu=gpu)

    figure = viewer.get(reverse("charts:result_figure", args=[result.pk])).json()

    idle, load, slowdown, delta = figure["data"][:4]
    assert idle["y"] == [30.0, 31.0, 32.0] and load["y"] == [60.0, 61.0, 80.0]
    assert slowdown["y"] == [87.0, 87.0, 87.0]
    assert delta["y"] == [-10.5, -9.0, 19.5]  # load minus the median of the other GPUs


def test_it_shows_ecc_counts_per_gpu_and_xid_events_escaped(viewer, run) -> None:
    result = result_of(run, "ecc_health")
    add_measurement(result, "ecc_volatile_uncorrected", value=2, gpu=5, threshold="<= 0", ok=False)
    add_measurement(result, "ecc_volatile_uncorrected", value=0, gpu=4)
    add_measurement(result, "xid", value=79, gpu=5, text="GPU has fallen off the bus <b>x</b>",
                    labels={"severity": "critical", "time": "2025-01-01T00:00:00", "pci": "0000:b5:00.0"})  # fmt: skip
    add_measurement(result, "sxid", value=20034, text="Fatal, Link 48 LTSSM Fault Up",
                    labels={"kind": "sxid", "severity": "critical", "pci": "0000:06:00"})  # fmt: skip

    page = viewer.get(reverse("runs:result_detail", args=[result.pk])).content.decode()
    table = viewer.get(reverse("charts:result_ecc", args=[result.pk])).content.decode()

    assert reverse("charts:result_ecc", args=[result.pk]) in page
    assert "volatile uncorr." in table
    assert 'class="num bad"' in table
    assert "XID 79" in table and "critical" in table and "2025-01-01T00:00:00" in table
    assert "SXID 20034" in table and "Fatal, Link 48 LTSSM Fault Up" in table and "Xid events (2)" in table
    assert "&lt;b&gt;x&lt;/b&gt;" in table and "<b>x</b>" not in table
    assert viewer.get(reverse("charts:result_figure", args=[result.pk])).status_code == 404


def test_it_embeds_the_runs_filesystem_chart_on_an_fs_result(viewer, run) -> None:
    result = result_of(run, "fs_throughput")

    page = viewer.get(reverse("runs:result_detail", args=[result.pk])).content.decode()

    assert reverse("charts:run_filesystem_figure", args=[run.pk]) in page


def test_each_result_page_shows_its_declared_familys_section(viewer, run) -> None:
    def page(kind: str) -> str:
        return viewer.get(reverse("runs:result_detail", args=[result_of(run, kind).pk])).content.decode()

    nccl, burn, dlc = page("nccl_allreduce"), page("burn_in"), page("dlc_temperature")
    for kind, html in (("nccl_allreduce", nccl), ("burn_in", burn), ("dlc_temperature", dlc)):
        assert reverse("charts:result_figure", args=[result_of(run, kind).pk]) in html
    assert f"{reverse('charts:run_nccl', args=[run.pk])}?check=nccl-allreduce" in nccl  # every node's curve
    assert "shaded: throttle events" in burn and reverse("charts:run_nccl", args=[run.pk]) not in burn
    assert reverse("charts:run_nccl", args=[run.pk]) not in dlc


# --- run pages ------------------------------------------------------------------------------------------


def test_it_draws_filesystem_bars_per_node_against_the_floors(viewer, run) -> None:
    response = viewer.get(reverse("charts:run_filesystem", args=[run.pk]))

    figure = response.context["figure"]
    bars = {t["name"]: t for t in figure["data"]}
    assert bars["write (alone)"]["x"] == ["n01", "n02", "n03", "n04"]
    assert bars["write (alone)"]["y"] == [5.0, 5.0, 4.0, 5.0]
    assert bars["write (all nodes at once)"]["y"] == [4.5] * 4
    assert bars["aggregate"]["y"][0] == 40.0
    floors = run.plan_snapshot["items"][3]["thresholds"]
    assert {s["y0"] for s in figure["layout"]["shapes"]} >= {floors["min_write_gbps"], floors["min_read_gbps"]}
    html = response.content.decode()
    assert 'id="chart-figure"' in html
    no_cdn(html)


def test_it_draws_every_nodes_nccl_curve_of_the_run(viewer, run) -> None:
    response = viewer.get(reverse("charts:run_nccl", args=[run.pk]) + "?check=nccl-allreduce")

    figure = response.context["figure"]
    assert [t["name"] for t in figure["data"]] == ["n01", "n02", "n03", "n04"]
    assert figure["data"][0]["customdata"][0] == reverse(
        "runs:result_detail", args=[result_of(run, "nccl_allreduce").pk]
    )


def test_it_labels_the_straggler_in_the_fleet_distribution(viewer, chart_plan) -> None:
    cluster = make_cluster(12)
    run = services.run_start(cluster=cluster, plan=chart_plan, enqueue=False)
    seed(run, slow="g007")

    response = viewer.get(reverse("charts:run_distribution", args=[run.pk]) + "?check=nccl-allreduce&metric=busbw_peak")

    dist = response.context["dist"]
    assert [p.node for p in dist.outliers] == ["g007"]
    figure = response.context["figure"]
    assert figure["data"][-1]["text"] == ["g007"]
    html = response.content.decode()
    assert '<table id="outliers">' in html and "<td>g007</td>" in html
    assert 'value="nccl-allreduce|busbw_peak|" selected' in html  # the picker shows the choice


def test_it_reduces_per_gpu_metrics_per_node_or_shows_every_gpu(viewer, run) -> None:
    url = reverse("charts:run_distribution", args=[run.pk])

    per_node = viewer.get(url + "?pick=burn-in|gflops|").context["dist"]
    per_gpu = viewer.get(url + "?check=burn-in&metric=gflops&per=gpu").context["dist"]
    temps = viewer.get(url + "?check=burn-in&metric=temp_max").context["dist"]

    assert per_node.aggregate == "min"
    assert {p.node: p.value for p in per_node.points}["n03"] == 80_000.0
    assert len(per_gpu.points) == 32 and per_gpu.points[0].gpu == 0
    assert temps.aggregate == "max" and {p.value for p in temps.points} == {77.0}


def test_it_counts_group_measurements_for_the_node_they_name(viewer, run) -> None:
    url = reverse("charts:run_distribution", args=[run.pk]) + "?check=fs-aggregate&metric=write_bw_sum"

    dist = viewer.get(url).context["dist"]

    assert sorted(p.node for p in dist.points) == ["n01", "n02", "n03", "n04"]


@pytest.mark.parametrize(
    ("item_key", "metric", "how"),
    [("burn-in", "gflops", "min"), ("burn-in", "temp_max", "max"), ("ecc-health", "ecc_aggregate_uncorrected", "sum"),
     ("fs-throughput", "write_bw_sum", ""), ("fs-aggregate", "write_bw_sum", "")],
)  # fmt: skip
def test_each_nodes_point_is_folded_in_sql_as_its_rows_say(run, item_key: str, metric: str, how: str) -> None:
    from portal.charts.selectors import run_distribution, run_metric_values

    for result in CheckResult.objects.filter(run=run, kind="ecc_health").select_related("node"):
        for gpu in range(4):
            add_measurement(result, "ecc_aggregate_uncorrected", value=float(gpu * len(result.node.hostname)), gpu=gpu)
    burn = result_of(run, "burn_in", "n02")
    add_measurement(burn, "gflops", value=100_000.0, unit="Gflop/s", gpu=9)  # as low as GPU 0: GPU 0 is named

    dist = run_distribution(run=run, item_key=item_key, metric=metric)

    rows = run_metric_values(run=run, item_key=item_key, metric=metric)
    assert rows and not any(r["node"] is None for r in rows)
    by_node: dict[str, list[tuple[float, int | None]]] = {}
    for r in rows:
        by_node.setdefault(r["node"], []).append((r["value"], r["gpu"]))
    if how == "sum":
        expected = {node: (sum(v for v, _ in got), None) for node, got in by_node.items()}
    elif how:
        pick = min if how == "min" else max
        expected = {node: pick(sorted(got, key=lambda v: v[1]), key=lambda v: v[0]) for node, got in by_node.items()}
    else:
        expected = {node: got[0] for node, got in by_node.items()}
    assert dist.aggregate == how
    assert {p.node: (p.value, p.gpu) for p in dist.points} == expected
    assert [p.node for p in dist.points] == ["n01", "n02", "n03", "n04"]
    assert "job" not in str(rows) and len(rows) == sum(len(v) for v in by_node.values())


def test_it_says_so_when_the_metric_is_unknown(viewer, run) -> None:
    response = viewer.get(reverse("charts:run_distribution", args=[run.pk]) + "?check=nope&metric=nothing")

    assert response.status_code == 200
    assert response.context["figure"] is None
    assert 'id="chart-empty"' in response.content.decode()


def test_it_places_nodes_in_racks_coloured_by_worst_status(viewer, cluster, run) -> None:
    Node.objects.filter(hostname="n04").update(rack="", position="")
    Node.objects.filter(hostname="n02").update(position="7")
    set_result(run, "n02", "ecc-health", "fail", "GPU 1: 3 uncorrectable ECC errors")
    group = result_of(run, "fs_aggregate")
    group.attribution = {"n03": {"status": "error", "reason": "no fio results"}}
    group.save()

    response = viewer.get(reverse("charts:run_rack", args=[run.pk]))

    heat = response.context["figure"]["data"][0]
    cells = {
        heat["text"][i][j]: (heat["x"][j], heat["y"][i], heat["z"][i][j], heat["customdata"][i][j])
        for i in range(len(heat["y"]))
        for j in range(len(heat["x"]))
        if heat["text"][i][j]
    }
    from portal.charts.figures import STATUS_ORDER

    assert cells["n02"][:3] == ("R1", "7", STATUS_ORDER.index("fail"))
    # The history app is installed, so a cell opens the node's history page (not the result fallback).
    assert cells["n02"][3] == reverse("history:node_detail", args=[cluster.name, "n02"])
    assert cells["n03"][2] == STATUS_ORDER.index("error")  # from the group result's attribution
    assert cells["n01"][2] == STATUS_ORDER.index("pass")
    assert cells["n04"][0] == "unracked"


def test_a_heatmap_cell_links_the_node_page_as_reverse_would(cluster) -> None:
    from portal.charts.selectors.rack import node_results_url_maker

    url = node_results_url_maker(cluster=cluster.name)
    for hostname in ["n01", "gpu-a.b_c~d", "n:01@x", "nöd é", "a+b&c=d;e,f", "100%"]:
        assert url(hostname, 7) == reverse("history:node_detail", args=[cluster.name, hostname]), hostname


def test_it_colours_racks_by_a_metric(viewer, run) -> None:
    response = viewer.get(reverse("charts:run_rack", args=[run.pk]) + "?metric=nccl-allreduce:busbw_peak")

    heat = response.context["figure"]["data"][0]
    values = sorted(v for row in heat["z"] for v in row if v is not None)
    assert len(values) == 4 and values[0] < 400
    assert heat["colorscale"]  # continuous
    assert 'value="nccl-allreduce:busbw_peak" selected' in response.content.decode()


def test_it_links_the_run_page_to_the_charts_with_data(viewer, run) -> None:
    page = viewer.get(reverse("runs:run_detail", args=[run.pk])).content.decode()
    links = viewer.get(reverse("charts:run_links", args=[run.pk])).content.decode()

    assert reverse("charts:run_links", args=[run.pk]) in page
    assert reverse("charts:run_nccl", args=[run.pk]) + "?check=nccl-allreduce" in links
    assert reverse("charts:run_filesystem", args=[run.pk]) in links
    assert reverse("charts:run_distribution", args=[run.pk]) in links
    assert reverse("charts:run_rack", args=[run.pk]) in links


def test_it_leaves_out_links_to_charts_without_data(viewer, cluster, make_run) -> None:
    run = make_run(cluster)  # gpu inventory and ECC only

    links = viewer.get(reverse("charts:run_links", args=[run.pk])).content.decode()

    assert "nccl" not in links and "filesystem" not in links


@pytest.mark.parametrize("size", [4, 40])
def test_it_keeps_run_chart_queries_constant_in_the_node_count(
    viewer, chart_plan, django_assert_max_num_queries, size
) -> None:
    cluster = make_cluster(size)
    run = services.run_start(cluster=cluster, plan=chart_plan, enqueue=False)
    seed(run, slow="g002")
    urls = [
        reverse("charts:run_filesystem", args=[run.pk]),
        reverse("charts:run_filesystem_figure", args=[run.pk]),
        reverse("charts:run_nccl", args=[run.pk]) + "?check=nccl-allreduce",
        reverse("charts:run_distribution", args=[run.pk]),
        reverse("charts:run_distribution", args=[run.pk]) + "?check=burn-in&metric=gflops&per=gpu",
        reverse("charts:run_rack", args=[run.pk]),
        reverse("charts:run_rack", args=[run.pk]) + "?metric=burn-in:gflops",
        reverse("charts:run_links", args=[run.pk]),
    ]
    for url in urls:
        # 12: these measurements were written directly, so the picker finds no RunMetric list and
        # reads them once more (a recorded run reads the list instead: test_run_metrics.py); the
        # rack reads the cluster's nodes, node results and group results apart (lean rows).
        with django_assert_max_num_queries(12):
            response = viewer.get(url)
        assert response.status_code == 200, url
        if response.context and response.context.get(
            "figure"
        ):  # traces built as plain data: plotly accepts them as they are
            go.Figure(response.context["figure"])


def test_it_keeps_figures_small_at_forty_nodes(viewer, chart_plan) -> None:
    cluster = make_cluster(40)
    run = services.run_start(cluster=cluster, plan=chart_plan, enqueue=False)
    seed(run)

    for name in ("charts:run_filesystem", "charts:run_rack", "charts:run_distribution"):
        figure = viewer.get(reverse(name, args=[run.pk])).context["figure"]
        assert len(json.dumps(figure)) < 40_000, name


# --- access -------------------------------------------------------------------------------------------


def chart_urls(run: Run) -> list[str]:
    nccl, burn, ecc = (result_of(run, k) for k in ("nccl_allreduce", "burn_in", "ecc_health"))
    return [
        reverse("charts:result_figure", args=[nccl.pk]),
        reverse("charts:result_figure", args=[burn.pk]),
        reverse("charts:result_ecc", args=[ecc.pk]),
        reverse("charts:series_csv", args=[burn.pk]),
        reverse("charts:series_json", args=[burn.pk]),
        reverse("charts:run_links", args=[run.pk]),
        reverse("charts:run_filesystem", args=[run.pk]),
        reverse("charts:run_filesystem_figure", args=[run.pk]),
        reverse("charts:run_nccl", args=[run.pk]) + "?check=nccl-allreduce",
        reverse("charts:run_distribution", args=[run.pk]),
        reverse("charts:run_rack", args=[run.pk]),
        reverse("charts:cluster_capacity", args=[run.cluster.name]),
    ]


def test_it_covers_every_chart_url(run) -> None:
    from portal.charts.urls import urlpatterns

    covered = {u.split("?")[0] for u in chart_urls(run)}
    assert len(covered) == len(urlpatterns) + 1  # the figure endpoint serves two kinds here


def test_it_redirects_anonymous_users_to_login(client, run) -> None:
    for url in chart_urls(run):
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith("/login/?next="), url


def test_it_forbids_users_without_a_role(client, make_user, run) -> None:
    client.force_login(make_user("nobody"))
    for url in chart_urls(run):
        assert client.get(url).status_code == 403, url


def test_it_lets_a_viewer_see_every_chart(viewer, run) -> None:
    for url in chart_urls(run):
        assert viewer.get(url).status_code == 200, url
