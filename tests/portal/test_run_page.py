"""The run page at scale: ETA, the live poll that swaps only changed rows, the problem filter, and a
query count that is the same at 16 and 1,250 nodes."""

from __future__ import annotations

import re
import time
from datetime import timedelta
from urllib.parse import quote

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem
from portal.inventory.models import Cluster, Node
from portal.runs import selectors, services
from portal.runs.models import CheckResult, Run
from tests.portal.helpers import set_result

pytestmark = pytest.mark.django_db

EIGHT = [
    "gpu-inventory",
    "sw-consistency",
    "gpu-links",
    "ib-ports",
    "nccl-allreduce",
    "burn-in",
    "dlc-temperature",
    "ecc-health",
]


@pytest.fixture
def viewer_client(client, make_user):
    client.force_login(make_user("vera", "viewer"))
    return client


def started(run: Run, minutes_ago: float) -> Run:
    Run.objects.filter(pk=run.pk).update(status="running", started_at=timezone.now() - timedelta(minutes=minutes_ago))
    run.refresh_from_db()
    return run


# --- who may see it -----------------------------------------------------------------------------------


def test_it_sends_anonymous_users_to_login(client, cluster, make_run) -> None:
    url = reverse("runs:run_detail", args=[make_run(cluster).pk])
    for headers in ({}, {"HX-Request": "true"}):
        response = client.get(url + "?since=1", headers=headers)
        assert response.status_code == 302
        assert response["Location"] == f"/login/?next={quote(url + '?since=1')}"


def test_it_forbids_users_without_a_role(client, make_user, cluster, make_run) -> None:
    client.force_login(make_user("nobody"))
    url = reverse("runs:run_detail", args=[make_run(cluster).pk])
    assert client.get(url).status_code == 403
    assert client.get(url + "?since=1", headers={"HX-Request": "true"}).status_code == 403


# --- ETA ------------------------------------------------------------------------------------------------


def row(kind: str, status: str, n: int, seconds: float | None = None, scope: str = "node") -> dict:
    timed = n if seconds is not None else 0
    return {"kind": kind, "scope": scope, "status": status, "n": n, "seconds": seconds, "timed": timed}


def test_it_estimates_the_time_left_from_each_kinds_average_duration() -> None:
    # 10 s inventories and 100 s burn-ins: half the inventories and none of the burn-ins done in
    # 60 s. Counting checks alone would say 60 s more; weighting by duration says 1,100 s of work
    # done in 60 s... per node: 5 x 10 done, 5 x 10 + 10 x 100 left -> 60 x 1050 / 50.
    rows = [
        row("gpu_inventory", "pass", 5, seconds=50.0),
        row("gpu_inventory", "queued", 5),
        row("burn_in", "queued", 10),
    ]
    # burn_in has no duration yet: it counts at the average of the kinds seen (10 s)
    assert selectors.estimate_eta(elapsed_s=60, rows=rows) == pytest.approx(60 * (5 * 10 + 10 * 10) / 50)
    rows.append(row("burn_in", "pass", 1, seconds=100.0))
    rows[2] = row("burn_in", "queued", 9)
    assert selectors.estimate_eta(elapsed_s=60, rows=rows) == pytest.approx(60 * (5 * 10 + 9 * 100) / (50 + 100))


def test_it_adds_the_multi_node_checks_one_after_another() -> None:
    rows = [
        row("ecc_health", "pass", 8, seconds=16.0),
        row("ecc_health", "running", 8),
        row("fs_aggregate", "pass", 1, seconds=30.0, scope="group"),
        row("fs_aggregate", "queued", 1, scope="group"),
    ]
    assert selectors.estimate_eta(elapsed_s=40, rows=rows) == pytest.approx(40 + 30)
    # a multi-node kind not seen yet counts at the average of the kinds seen: (2 + 30) / 2
    rows.append(row("nccl_allreduce_multi", "queued", 1, scope="group"))
    assert selectors.estimate_eta(elapsed_s=40, rows=rows) == pytest.approx(40 + 30 + 16)


