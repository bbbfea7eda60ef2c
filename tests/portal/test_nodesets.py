"""Typed node sets are bounded before they are expanded (portal/inventory/nodesets.py), everywhere one
comes from a person: the result search, the run form, campaign and schedule node sets, kiln_nodes."""

from __future__ import annotations

import time

import pytest
from ClusterShell.NodeSet import NodeSet
from django.core.management import CommandError, call_command
from django.urls import reverse

from portal.inventory import nodesets
from portal.inventory.models import Node
from portal.runs import services
from portal.runs.models import Run

HUGE = [
    "gpu[1-10000000]",
    "gpu[1-99999999999]",
    "gpu[1-10000000]-[1-10000000]",
    ",".join(f"n[{i}-{i + 99}]" for i in range(0, 100_000, 100)),  # 1,000 comma-separated ranges
    "n[" + ",".join(str(i) for i in range(100_000)) + "]",  # 100,000 indexes in one bracket
    "gpu[1-" + "9" * 100 + "]",
]


@pytest.mark.parametrize(
    "text",
    [
        "gpu[001-128,130]",
        "n[01-03]",
        "gpu[1-5]0",
        "gpu1[0-5]",
        "a[1-3]b[1-2]",
        "rack[1-2]-gpu[01-08]",
        "x[-8--4]",
        "x[-0-3]",
        "x[1-10/3]",
        "a,b,c",
        "node[ 1 - 3 ], h7",
        "gpu[1-10]!gpu[2-3]",
        "gpu[1-10]&gpu[5-20]",
        "gpu[1-10]^gpu[5-20]",
        "gpu-1.example.com",
    ],
)
def test_it_bounds_a_node_set_from_above_without_expanding_it(text) -> None:
    assert nodesets.count_bound(text) >= len(NodeSet(text))
    assert set(nodesets.parse(text, limit=1000)) == set(NodeSet(text))


def test_it_counts_a_union_of_disjoint_ranges_exactly() -> None:
    assert nodesets.count_bound("gpu[001-128,130],login[1-2],mgmt") == 132
    assert nodesets.count_bound("gpu[1-100/2]") == 50
    assert nodesets.count_bound("r[1-4]n[01-32]") == 128


@pytest.mark.parametrize("text", HUGE)
def test_it_refuses_a_node_set_over_the_limit_before_clustershell_sees_it(monkeypatch, text) -> None:
    def never(*args, **kwargs):
        raise AssertionError("NodeSet was called on a node set over the limit")

    monkeypatch.setattr(nodesets, "NodeSet", never)
    started = time.perf_counter()
    with pytest.raises(nodesets.NodeSetTooLarge) as caught:
        nodesets.parse(text, limit=20_000)
    # A generous ceiling for a shared CI machine; bench/bench_nodeset.py measures it (~0.01-3 ms).
    assert time.perf_counter() - started < 2.0
    assert caught.value.bound > 20_000
    assert "more than 20,000 nodes" in str(caught.value) and "KILN_MAX_NODESET" in str(caught.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("n[01-", "unbalanced bracket"),
        ("n]", "unbalanced bracket"),
        ("n[[1]]", "unbalanced bracket"),
        ("n[]", "is not a number"),
        ("n[1_000]", "is not a number"),  # int() would take it; ClusterShell too
        ("n[٣]", "is not a number"),  # Arabic-Indic three: ASCII digits only
        ("n[5-1]", "ends before it starts"),
        ("n[1-9/0]", "at least 1"),
        ("n[1/2]", "a step needs a range"),
        ("n1,", "ends with an operator"),
        ("!n1", "has no node before it"),
        ("n[1-" + "9" * 200 + "]", "more than 120 digits"),
    ],
)
def test_it_says_why_a_malformed_node_set_is_refused(text, message) -> None:
    with pytest.raises(nodesets.NodeSetError, match=message):
        nodesets.parse(text)


def test_it_never_resolves_group_names(monkeypatch) -> None:
    """`@name` would ask ClusterShell's group sources (groups.conf upcalls run commands)."""
    assert list(nodesets.parse("@compute")) == ["@compute"]


def test_it_takes_the_limit_from_the_setting(settings) -> None:
    settings.KILN_MAX_NODESET = 10
    assert len(nodesets.parse("n[01-10]")) == 10
    with pytest.raises(nodesets.NodeSetTooLarge, match="more than 10 nodes"):
        nodesets.parse("n[01-11]")


@pytest.mark.django_db
def test_it_answers_a_huge_node_filter_with_a_400_at_once(client, make_user, cluster, monkeypatch) -> None:
    """The finding: GET /results/?node=gpu[1-10000000] took 22 s and 1.7 GB in a web worker."""
    client.force_login(make_user("vera", "viewer"))
    monkeypatch.setattr(nodesets, "NodeSet", lambda *a, **k: pytest.fail("expanded a node set over the limit"))
    for text in HUGE[:4]:
        started = time.perf_counter()
        response = client.get(reverse("history:result_search"), {"node": text})
        assert time.perf_counter() - started < 2.0  # a page render; bench/bench_nodeset.py times it
        assert response.status_code == 400
        assert "more than 20,000 nodes" in response.content.decode()
        response = client.get(reverse("history:result_search"), {"node": text, "format": "csv"})
        assert response.status_code == 400 and "KILN_MAX_NODESET" in response.content.decode()


@pytest.mark.django_db
def test_it_shows_a_huge_node_set_on_the_run_form_and_starts_nothing(client, make_user, cluster, quick_plan) -> None:
    client.force_login(make_user("otto", "operator"))
    response = client.post(
        reverse("runs:run_start", args=[cluster.name]), {"plan": "unit", "node_set": "n[1-99999999999]"}
    )
    assert response.status_code == 200
    assert "more than 20,000 nodes" in str(response.context["form"].non_field_errors())
    assert Run.objects.count() == 0


@pytest.mark.django_db
def test_it_refuses_a_huge_node_set_in_nodes_select(cluster) -> None:
    with pytest.raises(services.RunStartError, match="KILN_MAX_NODESET"):
        services.nodes_select(cluster=cluster, node_set="n[1-10000000]")


@pytest.mark.django_db
def test_it_refuses_a_huge_node_set_in_kiln_nodes_and_adds_nothing(cluster) -> None:
    before = Node.objects.count()
    with pytest.raises(CommandError, match="more than 20,000 nodes"):
        call_command("kiln_nodes", "add", cluster.name, "gpu[1-10000000]")
    assert Node.objects.count() == before
