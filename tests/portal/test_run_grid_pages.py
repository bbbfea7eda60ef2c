"""The run grid a page at a time: pages of grid.PAGE_ROWS nodes in hostname order, filters answered
by the database (problems, a state, a node set or part of a name), a node's page (?node=), links
and the live poll that keep the filter and the page, the summary's slowest nodes, and the triage
box that lists a few nodes of a line and reads the same number of rows whatever fails."""

from __future__ import annotations

import re
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem
from portal.inventory.models import Cluster, Node
from portal.runs import grid, services
from portal.runs.finalize import summary_complete
from portal.runs.models import CheckResult, Run
from portal.runs.triage import LISTED
from tests.portal.helpers import add_measurement, set_result

pytestmark = pytest.mark.django_db

NODES = 250  # three pages of grid.PAGE_ROWS


@pytest.fixture
def viewer_client(client, make_user):
    client.force_login(make_user("vera", "viewer"))
    return client


@pytest.fixture
def wide(quick_plan) -> Run:
    """A run of the two-check plan on g000..g249, started a minute ago, nothing finished."""
    cluster = Cluster.objects.create(name="g", profile="H100-SXM-8", transport="local")
    Node.objects.bulk_create(Node(cluster=cluster, hostname=f"g{i:03d}") for i in range(NODES))
    run = services.run_start(cluster=cluster, plan=quick_plan, enqueue=False)
    Run.objects.filter(pk=run.pk).update(status="running", started_at=timezone.now() - timedelta(minutes=1))
    run.refresh_from_db()
    return run


def page(client, run: Run, query: str = "", **headers: str) -> str:
    response = client.get(reverse("runs:run_detail", args=[run.pk]) + query, headers=headers)
    assert response.status_code == 200
    return response.content.decode()


def hosts(html: str) -> list[str]:
    """The grid's rows, in order."""
    return re.findall(r'<tr id="node-\d+"[^>]*><td><a href="[^"]*">([^<]+)</a></td>', html)


def test_it_shows_one_page_of_nodes_in_hostname_order_with_the_whole_runs_counts(viewer_client, wide) -> None:
    html = page(viewer_client, wide)

    assert hosts(html) == [f"g{i:03d}" for i in range(100)]
    assert "nodes 1–100 of 250 · page 1 of 3" in html
    assert '<span class="badge grey">500 queued</span>' in html and "0/500 checks (0%)" in html
    url = reverse("runs:run_detail", args=[wide.pk])
    assert f'<a href="{url}?page=2" rel="next">next ›</a> <a href="{url}?page=3">last »</a>' in html
    assert "« first" not in html

    last = page(viewer_client, wide, "?page=3")
    assert hosts(last) == [f"g{i:03d}" for i in range(200, 250)]
    assert "nodes 201–250 of 250 · page 3 of 3" in last and f'<a href="{url}?page=2" rel="prev">' in last
    assert hosts(page(viewer_client, wide, "?page=99")) == hosts(last)  # past the end: the last page
    assert hosts(page(viewer_client, wide, "?page=nope")) == hosts(html)


def test_the_filters_are_answered_by_the_server_and_kept_by_the_pager(viewer_client, wide) -> None:
    set_result(wide, "g005", "ecc-health", "fail", "GPU 1: ECC")
    set_result(wide, "g150", "gpu-inventory", "error", "unreachable")
    set_result(wide, "g249", "gpu-inventory", "warn", "hot")
    set_result(wide, "g249", "ecc-health", "pass", "fine")

    problems = page(viewer_client, wide, "?problems=1")
    assert hosts(problems) == ["g005", "g150", "g249"]
    assert "nodes 1–3 of 3 shown by the filter · page 1 of 1" in problems
    assert "<b>Only problems</b>" in problems and '<input type="hidden" name="problems" value="1">' in problems
    # the whole run's counts, whatever the filter
    assert "4/500 checks (0%)" in problems and '<span class="badge red">1 fail</span>' in problems

    assert hosts(page(viewer_client, wide, "?state=error")) == ["g150"]
    assert hosts(page(viewer_client, wide, "?state=pass")) == ["g249"]
    assert hosts(page(viewer_client, wide, "?problems=1&state=fail")) == ["g005"]
    assert hosts(page(viewer_client, wide, "?state=nonsense")) == hosts(page(viewer_client, wide))  # ignored
    assert hosts(page(viewer_client, wide, "?nodes=g[010-014,200]")) == ["g010", "g011", "g012", "g013", "g014", "g200"]
    assert hosts(page(viewer_client, wide, "?nodes=g24")) == [f"g{i}" for i in range(240, 250)]  # part of a name
    assert hosts(page(viewer_client, wide, "?problems=1&nodes=g[100-249]")) == ["g150", "g249"]
    broken = page(viewer_client, wide, "?nodes=g[1-")
    assert hosts(broken) == [] and 'id="grid-note">Not a node set' in broken
    assert "No nodes match this filter." in page(viewer_client, wide, "?nodes=h[1-3]")

    # The pager keeps the filter (and the form shows it).
    every = page(viewer_client, wide, "?nodes=g")
    url = reverse("runs:run_detail", args=[wide.pk])
    assert f'<a href="{url}?nodes=g&amp;page=2" rel="next">' in every and 'name="nodes" value="g"' in every


