"""The cluster's capacity page: the latest finished heat soak (or an earlier one of the same cluster),
racks on a floor plan against their budgets, PDU phases, UPS, loops and nodes, each with its verdict;
login and roles, escaping of names from the facility model, and a query count that does not grow with
the nodes."""

from __future__ import annotations

import html
import json
import re

import pytest
from django.test import Client

from checks.core.presentation import SUBJECT_VERDICT
from portal.charts import views
from portal.inventory.models import Cluster
from portal.runs.models import CheckResult, Measurement
from tests.checks.soak_builder import Soak
from tests.portal.capacity_helpers import record_soak, soak_cluster

FAULTS = Soak(over_drawing="gpu03", mis_cabled="pdu-r2-a", low_flow=True, ups_capacity_w=90_000.0)


@pytest.fixture
def dc1(db) -> Cluster:
    return soak_cluster()


@pytest.fixture
def viewer(client: Client, make_user) -> Client:
    client.force_login(make_user("victor", "viewer"))
    return client


def page(client: Client, cluster: str = "dc1", query: str = "") -> str:
    response = client.get(f"/clusters/{cluster}/capacity/{query}")
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def text_of(body: str) -> str:
    """The page's visible text, tags removed and whitespace folded."""
    body = re.sub(r"<script.*?</script>", " ", body, flags=re.S)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", body)))


def row(body: str, table: str, first_cell: str) -> str:
    """The text of the row of `table` whose first cell is `first_cell`."""
    section = body.split(f'id="{table}"', 1)[1].split("</table>", 1)[0]
    for tr in section.split("<tr>")[1:]:
        cells = text_of(tr).strip()
        if cells.startswith(first_cell + " "):
            return cells
    raise AssertionError(f"no row {first_cell!r} in #{table}")


def test_it_shows_the_latest_soak_with_each_subject_and_its_verdict(dc1, viewer):
    record_soak(dc1)
    faulty = record_soak(dc1, FAULTS)
    body = page(viewer)
    assert f"result #{faulty.pk}" in text_of(body)
    assert 'id="capacity-verdict">fail<' in body
    # The floor plan states each rack's peak against its budget in words, not colour alone.
    plan = text_of(body.split('id="floor-plan"', 1)[1].split('id="racks"', 1)[0])
    assert re.search(r"r1 \d+\.\d\d kW of 40\.00 kW \(\d+%\) pass", plan), plan
    assert "band-ok" in body
    assert row(body, "phases", "pdu-r2-a").startswith("pdu-r2-a r2 A 1 ")
    phase2 = [r for r in body.split('id="phases"')[1].split("</table>")[0].split("<tr>") if ">2</td>" in r]
    assert any("fail" in text_of(r) and "54.1 A" in text_of(r) and "&lt;= 50.4 A" in r for r in phase2)
    assert re.search(r"ups1 r1,r2,r3 90\.00 kW \d+\.\d\d kW >= \d+ W fail UPS ups1: capacity", row(body, "ups", "ups1"))
    loop = row(body, "loops", "cdu1")
    assert "55%" in loop and ">= 0.8" in loop and " fail " in loop
    nodes = body.split('id="nodes"', 1)[1].split("</table>", 1)[0]
    first = text_of(nodes.split("<tr>")[2])
    assert first.strip().startswith("gpu03 r1") and " fail " in first, "the worst node first"
    assert " pass " in row(body, "feeds", "r1")
    charts = json.loads(re.search(r'<script id="history-charts" type="application/json">(.*?)</script>', body, re.S)[1])
    assert [c["div"] for c in charts] == ["capacity-power", "capacity-phases", "capacity-loops"]
    power = charts[0]["figure"]
    assert power["data"][0]["name"] == "cluster power" and len(power["data"][0]["x"]) == 120
    lines = sorted(s["y0"] for s in power["layout"]["shapes"])
    assert lines == [75.0, 90.0], "UPS capacity and capacity / 1.2"


def test_it_shows_an_earlier_soak_of_the_same_cluster_only(dc1, viewer):
    healthy = record_soak(dc1)
    record_soak(dc1, FAULTS)
    other = record_soak(soak_cluster("dc2"))
    body = page(viewer, query=f"?result={healthy.pk}")
    assert 'id="capacity-verdict">pass<' in body
    assert f'<option value="{healthy.pk}" selected>' in body, "the picker offers both soaks"
    for query in (f"?result={other.pk}", "?result=abc", "?result=99999999999999999999999", "?result=-1"):
        assert viewer.get(f"/clusters/dc1/capacity/{query}").status_code == 404, query
    assert viewer.get("/clusters/nope/capacity/").status_code == 404


def test_it_says_how_to_run_a_soak_when_there_is_none(dc1, viewer):
    body = page(viewer)
    words = text_of(body)
    assert "No power and cooling soak has finished on this cluster yet" in words
    assert "<b>Power and cooling</b> (<code>power-cooling</code>)" in body
    assert "kiln run dc1 power-cooling --wait" in words
    assert "history-charts" not in body


def test_it_needs_a_login_and_lets_every_role_read(dc1, client, make_user):
    record_soak(dc1)
    response = client.get("/clusters/dc1/capacity/")
    assert response.status_code == 302 and "/login/" in response["Location"]
    client.force_login(make_user("nobody"))
    assert client.get("/clusters/dc1/capacity/").status_code == 403
    for name, role in (("v", "viewer"), ("o", "operator"), ("a", "approver")):
        client.force_login(make_user(name, role))
        assert client.get("/clusters/dc1/capacity/").status_code == 200, role