def test_it_has_no_eta_before_anything_finished() -> None:
    assert selectors.estimate_eta(elapsed_s=30, rows=[row("burn_in", "running", 4)]) is None
    assert selectors.estimate_eta(elapsed_s=None, rows=[row("burn_in", "pass", 4, seconds=4.0)]) is None
    # no durations recorded at all: every check weighs the same
    rows = [row("burn_in", "pass", 1), row("burn_in", "queued", 3)]
    assert selectors.estimate_eta(elapsed_s=30, rows=rows) == pytest.approx(90)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, ""),
        (3, "ETA ~5 s"),
        (42, "ETA ~40 s"),
        (170, "ETA ~3 min"),
        (3600, "ETA ~1 h"),
        (4830, "ETA ~1 h 20 min"),
    ],
)
def test_it_says_the_eta_the_way_a_person_would(seconds, text) -> None:
    assert selectors.eta_text(seconds) == text


def test_it_shows_the_eta_of_an_active_run(viewer_client, cluster, make_run) -> None:
    run = started(make_run(cluster), minutes_ago=3)
    for host in ("n01", "n02"):
        set_result(run, host, "gpu-inventory", "pass", duration_s=30.0)
        set_result(run, host, "ecc-health", "pass", duration_s=30.0)

    html = viewer_client.get(reverse("runs:run_detail", args=[run.pk])).content.decode()

    assert "4/8 checks (50%)" in html
    assert '<span id="run-eta">ETA ~3 min</span>' in html  # half done in 3 minutes, equal weights


def test_it_shows_no_eta_once_the_run_finished(viewer_client, cluster, make_run) -> None:
    run = make_run(cluster)
    services.run_cancel(run=run)
    assert 'id="run-eta"' not in viewer_client.get(reverse("runs:run_detail", args=[run.pk])).content.decode()


# --- the live poll ----------------------------------------------------------------------------------------


def test_it_polls_the_summary_for_the_rows_changed_since_the_last_answer(viewer_client, cluster, make_run) -> None:
    run = started(make_run(cluster), minutes_ago=5)
    long_ago = timezone.now() - timedelta(minutes=4)
    set_result(run, "n01", "gpu-inventory", "pass", "old news", started_at=long_ago, finished_at=long_ago)
    page = viewer_client.get(reverse("runs:run_detail", args=[run.pk])).content.decode()
    poll = re.search(r'<div id="run-summary" data-status="running" hx-get="([^"]+)" hx-trigger="every 2s"', page)
    assert poll, "the summary polls while the run is active"
    poll_url = poll.group(1).replace("&amp;", "&")
    assert re.fullmatch(rf"/runs/{run.pk}/\?since=\d+\.\d+&triaged=0-0-1", poll_url)  # no failure shown yet
    now = timezone.now()
    set_result(run, "n03", "ecc-health", "fail", "GPU 2: <b>ECC</b>", started_at=now, finished_at=now)

    response = viewer_client.get(poll_url, headers={"HX-Request": "true"})

    html = response.content.decode()
    assert "HX-Retarget" not in response.headers
    assert html.lstrip().startswith('<div id="run-summary"')
    assert 'id="grid"' not in html and 'id="run-grid"' not in html
    node = Node.objects.get(cluster=cluster, hostname="n03")
    assert (
        f'<template><tr id="node-{node.pk}" hx-swap-oob="true"><td><a href="/clusters/c1/nodes/n03/">n03</a></td>'
        in html
    )
    assert html.count("<tr id=") == 1  # n01 finished long before the poll: not sent again
    assert 'class="cell fail"' in html and 'class="cell queued"' in html  # the whole row of n03
    assert "GPU 2: &lt;b&gt;ECC&lt;/b&gt;" in html and "<b>ECC" not in html
    assert "1/8 checks" not in html and "2/8 checks (25%)" in html  # the summary covers the whole run
    assert re.search(rf'hx-get="/runs/{run.pk}/\?since=\d+\.\d+&amp;triaged=1-0-1" hx-trigger="every 2s"', html)
    # The new failure fills the triage box, swapped out of band by the same poll (no reload).
    assert '<section id="triage" hx-swap-oob="true" data-fail="1" data-error="0">' in html
    assert 'class="triage-line" data-nodes="n03"' in html and "Nothing to triage" not in html
    # The next poll, with nothing new failed, leaves the box alone.
    again = re.search(r'hx-get="([^"]+)" hx-trigger="every 2s"', html)
    assert again
    quiet = viewer_client.get(again.group(1).replace("&amp;", "&"), headers={"HX-Request": "true"}).content.decode()
    assert 'id="triage"' not in quiet