def test_a_node_opens_its_page_with_its_row_marked(viewer_client, wide) -> None:
    html = page(viewer_client, wide, "?node=g150")

    assert "page 2 of 3" in html and hosts(html)[0] == "g100"
    node = Node.objects.get(hostname="g150")
    assert f'<tr id="node-{node.pk}" class="focus">' in html
    # The live poll keeps the page, not the jump.
    assert re.search(r'hx-get="[^"]*\?page=2&amp;since=', html)

    missing = page(viewer_client, wide, "?node=g999")
    assert "page 1 of 3" in missing and "No node g999 among the rows shown here." in missing
    filtered = page(viewer_client, wide, "?problems=1&node=g150")  # g150 has no problem
    assert "No node g150 among the rows shown here." in filtered


def test_the_live_poll_sends_the_changed_rows_of_its_own_page(viewer_client, wide) -> None:
    html = page(viewer_client, wide, "?page=2")
    poll = re.search(r'hx-get="([^"]+)" hx-trigger="every 2s"', html)
    assert poll and "page=2" in poll.group(1)
    now = timezone.now()
    set_result(wide, "g010", "ecc-health", "pass", started_at=now, finished_at=now)  # page 1
    set_result(wide, "g150", "ecc-health", "fail", "GPU 3: ECC", started_at=now, finished_at=now)  # page 2

    response = viewer_client.get(poll.group(1).replace("&amp;", "&"), headers={"HX-Request": "true"})

    answer = response.content.decode()
    assert "HX-Retarget" not in response.headers
    assert answer.count("<tr id=") == 1 and ">g150</a>" in answer and ">g010</a>" not in answer
    assert "2/500 checks" in answer  # the summary counts the whole run


def test_a_plan_of_multi_node_checks_only_has_a_row_per_member(viewer_client, cluster) -> None:
    plan = TestPlan.objects.create(slug="soak", name="Multi-node only")
    TestPlanItem.objects.create(plan=plan, check_definition=CheckDefinition.objects.get(slug="fs-aggregate"))
    run = services.run_start(cluster=cluster, plan=plan, enqueue=False)
    CheckResult.objects.filter(run=run).update(
        status="pass", reason="aggregate fine", attribution={"n03": {"status": "fail", "reason": "slow writer"}}
    )

    assert hosts(page(viewer_client, run)) == ["n01", "n02", "n03", "n04"]
    problems = page(viewer_client, run, "?problems=1")
    assert hosts(problems) == ["n03"] and "slow writer" in problems
    assert hosts(page(viewer_client, run, "?state=pass")) == ["n01", "n02", "n04"]


def test_only_cells_worth_reading_carry_their_reason_as_a_title(viewer_client, wide) -> None:
    set_result(wide, "g001", "gpu-inventory", "pass", "8 x H100, driver 550.54.15")
    set_result(wide, "g001", "ecc-health", "fail", "GPU 1: 2 uncorrectable")

    html = page(viewer_client, wide)

    assert "driver 550.54.15" not in html  # on the result's page, not on every passing cell
    assert 'title="GPU 1: 2 uncorrectable">fail</a>' in html


def test_the_slowest_nodes_are_stored_when_the_run_closes(viewer_client, cluster, make_run) -> None:
    run = make_run(cluster)
    for i, host in enumerate(["n01", "n02", "n03", "n04"]):
        set_result(run, host, "gpu-inventory", "pass", duration_s=10.0 * (i + 1))
        set_result(run, host, "ecc-health", "pass", duration_s=1.0)
    assert '<p id="run-slowest">' not in page(viewer_client, run)  # still running: none yet

    services.run_finalize(run_id=run.pk)
    run.refresh_from_db()

    assert run.summary["slowest"] == [["n04", 41.0], ["n03", 31.0], ["n02", 21.0], ["n01", 11.0]]
    html = page(viewer_client, run)
    url = reverse("runs:run_detail", args=[run.pk])
    assert f'<p id="run-slowest">Slowest nodes (their checks\' time in all): <a href="{url}?node=n04">n04</a>' in html
    # A run closed before they were stored is read the same (one aggregate), and can be completed.
    Run.objects.filter(pk=run.pk).update(summary={"results": 8, "nodes": 4, "counts": {"pass": 8}})
    assert f'<a href="{url}?node=n04">n04</a>' in page(viewer_client, run)
    assert summary_complete(run_id=run.pk) and not summary_complete(run_id=run.pk)
    run.refresh_from_db()
    assert run.summary["slowest"][0] == ["n04", 41.0] and run.summary["cells"] == {"pass": 8}


