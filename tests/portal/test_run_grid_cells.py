"""What the run grid says: node names link to the node's page, the "Why" column names the
check and says each reason once, only the check on the node shows "running", and the badges count
the cells the grid shows."""

from __future__ import annotations

import re
import time

import pytest
from django.urls import reverse
from django.utils import timezone

from portal.catalog.models import CheckDefinition, TestPlanItem
from portal.inventory.models import Node
from portal.runs import services
from portal.runs.models import CheckResult
from tests.portal.helpers import set_result

pytestmark = pytest.mark.django_db

UNREACHABLE = "unreachable: [Errno None] Unable to connect to port 22"


@pytest.fixture
def viewer_client(client, make_user):
    client.force_login(make_user("vera", "viewer"))
    return client


def cells_of(html: str, hostname: str) -> list[str]:
    row = re.search(rf"<tr id=\"node-\d+\"><td><a [^>]*>{hostname}</a></td>(.*?)</tr>", html, re.S)
    assert row, f"no row for {hostname}"
    return re.findall(r'class="cell (\w+)"', row.group(1))


def badges(html: str) -> dict[str, int]:
    counts = re.search(r'<p id="run-counts">(.*?)</p>', html, re.S)
    assert counts
    return {state: int(n) for n, state in re.findall(r'<span class="badge \w+">(\d+) (\w+)</span>', counts.group(1))}


def test_it_links_each_node_name_to_the_nodes_page(viewer_client, cluster, make_run) -> None:
    run = make_run(cluster)

    html = viewer_client.get(reverse("runs:run_detail", args=[run.pk])).content.decode()

    url = reverse("history:node_detail", args=["c1", "n02"])
    assert f'<td><a href="{url}">n02</a></td>' in html
    assert viewer_client.get(url).status_code == 200


def test_it_says_each_reason_once_after_the_checks_that_gave_it(viewer_client, cluster, make_run) -> None:
    run = make_run(cluster)
    set_result(run, "n01", "gpu-inventory", "error", UNREACHABLE)
    set_result(run, "n01", "ecc-health", "error", UNREACHABLE)
    set_result(run, "n02", "gpu-inventory", "fail", "driver 535.104.05, expected 550.54.15")
    set_result(run, "n02", "ecc-health", "fail", "GPU 5: 3 uncorrectable ECC errors")

    html = viewer_client.get(reverse("runs:run_detail", args=[run.pk])).content.decode()

    why = re.search(r">n01</a></td>.*?<td class=\"reason\">(.*?)</td>", html, re.S)
    assert why and why.group(1) == f"<b>gpu-inventory, ecc-health</b>: {UNREACHABLE}"
    assert html.count("Unable to connect to port 22</td>") == 1  # not once per check (titles aside)
    why = re.search(r">n02</a></td>.*?<td class=\"reason\">(.*?)</td>", html, re.S)
    assert why and why.group(1) == (
        "<b>gpu-inventory</b>: driver 535.104.05, expected 550.54.15 · "
        "<b>ecc-health</b>: GPU 5: 3 uncorrectable ECC errors"
    )


def test_only_the_check_whose_commands_started_shows_running(viewer_client, cluster, make_run) -> None:
    run = make_run(cluster)
    node = Node.objects.get(cluster=cluster, hostname="n01")
    # The node task claims every check of its node at once: all `running` under one lease.
    claimed = services.results_claim(run_id=run.pk, node_id=node.pk, claim="task-1")
    assert [r.status for r in claimed] == ["running", "running"]
    url = reverse("runs:run_detail", args=[run.pk])

    html = viewer_client.get(url).content.decode()
    assert cells_of(html, "n01") == ["waiting", "waiting"]  # connecting: nothing on the node yet

    # The lease keeper writes command_started_at before the first command of the first check.
    CheckResult.objects.filter(pk=claimed[0].pk).update(command_started_at=timezone.now())
    html = viewer_client.get(url).content.decode()

    assert cells_of(html, "n01") == ["running", "waiting"]
    assert badges(html) == {"queued": 6, "waiting": 1, "running": 1}
    assert 'title="claimed by a worker; runs after this node&#x27;s earlier checks"' in html  # says why


def test_the_badges_count_the_cells_the_grid_shows(viewer_client, cluster, quick_plan) -> None:
    # A multi-node check fills a cell in each of its 4 members' rows: 4 queued cells, one result.
    TestPlanItem.objects.create(plan=quick_plan, check_definition=CheckDefinition.objects.get(slug="fs-aggregate"))
    run = services.run_start(cluster=cluster, plan=quick_plan, enqueue=False)
    set_result(run, "n01", "gpu-inventory", "pass", "all within spec")
    url = reverse("runs:run_detail", args=[run.pk])

    html = viewer_client.get(url).content.decode()

    shown = [state for host in ("n01", "n02", "n03", "n04") for state in cells_of(html, host)]
    assert len(shown) == 12 and shown.count("queued") == 11
    assert badges(html) == {"queued": 11, "pass": 1}
    assert "1/12 checks (8%)" in html  # the progress counts the same cells
    # The live poll (only the changed rows) counts the same cells from the database.
    poll = viewer_client.get(url, {"since": f"{time.time() - 60:.3f}"}, headers={"HX-Request": "true"})
    assert badges(poll.content.decode()) == {"queued": 11, "pass": 1}
    assert "1/12 checks (8%)" in poll.content.decode()
