"""The operators' forms for clusters and nodes: who may use them, what they refuse, and that they
refuse it in the same words as `kiln cluster` / `kiln nodes` and the REST API (one set of rules)."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from portal.inventory.models import Cluster, Node

pytestmark = pytest.mark.django_db

ADD_CLUSTER = reverse("inventory:cluster_create")


def _add_nodes(name: str = "c1") -> str:
    return reverse("inventory:node_add", args=[name])


def _edit_cluster(name: str = "c1") -> str:
    return reverse("inventory:cluster_edit", args=[name])


def _edit_node(hostname: str = "n01", name: str = "c1") -> str:
    return reverse("inventory:node_edit", args=[name, hostname])


def _cluster_fields(**changes: str) -> dict[str, str]:
    fields = {"name": "prod", "customer": "ACME", "site": "DC1", "profile": "H100-SXM-8", "ssh_user": "kiln"}
    fields.update(
        ssh_port="22", jump_host="", known_hosts="gpu001 ssh-ed25519 AAAA", queue="default", scheduler="slurm"
    )
    fields.update(changes)
    return fields


def _node_fields(**changes: str) -> dict[str, str]:
    fields = {"hostname": "n01", "address": "10.1.0.1", "ssh_port": "", "rack": "R2", "position": "U12"}
    fields.update(group="rail-a", serial="SN-1", expected_gpus="8")
    fields.update(changes)
    return fields


@pytest.fixture
def as_role(client: Client, make_user):
    def login(role: str) -> Client:
        if role == "superuser":
            client.force_login(make_user("root-user", superuser=True))
        elif role != "anonymous":
            client.force_login(make_user(f"{role}-user", role))
        return client

    return login


def _errors(response) -> str:
    form = response.context["form"]
    return " ".join(str(e) for errors in form.errors.values() for e in errors)


# --- who --------------------------------------------------------------------------------------------


def test_it_sends_anonymous_users_to_the_login_and_writes_nothing(as_role, cluster) -> None:
    client = as_role("anonymous")
    for url, body in (
        (ADD_CLUSTER, _cluster_fields()),
        (_edit_cluster(), _cluster_fields(site="X")),
        (_add_nodes(), {"nodes": "x[1-2]", "add": "1"}),
        (_edit_node(), _node_fields(rack="R9")),
    ):
        for response in (client.get(url), client.post(url, body)):
            assert response.status_code == 302 and response["Location"].startswith("/login/?next="), url
    assert list(Cluster.objects.values_list("name", "site")) == [("c1", "")]
    assert set(Node.objects.values_list("rack", flat=True)) == {"R1"} and Node.objects.count() == 4


@pytest.mark.parametrize("role", ["viewer", "approver"])
def test_it_forbids_readers_every_form_and_shows_them_no_button(as_role, cluster, role) -> None:
    client = as_role(role)
    for url, body in (
        (ADD_CLUSTER, _cluster_fields()),
        (_edit_cluster(), _cluster_fields(site="X")),
        (_add_nodes(), {"nodes": "x[1-2]", "add": "1"}),
        (_edit_node(), _node_fields(rack="R9")),
    ):
        assert client.get(url).status_code == 403, url
        assert client.post(url, body).status_code == 403, url
    assert list(Cluster.objects.values_list("name", "site")) == [("c1", "")]
    assert set(Node.objects.values_list("rack", flat=True)) == {"R1"} and Node.objects.count() == 4
    pages = [reverse("inventory:cluster_list"), reverse("inventory:cluster_detail", args=["c1"])]
    text = "".join(
        client.get(url).content.decode() for url in [*pages, reverse("history:node_detail", args=["c1", "n01"])]
    )
    for url in (ADD_CLUSTER, _edit_cluster(), _add_nodes(), _edit_node()):
        assert url not in text


@pytest.mark.parametrize("role", ["operator", "superuser"])
def test_it_shows_operators_the_buttons(as_role, cluster, role) -> None:
    client = as_role(role)
    assert (
        f'href="{ADD_CLUSTER}" id="cluster-add-link">Add cluster<'
        in client.get(reverse("inventory:cluster_list")).content.decode()
    )
    page = client.get(reverse("inventory:cluster_detail", args=["c1"])).content.decode()
    assert f'href="{_add_nodes()}" id="node-add-link">Add nodes<' in page
    assert f'href="{_edit_cluster()}" id="cluster-edit-link">Edit cluster<' in page
    node_page = client.get(reverse("history:node_detail", args=["c1", "n01"])).content.decode()
    assert f'href="{_edit_node()}" id="node-edit-link">Edit node<' in node_page
    for url in (ADD_CLUSTER, _edit_cluster(), _add_nodes(), _edit_node()):
        assert client.get(url).status_code == 200, url


# --- clusters ---------------------------------------------------------------------------------------


def test_an_operator_adds_a_cluster_and_is_sent_to_add_its_nodes(as_role) -> None:
    response = as_role("operator").post(ADD_CLUSTER, _cluster_fields(jump_host="ops@bastion:2222"))
    assert response.status_code == 302 and response["Location"] == _add_nodes("prod")
    cluster = Cluster.objects.get(name="prod")
    assert (cluster.customer, cluster.ssh_user, cluster.jump_host, cluster.scheduler) == (
        "ACME",
        "kiln",
        "ops@bastion:2222",
        "slurm",
    )
    assert (cluster.transport, cluster.ssh_key_path, cluster.known_hosts) == ("ssh", "", "gpu001 ssh-ed25519 AAAA")


def test_the_operators_form_has_no_transport_or_key_path_and_refuses_them_when_sent(as_role) -> None:
    client = as_role("operator")
    page = client.get(ADD_CLUSTER).content.decode()
    assert 'name="transport"' not in page and 'name="ssh_key_path"' not in page
    assert "a superuser sets them in the admin" in page
    for sent in ({"ssh_key_path": "/root/.ssh/id_ed25519"}, {"transport": "local"}, {"transport": "ssh"}):
        response = client.post(ADD_CLUSTER, _cluster_fields(**sent))
        assert response.status_code == 200
        assert f"only a superuser may set {next(iter(sent))}" in _errors(response)
    assert not Cluster.objects.exists()


def test_an_operator_cannot_change_a_clusters_key_path_or_transport(as_role, cluster) -> None:
    Cluster.objects.filter(pk=cluster.pk).update(ssh_key_path="/etc/kiln/id_ed25519")
    client = as_role("operator")
    response = client.post(_edit_cluster(), _cluster_fields(ssh_key_path="/root/.ssh/id_rsa", transport="ssh"))
    assert "only a superuser may set transport and ssh_key_path" in _errors(response)
    cluster.refresh_from_db()
    assert (cluster.transport, cluster.ssh_key_path, cluster.customer) == ("local", "/etc/kiln/id_ed25519", "")


def test_no_form_offers_the_key_path_or_transport_even_to_a_superuser(as_role, cluster, tmp_path: Path) -> None:
    client = as_role("superuser")
    for url in (ADD_CLUSTER, _edit_cluster()):
        page = client.get(url).content.decode()
        assert 'name="ssh_key_path"' not in page and 'name="transport"' not in page
        assert "a superuser sets them in" in page
    key = tmp_path / "id_ed25519"
    key.write_text("only its existence is checked\n")
    response = client.post(_edit_cluster(), _cluster_fields(ssh_key_path=str(key), transport="ssh"))
    assert "only a superuser may set transport and ssh_key_path, in the admin" in _errors(response)
    cluster.refresh_from_db()
    assert (cluster.transport, cluster.ssh_key_path) == ("local", "")


def test_an_operator_edits_a_cluster_but_not_its_name(as_role, cluster) -> None:
    client = as_role("operator")
    assert 'name="name"' not in client.get(_edit_cluster()).content.decode()
    response = client.post(_edit_cluster(), _cluster_fields(name="renamed", site="DC2", queue="site-b"))
    assert response.status_code == 302 and response["Location"] == reverse("inventory:cluster_detail", args=["c1"])
    cluster.refresh_from_db()
    assert (cluster.name, cluster.site, cluster.queue, cluster.transport) == ("c1", "DC2", "site-b", "local")


def test_an_operator_sets_the_acceptance_plan_and_check_overhead_as_the_cli_does(as_role, cluster) -> None:
    from portal.catalog.models import TestPlan

    quick = TestPlan.objects.get(slug="quick")
    fields = _cluster_fields(acceptance_plan=str(quick.pk), check_overhead_s="1.5")
    client = as_role("operator")
    assert client.post(_edit_cluster(), fields).status_code == 302
    cluster.refresh_from_db()
    assert (cluster.acceptance_plan, cluster.check_overhead_s) == (quick, 1.5)
    client.post(_edit_cluster(), _cluster_fields(acceptance_plan="", check_overhead_s=""))
    cluster.refresh_from_db()
    assert (cluster.acceptance_plan, cluster.check_overhead_s) == (None, None)


def test_it_warns_when_a_cluster_has_no_host_keys(as_role) -> None:
    response = as_role("operator").post(ADD_CLUSTER, _cluster_fields(known_hosts=""), follow=True)
    assert "No known_hosts given: every connection will be refused" in response.content.decode()


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"name": "bad name!"}, "name", "letters, digits, '.', '_' and '-' only"),
        ({"name": "-rf"}, "name", "letters, digits"),
        ({"ssh_user": "-oProxyCommand=x"}, "ssh_user", "not starting with '-'"),
        ({"jump_host": "bastion:ssh"}, "jump_host", "is not a number"),
        ({"jump_host": "ops@"}, "jump_host", "expected"),
        ({"jump_host": "-oProxyCommand=sh"}, "jump_host", ""),
        ({"ssh_port": "70000"}, "ssh_port", "less than or equal to 65535"),
        ({"queue": "a,b"}, "queue", "a queue name"),
        ({"name": "x" * 64}, "name", "at most 63 characters"),
        ({"jump_host": "bas\ttion"}, "jump_host", ""),
        ({"check_overhead_s": "nan"}, "check_overhead_s", ""),
        ({"check_overhead_s": "-1"}, "check_overhead_s", "greater than or equal to 0"),
        ({"check_overhead_s": "1e400"}, "check_overhead_s", ""),
        ({"acceptance_plan": "999999"}, "acceptance_plan", "Select a valid choice"),
    ],
)
def test_it_refuses_bad_cluster_fields_at_the_field(as_role, changes, field, message) -> None:
    response = as_role("operator").post(ADD_CLUSTER, _cluster_fields(**changes))
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert field in errors and message in " ".join(errors[field]), errors
    assert not Cluster.objects.exists()


@pytest.mark.parametrize("value", ["prod\x00", "prod\x1b[31m", "prod\x7f"])
def test_it_refuses_control_characters_before_any_form(as_role, value) -> None:
    client = as_role("operator")
    for url, body in ((ADD_CLUSTER, _cluster_fields(name=value)), (ADD_CLUSTER, _cluster_fields(known_hosts=value))):
        response = client.post(url, body)
        assert response.status_code == 400 and "Kiln does not accept" in response.content.decode()
    assert not Cluster.objects.exists()


def test_a_trailing_newline_is_stripped_not_stored(as_role) -> None:
    # The validators' `$` would let 'prod\n' through; the forms strip it before they run.
    assert (
        as_role("operator").post(ADD_CLUSTER, _cluster_fields(name="prod\n", jump_host="bastion\n")).status_code == 302
    )
    assert list(Cluster.objects.values_list("name", "jump_host")) == [("prod", "bastion")]


def test_a_taken_name_is_refused_in_the_words_of_the_command_line(as_role, cluster) -> None:
    response = as_role("operator").post(ADD_CLUSTER, _cluster_fields(name="c1"))
    assert "cluster 'c1' already exists" in _errors(response)
    with pytest.raises(CommandError, match="cluster 'c1' already exists"):
        call_command("kiln_cluster", "create", "c1", stdout=StringIO(), stderr=StringIO())
    assert Cluster.objects.count() == 1


def test_the_cluster_pages_escape_what_was_typed(as_role) -> None:
    client = as_role("operator")
    response = client.post(ADD_CLUSTER, _cluster_fields(customer="<script>alert(1)</script>"), follow=True)
    assert response.status_code == 200
    page = client.get(reverse("inventory:cluster_detail", args=["prod"])).content.decode()
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


# --- nodes ------------------------------------------------------------------------------------------


def test_an_operator_previews_then_adds_a_range_of_nodes_with_addresses(as_role, cluster) -> None:
    client = as_role("operator")
    body = {"nodes": "gpu[001-064]", "address": "10.0.0.[1-64]", "rack": "R7", "expected_gpus": "8"}
    response = client.post(_add_nodes(), {**body, "preview": "1"})
    assert response.status_code == 200
    assert response.context["preview"]["created"] == "gpu[001-064]"
    assert 'id="node-add-apply"' in response.content.decode()
    assert Node.objects.count() == 4  # the preview wrote nothing
    response = client.post(_add_nodes(), {**body, "add": "1"})
    assert response.status_code == 302 and response["Location"] == reverse("inventory:cluster_detail", args=["c1"])
    added = Node.objects.filter(cluster=cluster, hostname__startswith="gpu").order_by("hostname")
    assert added.count() == 64
    assert (added[0].address, added[63].address, added[63].rack, added[63].expected_gpus) == (
        "10.0.0.1",
        "10.0.0.64",
        "R7",
        8,
    )


def test_adding_nodes_that_exist_updates_them_and_never_duplicates(as_role, cluster) -> None:
    client = as_role("operator")
    response = client.post(_add_nodes(), {"nodes": "n[03-06]", "rack": "R9", "preview": "1"})
    assert (response.context["preview"]["created"], response.context["preview"]["updated"]) == ("n[05-06]", "n[03-04]")
    response = client.post(_add_nodes(), {"nodes": "n[03-06]", "rack": "R9", "add": "1"}, follow=True)
    assert "2 added (n[05-06]), 2 already there, updated (n[03-04])" in response.content.decode()
    assert Node.objects.filter(cluster=cluster).count() == 6
    assert dict(Node.objects.values_list("hostname", "rack")) == {
        "n01": "R1",
        "n02": "R1",
        "n03": "R9",
        "n04": "R9",
        "n05": "R9",
        "n06": "R9",
    }


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"nodes": "gpu[001-"}, "node set 'gpu[001-'"),
        ({"nodes": "gpu[1-99999999]"}, "the most a node set may name (KILN_MAX_NODESET)"),
        ({"nodes": "gpu[001-004]", "address": "10.0.0.[1-3]"}, "4 hostnames but 3 addresses"),
        ({"nodes": "gpu_01"}, "gpu_01: hostname: a hostname: letters, digits, '.' and '-' only"),
        ({"nodes": "gpu[1-2]", "address": "host[1-2]_x"}, "gpu1: address: a hostname"),
        ({"nodes": "@all"}, "@all: hostname: a hostname"),  # a group is never resolved
    ],
)
def test_it_refuses_a_bad_node_set_in_the_same_words_as_the_command_line_and_the_api(
    as_role, cluster, body, message
) -> None:
    client = as_role("operator")
    for button in ("preview", "add"):
        response = client.post(_add_nodes(), {**body, button: "1"})
        assert response.status_code == 200
        assert message in _errors(response), button
        assert response.context["preview"] is None
    args = ["kiln_nodes", "add", "c1", body["nodes"]] + (["--address", body["address"]] if "address" in body else [])
    with pytest.raises(CommandError) as cli:
        call_command(*args, stdout=StringIO(), stderr=StringIO())
    assert message in str(cli.value)
    api = client.post("/api/v1/nodes/", json.dumps({"cluster": cluster.pk, **body}), content_type="application/json")
    assert api.status_code == 400 and message in api.json()["detail"]
    assert Node.objects.count() == 4


def test_the_node_add_form_is_as_long_as_the_apis(as_role, cluster) -> None:
    response = as_role("operator").post(_add_nodes(), {"nodes": "a" * 10_001, "preview": "1"})
    assert "at most 10000 characters" in _errors(response)


def test_an_operator_edits_one_node(as_role, cluster) -> None:
    response = as_role("operator").post(_edit_node(), _node_fields(hostname="n01b", ssh_port="2222"))
    assert response.status_code == 302
    assert response["Location"] == reverse("history:node_detail", args=["c1", "n01b"])
    node = Node.objects.get(cluster=cluster, hostname="n01b")
    assert (node.address, node.ssh_port, node.rack, node.position, node.expected_gpus) == (
        "10.1.0.1",
        2222,
        "R2",
        "U12",
        8,
    )
    assert Node.objects.filter(cluster=cluster).count() == 4


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"hostname": "n02"}, "Node with this Cluster and Hostname already exists."),
        ({"hostname": "-oProxyCommand=x"}, "a hostname: letters, digits, '.' and '-' only"),
        ({"address": "10.0.0.1;reboot"}, "a hostname: letters, digits, '.' and '-' only"),
        ({"address": "-oProxyCommand=x"}, "a hostname"),
        ({"ssh_port": "0"}, "greater than or equal to 1"),
        ({"expected_gpus": "-1"}, "greater than or equal to 0"),
    ],
)
def test_it_refuses_a_bad_node_edit_and_keeps_the_node(as_role, cluster, changes, message) -> None:
    response = as_role("operator").post(_edit_node(), _node_fields(**changes))
    assert response.status_code == 200
    assert message in _errors(response)
    node = Node.objects.get(cluster=cluster, hostname="n01")
    assert (node.address, node.rack) == ("", "R1")
    assert 'href="/clusters/c1/nodes/n01/"' in response.content.decode()  # the page names the node as stored


def test_an_unknown_node_or_cluster_is_a_404(as_role, cluster) -> None:
    client = as_role("operator")
    assert client.get(_edit_node("zz99")).status_code == 404
    assert client.get(_edit_cluster("nope")).status_code == 404
    assert client.get(_add_nodes("nope")).status_code == 404
