"""The campaign page links what it names: node names to the node's page, open checks to
their result, runs to the run, and breadcrumbs back to the cluster."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from portal.runs.models import CheckResult

pytestmark = pytest.mark.django_db


def test_the_campaign_page_links_nodes_checks_and_runs(client, campaign, campaign_run, users):
    run = campaign_run(statuses={("n02", "ecc-health"): "fail"})
    result = CheckResult.objects.get(run=run, node__hostname="n02", item_key="ecc-health")
    client.force_login(users["viewer"])

    page = client.get(reverse("certificates:campaign_detail", args=[campaign.pk])).content.decode()

    node_url = reverse("history:node_detail", args=[campaign.cluster.name, "n02"])
    grid = page[page.index('<table class="run-grid">') : page.index("</table>", page.index('<table class="run-grid">'))]
    assert f'<tr><td><a href="{node_url}">n02</a></td>' in grid
    open_items = page[page.index('<table id="open-items">') :]
    open_items = open_items[: open_items.index("</table>")]
    assert f'<td><a href="{node_url}">n02</a></td>' in open_items
    assert f'<a href="{reverse("runs:result_detail", args=[result.pk])}">ecc-health</a>' in open_items
    assert f'<a href="{reverse("runs:run_detail", args=[run.pk])}">run #{run.pk}</a>: ' in open_items
    nav = re.search(r'<nav class="breadcrumbs" aria-label="Breadcrumbs">(.*?)</nav>', page, re.S)
    assert nav and re.findall(r">([^<]+)</a>", nav.group(1)) == ["Clusters", campaign.cluster.name, campaign.name]