def test_it_escapes_names_from_the_facility_model(dc1, viewer):
    hostile = "<script>alert(1)</script>"
    record_soak(dc1, FAULTS, rename={"r1": hostile, "r2": '"><img src=x onerror=alert(2)>'}, loop_name=hostile)
    body = page(viewer)
    assert hostile not in body and "<img src=x" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    charts = re.search(r'<script id="history-charts" type="application/json">(.*?)</script>', body, re.S)[1]
    assert "<" not in charts, "json_script escapes every '<' of the figures"
    figure_text = json.dumps(json.loads(charts))
    assert "<script" not in figure_text and "&lt;script&gt;" in figure_text, "plotly renders names as HTML"


def test_it_reads_a_soak_in_the_same_queries_whatever_its_node_count(dc1, viewer, django_assert_max_num_queries):
    result = record_soak(dc1)
    viewer.get("/clusters/dc1/capacity/")  # sessions, content types: warm
    with django_assert_max_num_queries(30) as small:
        page(viewer)
    attribution = dict(result.attribution)
    extra = []
    for i in range(13, 400):
        host = f"gpu{i:03d}"
        attribution[host] = {"status": "pass", "reason": f"node {host}: fine"}
        extra += [Measurement(result=result, name=name, value=7000.0, unit="W", labels={"node": host, "rack": "r3"})
                  for name in ("node_peak_power_w", "node_steady_power_w", "node_non_gpu_power_w")]  # fmt: skip
    Measurement.objects.bulk_create(extra)
    CheckResult.objects.filter(pk=result.pk).update(attribution=attribution)
    with django_assert_max_num_queries(len(small.captured_queries)):
        body = page(viewer)
    assert "gpu399" in body


def test_it_lays_racks_out_by_room_row_and_position(dc1, viewer, monkeypatch):
    record_soak(dc1)
    calls = []

    def positions(*, cluster):
        calls.append(cluster.name)
        return {"r1": ("hall1", "A", 2), "r2": ("hall1", "A", 1), "r3": ("hall1", "B", 1), "r9": ("hall2", "C", 1)}

    monkeypatch.setattr(views, "RACK_POSITIONS", positions)
    body = page(viewer)
    assert calls == ["dc1"]
    floor = body.split('id="floor-plan"', 1)[1].split('id="racks"', 1)[0]
    rows = [text_of(tr) for tr in floor.split("<tr>")[1:]]
    assert rows[1].split()[:4] == ["row", "A", "r2", "28.16"], rows  # position 1 before position 2
    assert "Room hall2" in text_of(floor) and "r9 no peak no verdict" in text_of(floor)
    assert "racks in name order" not in text_of(body)


def test_it_lays_racks_out_in_name_order_without_positions(dc1, viewer):
    record_soak(dc1)
    floor = page(viewer).split('id="floor-plan"', 1)[1].split('id="racks"', 1)[0]
    assert re.findall(r'data-rack="([^"]+)"', floor) == ["r1", "r2", "r3"]


def test_it_is_linked_from_the_cluster_page_and_the_result(dc1, viewer):
    result = record_soak(dc1)
    assert 'href="/clusters/dc1/capacity/"' in viewer.get("/clusters/dc1/").content.decode()
    body = viewer.get(f"/results/{result.pk}/").content.decode()
    assert f'href="/clusters/dc1/capacity/?result={result.pk}"' in body


def test_it_records_a_verdict_row_for_every_subject_but_the_nodes(dc1):
    result = record_soak(dc1, FAULTS)
    rows = Measurement.objects.filter(result=result, name=SUBJECT_VERDICT)
    kinds = {}
    for m in rows:
        kinds.setdefault(m.labels["subject"], []).append(m.labels["status"])
        assert m.value is None and m.text.split(":")[0].endswith(m.labels["subject_name"])
    assert sorted(kinds) == ["feed", "loop", "pdu_phase", "rack", "ups"]
    assert kinds["ups"] == ["fail"] and kinds["loop"] == ["fail"] and len(kinds["pdu_phase"]) == 18


def _racks(cluster: Cluster, places: dict[str, tuple[str, str, int]]) -> None:
    from portal.facility.models import Rack

    Rack.objects.bulk_create(
        Rack(cluster=cluster, name=name, power_budget_kw=40, cooling_budget_kw=40, room=room, row=row, position=pos)
        for name, (room, row, pos) in places.items()
    )


def test_it_places_racks_where_the_facility_model_puts_them(dc1, viewer):
    record_soak(dc1)
    _racks(dc1, {"r1": ("hall1", "A", 0), "r2": ("hall1", "A", 0), "r3": ("hall1", "B", 3)})
    floor = page(viewer).split('id="floor-plan"', 1)[1].split('id="racks"', 1)[0]
    rows = [text_of(tr).split() for tr in floor.split("<tr>")[1:]]
    assert rows[0] == ["0", "3"], "the positions in use are the columns"
    assert rows[1][:3] == ["row", "A", "r1"] and "r2" in rows[1], "two racks on one spot are both shown"
    assert rows[2][:3] == ["row", "B", "r3"]


def test_it_lays_racks_out_by_name_when_no_position_was_entered(dc1, viewer):
    record_soak(dc1)
    _racks(dc1, {name: ("", "", 0) for name in ("r3", "r1", "r2")})  # the model's defaults
    body = page(viewer)
    assert "racks in name order" in text_of(body)
    floor = body.split('id="floor-plan"', 1)[1].split('id="racks"', 1)[0]
    assert re.findall(r'data-rack="([^"]+)"', floor) == ["r1", "r2", "r3"]
