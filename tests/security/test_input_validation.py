"""What reaches SSH and remote commands is validated where it is entered (forms, admin, CSV, the
commands): an address, a port, a user or a jump host can never read as an option or a command, a
key path is absolute, and `local` is refused where the server does not allow it."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command

from portal.inventory.models import Cluster, Node
from portal.inventory.services import InventoryError, nodes_import_csv

pytestmark = pytest.mark.django_db

OPTIONS = ["-oProxyCommand=id", "--help", "a b", "host;id", "$(id)", "`id`", "host\nid", ""]


def errors_of(obj: Cluster | Node) -> dict[str, list[str]]:
    try:
        obj.full_clean()
    except ValidationError as exc:
        return exc.message_dict
    return {}


@pytest.mark.parametrize("value", [v for v in OPTIONS if v])
def test_it_refuses_a_node_address_that_is_not_an_address(cluster, value) -> None:
    assert "address" in errors_of(Node(cluster=cluster, hostname="x01", address=value))


@pytest.mark.parametrize("value", ["10.0.0.7", "fe80::1", "gpu01.example.org", ""])
def test_it_accepts_addresses_and_hostnames(cluster, value) -> None:
    assert "address" not in errors_of(Node(cluster=cluster, hostname="x01", address=value))


@pytest.mark.parametrize(
    "field,value",
    [
        ("ssh_user", "-oProxyCommand=id"),
        ("ssh_user", "root;id"),
        ("ssh_port", 0),
        ("ssh_port", 65536),
        ("jump_host", "-J evil"),
        ("jump_host", "user@-oProxyCommand=id"),
        ("jump_host", "-oX@bastion"),
        ("jump_host", "bastion:99999"),
        ("ssh_key_path", "id_ed25519"),
        ("ssh_key_path", "/keys/id\n"),
    ],
)
def test_it_refuses_cluster_access_fields_that_are_not_what_they_say(field, value) -> None:
    cluster = Cluster(name="v1", **{field: value})
    assert field in errors_of(cluster)


def test_it_accepts_a_jump_host_and_an_absolute_key_path() -> None:
    cluster = Cluster(name="v1", jump_host="admin@bastion.example.org:2222", ssh_key_path="/etc/kiln/ssh/id_ed25519")
    assert errors_of(cluster) == {}


def test_the_local_transport_is_refused_unless_the_server_allows_it(settings) -> None:
    settings.KILN_ALLOW_LOCAL_TRANSPORT = False
    assert "KILN_ALLOW_LOCAL_TRANSPORT" in " ".join(errors_of(Cluster(name="v1", transport="local"))["transport"])
    settings.KILN_ALLOW_LOCAL_TRANSPORT = True
    assert errors_of(Cluster(name="v1", transport="local")) == {}


def test_kiln_cluster_refuses_local_where_the_server_does_not_allow_it(settings) -> None:
    settings.KILN_ALLOW_LOCAL_TRANSPORT = False
    with pytest.raises(CommandError, match="KILN_ALLOW_LOCAL_TRANSPORT"):
        call_command("kiln_cluster", "create", "v1", "--transport", "local", stdout=StringIO(), stderr=StringIO())
    assert not Cluster.objects.filter(name="v1").exists()


def test_kiln_cluster_stores_the_key_path_absolute(tmp_path, monkeypatch) -> None:
    (tmp_path / "id_ed25519").write_text("key")
    monkeypatch.chdir(tmp_path)
    call_command("kiln_cluster", "create", "v1", "--ssh-key", "id_ed25519", stdout=StringIO(), stderr=StringIO())
    assert Cluster.objects.get(name="v1").ssh_key_path == str(tmp_path / "id_ed25519")


@pytest.mark.parametrize(
    "row",
    [
        "x01,-oProxyCommand=id,22",
        "x01,10.0.0.1,0",
        "x01,10.0.0.1,70000",
        "-x01,10.0.0.1,22",
    ],
)
def test_csv_import_refuses_fields_that_would_reach_ssh_as_options(cluster, row) -> None:
    with pytest.raises(InventoryError):
        nodes_import_csv(cluster=cluster, text=f"hostname,address,ssh_port\n{row}\n")
    assert not Node.objects.filter(cluster=cluster, hostname="x01").exists()


def test_csv_import_has_no_environment_or_transport_column(cluster) -> None:
    for column in ("local_env", "transport", "ssh_key_path"):
        with pytest.raises(InventoryError, match="unknown CSV column"):
            nodes_import_csv(cluster=cluster, text=f"hostname,{column}\nx01,whatever\n")