def test_it_swaps_the_whole_grid_when_the_run_finished_between_polls(viewer_client, cluster, make_run) -> None:
    run = make_run(cluster)
    since = f"{time.time():.3f}"
    services.run_cancel(run=run)

    response = viewer_client.get(
        reverse("runs:run_detail", args=[run.pk]) + f"?since={since}", headers={"HX-Request": "true"}
    )

    assert response.headers["HX-Retarget"] == "#run-grid"
    assert response.headers["HX-Trigger"] == "kiln-grid-replaced"  # the chart links reload
    assert response.headers["HX-Reswap"] == "outerHTML"
    html = response.content.decode()
    assert html.lstrip().startswith('<div id="run-grid" data-status="cancelled"')
    assert html.count('class="cell cancelled"') == 8 + 1 and "hx-get" not in html and "<template>" not in html
    assert '<section id="triage" hx-swap-oob="true"' in html  # the box's last word, as the run finished


def test_it_sends_every_row_when_a_multi_node_result_moved(viewer_client, cluster, quick_plan) -> None:
    TestPlanItem.objects.create(plan=quick_plan, check_definition=CheckDefinition.objects.get(slug="fs-aggregate"))
    run = started(services.run_start(cluster=cluster, plan=quick_plan, enqueue=False), minutes_ago=1)
    since = f"{time.time() - 1:.3f}"
    now = timezone.now()
    CheckResult.objects.filter(run=run, scope="group").update(status="running", started_at=now)

    url = reverse("runs:run_detail", args=[run.pk]) + f"?since={since}"
    response = viewer_client.get(url, headers={"HX-Request": "true"})

    assert response.headers["HX-Retarget"] == "#run-grid"
    html = response.content.decode()
    assert html.count("<tr id=") == 4
    assert html.count('class="cell running"') == 4 + 1  # the group result in each member's row, the run


def test_it_keeps_the_problem_filter_while_polling(viewer_client, cluster, make_run) -> None:
    run = make_run(cluster)
    set_result(run, "n02", "ecc-health", "fail", "GPU 1: ECC")
    url = reverse("runs:run_detail", args=[run.pk])

    page = viewer_client.get(url, {"problems": "1"}).content.decode()
    poll = re.search(r'hx-get="([^"]+)" hx-trigger="every 2s"', page)
    assert poll and re.fullmatch(rf"{url}\?problems=1&amp;since=\d+\.\d+&amp;triaged=1-0-1", poll.group(1))
    # The filtered poll gets the whole filtered page, so a node that turns bad shows up; it replaces
    # the grid, not the summary that polled (which would nest a second grid inside the first).
    set_result(run, "n04", "gpu-inventory", "error", "unreachable")
    response = viewer_client.get(poll.group(1).replace("&amp;", "&"), headers={"HX-Request": "true"})
    fragment = response.content.decode()
    assert response.headers["HX-Retarget"] == "#run-grid" and response.headers["HX-Reswap"] == "outerHTML"
    assert fragment.lstrip().startswith('<div id="run-grid"')
    assert ">n02</a></td>" in fragment and ">n04</a></td>" in fragment and ">n01</a></td>" not in fragment
    assert re.search(rf'hx-get="{url}\?problems=1&amp;since=\d+\.\d+&amp;triaged=1-1-1"', fragment)
    # A plain htmx request with the filter (no poll) gets the filtered grid too.
    plain = viewer_client.get(url, {"problems": "1"}, headers={"HX-Request": "true"})
    assert "HX-Retarget" not in plain.headers and plain.content.decode().count("<tr id=") == 2


def test_it_ignores_a_garbled_since(viewer_client, cluster, make_run) -> None:
    run = make_run(cluster)
    response = viewer_client.get(
        reverse("runs:run_detail", args=[run.pk]) + "?since=nan-ish", headers={"HX-Request": "true"}
    )
    assert response.status_code == 200
    assert response.content.decode().count("<tr id=") == 4 and "HX-Retarget" not in response.headers


# --- the grid ---------------------------------------------------------------------------------------------


def test_it_escapes_reasons_and_links_every_cell_to_its_result(viewer_client, cluster, make_run) -> None:
    run = make_run(cluster)
    bad = set_result(run, "n02", "ecc-health", "fail", 'GPU 5: <script>alert("x")</script> & "more"')

    html = viewer_client.get(reverse("runs:run_detail", args=[run.pk])).content.decode()

    assert "<script>alert" not in html
    assert 'title="GPU 5: &lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &quot;more&quot;"' in html
    assert f'<a class="cell fail" href="{reverse("runs:result_detail", args=[bad.pk])}"' in html
    # The grid's own links (the triage view above it links the failed result too).
    assert html[html.index('id="run-grid"') :].count('href="/results/') == 8
    assert '<thead><tr><th>Node</th><th title="gpu_inventory">GPU inventory</th>' in html  # sticky header row