def test_a_triage_line_lists_a_few_of_its_nodes_and_counts_the_rest(viewer_client, wide) -> None:
    failing = [f"g{i:03d}" for i in range(LISTED + 5)]
    for host in failing:
        result = set_result(wide, host, "ecc-health", "fail", "GPU 2: 3 uncorrectable volatile ECC errors")
        add_measurement(result, "ecc_volatile_uncorrected", value=3.0, gpu=2, threshold="<= 0", ok=False)

    html = page(viewer_client, wide)

    triage = html[html.index('<section id="triage"') : html.index("</section>")]
    assert triage.count('class="triage-line"') == 1 and f"({LISTED + 5} nodes)" in triage
    assert triage.count("RMA text</a>") == LISTED and "and 5 more (the CSV and the RMA text list every node)" in triage
    assert "and 5 more measurements" in triage and "and 5 more results" in triage
    assert f"Failing or erroring nodes ({LISTED + 5}): <b>g[000-024]</b>" in triage
    rma = viewer_client.get(reverse("runs:run_triage_rma", args=[wide.pk])).content.decode()
    assert all(f"Node: {host}" in rma for host in failing)


def triage_queries(client, run: Run) -> list[int]:
    counts = []
    for name in ("runs:run_triage_csv", "runs:run_triage_rma"):
        with CaptureQueriesContext(connection) as queries:
            assert client.get(reverse(name, args=[run.pk])).status_code == 200
        counts.append(len(queries))
    return counts


def test_the_triage_reads_as_many_rows_for_one_failure_as_for_thirty(viewer_client, wide) -> None:
    set_result(wide, "g000", "gpu-inventory", "pass")
    inventory = CheckResult.objects.get(run=wide, node__hostname="g000", item_key="gpu-inventory")
    add_measurement(inventory, "gpu_serial", text="1650000000001", gpu=2)
    result = set_result(wide, "g000", "ecc-health", "fail", "GPU 2: ECC")
    add_measurement(result, "ecc_volatile_uncorrected", value=3.0, gpu=2, threshold="<= 0", ok=False)
    add_measurement(result, "ecc_aggregate_uncorrected", value=0.0, gpu=2, threshold="<= 0", ok=True)
    set_result(wide, "g001", "gpu-inventory", "error", "unreachable")
    one = triage_queries(viewer_client, wide)

    for i in range(2, 32):
        result = set_result(wide, f"g{i:03d}", "ecc-health", "fail", f"GPU {i % 8}: ECC")
        add_measurement(result, "ecc_volatile_uncorrected", value=1.0, gpu=i % 8, threshold="<= 0", ok=False)
        set_result(wide, f"g{i:03d}", "gpu-inventory", "error", "unreachable", stdout="partial")

    assert triage_queries(viewer_client, wide) == one


def test_the_filter_reads_its_text_bounded(viewer_client, wide) -> None:
    found = grid.GridFilter.from_params({"nodes": "  g0  ", "state": "waiting", "problems": "1"})
    assert found == grid.GridFilter(problems=True, state="waiting", nodes="g0")
    assert found.params() == {"problems": "1", "state": "waiting", "nodes": "g0"} and found.follows_results
    assert not grid.GridFilter(nodes="g0").follows_results
    assert len(grid.GridFilter.from_params({"nodes": "g" * 50_000}).nodes) == grid.NODES_TEXT
    claimed = services.results_claim(run_id=wide.pk, node_id=Node.objects.get(hostname="g007").pk, claim="t")
    assert claimed
    assert hosts(page(viewer_client, wide, "?state=waiting")) == ["g007"]
    assert hosts(page(viewer_client, wide, f"?state=waiting&since={time.time():.3f}", **{"HX-Request": "true"})) == [
        "g007"
    ]


def test_hostile_filter_input_is_refused_or_escaped_and_never_expanded(viewer_client, wide) -> None:
    """What a viewer can type into the query string: a node set spanning a billion names is refused
    before anything is expanded, markup is escaped, wildcards are text, and a bad page number gives
    the nearest page."""
    huge = page(viewer_client, wide, "?nodes=g[0-999999999]")
    assert hosts(huge) == [] and "KILN_MAX_NODESET" in huge
    markup = page(viewer_client, wide, "?nodes=%3Cscript%3Ealert(1)%3C/script%3E")
    assert "<script>alert(1)</script>" not in markup and "&lt;script&gt;alert(1)&lt;/script&gt;" in markup
    assert hosts(page(viewer_client, wide, "?nodes=%25")) == []  # LIKE's wildcard is a character here
    assert hosts(page(viewer_client, wide, "?nodes=g_0")) == []
    first = hosts(page(viewer_client, wide))
    last = hosts(page(viewer_client, wide, "?page=3"))
    assert hosts(page(viewer_client, wide, "?page=-4")) == first
    assert hosts(page(viewer_client, wide, "?page=abc")) == first
    assert hosts(page(viewer_client, wide, "?page=99999999999999999999")) == last
    assert hosts(page(viewer_client, wide, "?node=nosuch%27--")) == first
