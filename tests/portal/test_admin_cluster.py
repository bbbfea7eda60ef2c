"""The cluster admin links to its nodes instead of inlining them: a 1,250-node cluster is one
form of 1,250 rows otherwise, slow to render and to post back."""

from __future__ import annotations

import pytest
from django.urls import reverse

from portal.inventory.admin import nodes_url
from portal.inventory.models import Cluster, Node

# More than one admin page of nodes (ModelAdmin.list_per_page is 100).
NODES = 250


@pytest.fixture
def big(db) -> Cluster:
    cluster = Cluster.objects.create(name="big", profile="H100-SXM-8", transport="local")
    Node.objects.bulk_create(Node(cluster=cluster, hostname=f"g{i:04d}") for i in range(NODES))
    other = Cluster.objects.create(name="other", profile="H100-SXM-8", transport="local")
    Node.objects.create(cluster=other, hostname="elsewhere")
    return cluster


@pytest.fixture
def root(client, make_user):
    user = make_user("root", superuser=True)
    user.is_staff = True
    user.save()
    client.force_login(user)
    return client


def test_the_cluster_page_links_to_its_nodes_and_renders_none_of_them(root, big) -> None:
    response = root.get(reverse("admin:inventory_cluster_change", args=[big.pk]))
    assert response.status_code == 200
    page = response.content.decode()
    assert "nodes-TOTAL_FORMS" not in page, "no node inline"
    assert "g0000" not in page and f"g{NODES - 1:04d}" not in page
    assert f'href="{nodes_url(big)}">{NODES} nodes</a>' in page


def test_the_linked_node_list_holds_the_clusters_nodes_one_page_at_a_time(root, big) -> None:
    response = root.get(nodes_url(big))
    assert response.status_code == 200
    changelist = response.context["cl"]
    assert changelist.result_count == NODES, "only this cluster's nodes"
    assert len(changelist.result_list) == changelist.list_per_page < NODES
    assert all(node.cluster_id == big.pk for node in changelist.result_list)


def test_the_cluster_list_counts_nodes(root, big) -> None:
    response = root.get(reverse("admin:inventory_cluster_changelist"))
    assert response.status_code == 200
    assert f'href="{nodes_url(big)}">{NODES}</a>' in response.content.decode()


def test_a_new_cluster_has_no_node_link_yet(root, db) -> None:
    response = root.get(reverse("admin:inventory_cluster_add"))
    assert response.status_code == 200
    assert "Add nodes once the cluster is saved" in response.content.decode()