def seed_run(name: str, size: int, plan: TestPlan) -> Run:
    """A run of `size` nodes × 8 checks, seeded with bulk_create (1,250 nodes: 10,000 results)."""
    cluster = Cluster.objects.create(name=name, profile="H100-SXM-8", transport="local")
    Node.objects.bulk_create(Node(cluster=cluster, hostname=f"{name}{i:04d}") for i in range(size))
    run = services.run_start(cluster=cluster, plan=plan, enqueue=False)
    started(run, minutes_ago=10)
    finished = timezone.now() - timedelta(minutes=1)
    CheckResult.objects.filter(run=run, node__hostname__lt=f"{name}{size // 2:04d}").update(
        status="pass", reason="all within spec", duration_s=5.0, started_at=finished, finished_at=finished
    )
    CheckResult.objects.filter(run=run, node__hostname=f"{name}0001", item_key="ecc-health").update(
        status="fail", reason="GPU 0: ECC"
    )
    return run


def run_page_queries(client, run: Run) -> dict[str, int]:
    """Queries of each way of reading the run page (and the triage exports) of `run`."""
    prefix = run.cluster.name
    url = reverse("runs:run_detail", args=[run.pk])
    counts = {}
    for mode, headers, query in (
        ("page", {}, ""),
        ("fragment", {"HX-Request": "true"}, ""),
        ("live", {"HX-Request": "true"}, f"?since={time.time() - 120:.3f}&triaged=1-0-1"),
        ("problems", {}, "?problems=1"),
        ("state", {}, "?state=queued"),
        ("node set", {}, f"?nodes={prefix}[0002-0009]"),
        ("part of a name", {}, f"?nodes={prefix}000"),
        ("a node's page", {}, f"?node={prefix}0011"),
    ):
        with CaptureQueriesContext(connection) as queries:
            response = client.get(url + query, headers=headers)
        assert response.status_code == 200, (mode, response.status_code)
        counts[mode] = len(queries)
    for name in ("runs:run_triage_csv", "runs:run_triage_rma"):
        with CaptureQueriesContext(connection) as queries:
            assert client.get(reverse(name, args=[run.pk])).status_code == 200
        counts[name] = len(queries)
    return counts


def test_it_reads_the_run_page_in_the_same_number_of_queries_at_16_and_1250_nodes(
    viewer_client, django_assert_max_num_queries
) -> None:
    plan = TestPlan.objects.create(slug="eight", name="Eight checks")
    for order, slug in enumerate(EIGHT):
        TestPlanItem.objects.create(plan=plan, check_definition=CheckDefinition.objects.get(slug=slug), order=order)
    small, large = seed_run("s", 16, plan), seed_run("l", 1250, plan)
    assert CheckResult.objects.filter(run=large).count() == 10_000
    viewer_client.get(reverse("runs:run_detail", args=[small.pk]))  # warm the session

    active = {label: run_page_queries(viewer_client, run) for label, run in (("small", small), ("large", large))}
    assert active["large"] == active["small"], active

    with django_assert_max_num_queries(active["small"]["page"]):
        viewer_client.get(reverse("runs:run_detail", args=[large.pk]) + "?page=13")  # the last page, as the first
    with django_assert_max_num_queries(active["small"]["page"]):
        response = viewer_client.get(reverse("runs:run_detail", args=[large.pk]))
    html = response.content.decode()
    # One page of rows (grid.PAGE_ROWS), the counts the whole run's.
    assert html.count("<tr id=") == 100 and html.count('class="cell ') == 800 + 1  # and the run's status
    assert "5000/10000 checks (50%)" in html and "ETA ~" in html and "page 1 of 13" in html
    assert len(response.content) < 300_000

    # Closed: the counts and the slowest nodes come from the run's summary.
    for run in (small, large):
        CheckResult.objects.filter(run=run, status="queued").update(status="pass", duration_s=1.0)
        services.run_finalize(run_id=run.pk)
    closed = {label: run_page_queries(viewer_client, run) for label, run in (("small", small), ("large", large))}
    assert closed["large"] == closed["small"], closed
    html = viewer_client.get(reverse("runs:run_detail", args=[large.pk])).content.decode()
    assert "10000/10000 checks (100%)" in html and '<p id="run-slowest">' in html
