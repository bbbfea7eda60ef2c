"""The compare page offers the cluster's recent runs to pick (run IDs used to be typed by hand);
typed IDs keep working."""

from __future__ import annotations

import html

import pytest
from django.urls import reverse

from portal.inventory.models import Cluster, Node
from portal.runs.models import Run

pytestmark = pytest.mark.django_db


def picker(page: str) -> str:
    start = page.index('<details id="recent-runs-picker"')
    return page[start : page.index("</details>", start)]


def test_it_lists_the_clusters_last_runs_with_date_plan_and_status(viewer_client, cluster, make_run) -> None:
    other = Cluster.objects.create(name="other", transport="local")
    Node.objects.create(cluster=other, hostname="x01")
    elsewhere = make_run(other)
    runs = [make_run(cluster) for _ in range(22)]
    Run.objects.filter(pk=runs[-1].pk).update(status="fail")
    page = viewer_client.get(reverse("history:run_compare") + "?cluster=c1").content.decode()
    listed = picker(page)
    assert "Pick from the last 20 runs of c1" in listed
    assert f">#{runs[-1].pk}<" in listed and f">#{runs[2].pk}<" in listed
    assert f">#{runs[1].pk}<" not in listed  # the 21st newest is not offered
    assert f">#{elsewhere.pk}<" not in listed  # another cluster's run
    assert "Unit test plan" in listed and "UTC" in listed and '<span class="cell fail"' in listed
    assert "<details" in page and " open>" in listed.split("\n", 1)[0]  # open: nothing compared yet


def test_picking_a_run_as_a_then_another_as_b_compares_them(viewer_client, cluster, make_run) -> None:
    first, second, third = (make_run(cluster) for _ in range(3))
    url = reverse("history:run_compare")
    # The first visit has third as A and second as B; second "as A" compares it with the run before it.
    listed = html.unescape(picker(viewer_client.get(url + "?cluster=c1").content.decode()))
    as_a = f"{url}?a={second.pk}&cluster=c1"
    assert f'href="{as_a}"' in listed
    response = viewer_client.get(as_a)
    comparison = response.context["comparison"]
    assert (comparison.a.pk, comparison.b.pk) == (second.pk, first.pk)  # the run before it
    listed = html.unescape(picker(response.content.decode()))
    as_b = f"{url}?a={second.pk}&b={third.pk}&cluster=c1"
    assert f'href="{as_b}"' in listed
    comparison = viewer_client.get(as_b).context["comparison"]
    assert (comparison.a.pk, comparison.b.pk) == (second.pk, third.pk)


def test_typed_run_ids_still_work(viewer_client, cluster, make_run) -> None:
    first, second = make_run(cluster), make_run(cluster)
    response = viewer_client.get(reverse("history:run_compare"), {"a": second.pk, "b": first.pk})
    assert response.status_code == 200
    assert (response.context["comparison"].a.pk, response.context["comparison"].b.pk) == (second.pk, first.pk)
    assert 'list="recent-runs"' in response.content.decode()  # the typed field still suggests runs


def test_the_cluster_pages_open_the_picker_on_their_cluster(viewer_client, cluster) -> None:
    compare = reverse("history:run_compare") + "?cluster=c1"
    for url in (reverse("inventory:cluster_detail", args=["c1"]), reverse("history:cluster_runs", args=["c1"])):
        assert f'href="{compare}"' in viewer_client.get(url).content.decode(), url


def test_the_compare_link_opens_the_picker_on_the_last_two_runs(viewer_client, cluster, make_run) -> None:
    first, second, third = (make_run(cluster) for _ in range(3))
    response = viewer_client.get(reverse("history:run_compare") + "?cluster=c1")  # the cluster page's link
    page = response.content.decode()
    assert response.status_code == 200
    assert "This field is required" not in page and '<div class="form-errors">' not in page
    assert response.context["comparison"] is None
    assert f'name="a" value="{third.pk}"' in page and f'name="b" value="{second.pk}"' in page
    assert "start as the last two runs of c1: press Compare" in page
    listed = html.unescape(picker(page))
    assert f">#{first.pk}<" in listed and listed.count('<tr class="chosen">') == 2  # A and B marked
    assert f'href="{reverse("history:run_compare")}?a={third.pk}&b={first.pk}&cluster=c1"' in listed  # first as B


def test_a_first_visit_without_runs_or_cluster_is_an_empty_picker(viewer_client, cluster, make_run) -> None:
    url = reverse("history:run_compare")
    for query in ("", "?cluster=c1", "?cluster=nope"):
        response = viewer_client.get(url + query)
        assert response.status_code == 200, query
        assert "No runs yet." in response.content.decode(), query
    make_run(cluster)
    page = viewer_client.get(url + "?cluster=c1").content.decode()
    assert "Only one run so far on c1: a comparison needs a second run." in page


def test_a_submitted_form_without_run_a_says_so(viewer_client, cluster, make_run) -> None:
    make_run(cluster)
    for query in ("?cluster=c1&a=", "?cluster=c1&a=&b=&worse=on", "?worse=on"):
        response = viewer_client.get(reverse("history:run_compare") + query)
        assert response.status_code == 400, query
        assert "Run A: This field is required." in response.content.decode(), query


def test_without_a_cluster_the_newest_run_is_a_and_b_is_the_run_before_it_on_its_cluster(
    viewer_client, cluster, make_run
) -> None:
    other = Cluster.objects.create(name="other", transport="local")
    Node.objects.create(cluster=other, hostname="x01")
    make_run(cluster)
    newest = make_run(other)
    response = viewer_client.get(reverse("history:run_compare"))
    page = response.content.decode()
    assert response.status_code == 200
    assert f'name="a" value="{newest.pk}"' in page and 'name="b" value=' not in page
    assert "Run A starts as the newest run, compared with the run before it on its cluster" in page
