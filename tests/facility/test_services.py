"""Facility writes: rules across rows (feeds adding up to 1, phases in use, PDUs that feeds name,
racks of the cluster), rack renames reaching the nodes, and write-only credentials sealed at rest."""

from __future__ import annotations

import pytest

from portal.facility import credentials, services
from portal.facility.models import CoolingLoop, NodeFeed, Pdu, Rack, Ups
from portal.facility.services import CredentialChange, FacilityError, FeedSpec
from tests.facility.conftest import SECRET, SECRET_USER, build_site

pytestmark = pytest.mark.django_db


def node(site, hostname: str = "gpu01"):
    return site.cluster.nodes.get(hostname=hostname)


def test_it_replaces_a_nodes_feeds_when_the_shares_add_up_to_1(site) -> None:
    specs = [FeedSpec("pdu-r1-a", 2, 0.5), FeedSpec("pdu-r1-b", 3, 0.5)]
    services.node_feeds_set(node=node(site), feeds=specs)
    services.node_feeds_set(node=node(site), feeds=[FeedSpec("pdu-r1-a", 1, 1.0)])
    assert list(NodeFeed.objects.values_list("pdu__name", "phase", "share")) == [("pdu-r1-a", 1, 1.0)]


def test_it_accepts_shares_rounded_to_two_decimals(site) -> None:
    specs = [FeedSpec("pdu-r1-a", k, 0.33) for k in (1, 2, 3)]  # 0.99
    assert len(services.node_feeds_set(node=node(site), feeds=specs)) == 3


@pytest.mark.parametrize(
    ("specs", "message"),
    [
        ([FeedSpec("pdu-r1-a", 1, 0.5)], "add up to 0.5, not 1"),
        ([FeedSpec("pdu-r1-a", 1, 0.7), FeedSpec("pdu-r1-b", 1, 0.7)], "add up to 1.4"),
        ([FeedSpec("pdu-r1-a", 1, 0.5), FeedSpec("pdu-r1-a", 1, 0.5)], "phase 1 given twice"),
        ([FeedSpec("pdu-nowhere", 1, 1.0)], "no PDU 'pdu-nowhere'"),
        ([FeedSpec("pdu-r1-a", 4, 1.0)], "field phase"),
        ([FeedSpec("pdu-r1-a", 1, 0.0), FeedSpec("pdu-r1-b", 1, 1.0)], "field share"),
    ],
)
def test_it_refuses_bad_feeds_and_keeps_the_old_ones(site, specs, message: str) -> None:
    services.node_feeds_set(node=node(site), feeds=[FeedSpec("pdu-r1-b", 2, 1.0)])
    with pytest.raises(FacilityError, match=message):
        services.node_feeds_set(node=node(site), feeds=specs)
    assert list(NodeFeed.objects.values_list("pdu__name", "phase", "share")) == [("pdu-r1-b", 2, 1.0)]


def test_no_feeds_returns_the_node_to_the_default(site) -> None:
    services.node_feeds_set(node=node(site), feeds=[FeedSpec("pdu-r1-b", 2, 1.0)])
    services.node_feeds_set(node=node(site), feeds=[])
    assert not NodeFeed.objects.exists()


def test_it_refuses_another_clusters_pdu_for_a_node(site) -> None:
    build_site("other")
    with pytest.raises(FacilityError, match="no PDU"):
        services.node_feeds_set(node=node(site), feeds=[FeedSpec("pdu-x", 1, 1.0)])


def test_renaming_a_rack_renames_it_on_its_nodes(site) -> None:
    rack = site.racks["r1"]
    rack.name = "R01"
    services.rack_save(rack=rack)
    assert set(site.cluster.nodes.filter(rack="R01").values_list("hostname", flat=True)) == {
        "gpu01", "gpu02", "gpu03", "gpu04"
    }  # fmt: skip
    assert not site.cluster.nodes.filter(rack="r1").exists()


def test_it_refuses_fewer_phases_than_the_feeds_use(site) -> None:
    services.node_feeds_set(node=node(site), feeds=[FeedSpec("pdu-r1-a", 3, 1.0)])
    pdu = site.pdus["pdu-r1-a"]
    pdu.phases, pdu.breaker_a = 1, [32.0]
    with pytest.raises(FacilityError, match="gpu01 are fed from a phase above 1"):
        services.pdu_save(pdu=pdu)
    assert Pdu.objects.get(name="pdu-r1-a").phases == 3


def test_it_keeps_a_pdu_or_rack_that_explicit_feeds_name(site) -> None:
    services.node_feeds_set(node=node(site), feeds=[FeedSpec("pdu-r1-a", 1, 1.0)])
    with pytest.raises(FacilityError, match="nodes gpu01 draw from it"):
        services.item_delete(item=site.pdus["pdu-r1-a"])
    with pytest.raises(FacilityError, match="nodes gpu01 draw from it"):
        services.item_delete(item=site.racks["r1"])
    assert Pdu.objects.filter(name="pdu-r1-a").exists() and Rack.objects.filter(name="r1").exists()
    services.item_delete(item=site.pdus["pdu-r2-a"])  # no explicit feed names it
    services.item_delete(item=site.racks["r3"])  # with its PDUs
    assert set(Pdu.objects.values_list("name", flat=True)) == {"pdu-r1-a", "pdu-r1-b", "pdu-r2-b"}


def test_deleting_the_cluster_takes_its_facility_and_feeds(site) -> None:
    services.node_feeds_set(node=node(site), feeds=[FeedSpec("pdu-r1-a", 1, 1.0)])
    site.cluster.delete()
    assert not (Rack.objects.exists() or Pdu.objects.exists() or NodeFeed.objects.exists() or Ups.objects.exists())


def test_a_ups_or_loop_carries_only_racks_of_its_cluster(site) -> None:
    other = build_site("other")
    with pytest.raises(FacilityError, match="field racks"):
        services.ups_save(ups=site.ups, racks=[other.racks["r1"]])
    with pytest.raises(FacilityError, match="field racks"):
        services.loop_save(loop=site.loop, racks=[site.racks["r1"], other.racks["r2"]])
    assert site.ups.racks.count() == 3


# --- credentials ---------------------------------------------------------------------------------


def sealed_pdu(site) -> Pdu:
    pdu = site.pdus["pdu-r1-a"]
    pdu.endpoint_url = "https://pdu-r1-a.example.net/redfish/v1"
    return services.pdu_save(pdu=pdu, credential=CredentialChange(SECRET_USER, SECRET))


def stored(item) -> credentials.Credential:
    item.refresh_from_db()
    return credentials.unseal(item.credential_sealed)


def test_it_stores_only_the_sealed_credential(site) -> None:
    pdu = sealed_pdu(site)
    raw = Pdu.objects.filter(pk=pdu.pk).values_list("credential_sealed", flat=True).get()
    assert SECRET not in raw and SECRET_USER not in raw and raw.startswith("gAAAA")  # a Fernet token
    assert stored(pdu) == credentials.Credential(SECRET_USER, SECRET)


def test_empty_inputs_keep_the_stored_credential_and_one_input_changes_only_itself(site) -> None:
    pdu = sealed_pdu(site)
    pdu.voltage_v = 240.0
    services.pdu_save(pdu=pdu, credential=CredentialChange())
    assert stored(pdu) == credentials.Credential(SECRET_USER, SECRET)
    services.pdu_save(pdu=pdu, credential=CredentialChange(password="new-pw"))
    assert stored(pdu) == credentials.Credential(SECRET_USER, "new-pw")
    services.pdu_save(pdu=pdu, credential=CredentialChange(username="ops"))
    assert stored(pdu) == credentials.Credential("ops", "new-pw")


def test_clear_removes_the_credential(site) -> None:
    pdu = services.pdu_save(pdu=sealed_pdu(site), credential=CredentialChange(clear=True))
    pdu.refresh_from_db()
    assert pdu.credential_sealed == "" and not pdu.has_credential


def test_a_first_credential_needs_both_inputs(site) -> None:
    pdu = site.pdus["pdu-r1-a"]
    with pytest.raises(FacilityError, match="both a user name and a password"):
        services.pdu_save(pdu=pdu, credential=CredentialChange(password=SECRET))


@pytest.mark.parametrize(
    "url",
    ["https://attacker.example.org/redfish/v1", "http://pdu-r1-a.example.net/redfish/v1",
     "https://pdu-r1-a.example.net:8443/redfish/v1", ""],
)  # fmt: skip
def test_moving_the_endpoint_needs_the_password_again(site, url: str) -> None:
    """Whoever may edit the URL must not send the stored password to a host of their choosing."""
    pdu = sealed_pdu(site)
    pdu.endpoint_url = url
    with pytest.raises(FacilityError, match="moved to another host"):
        services.pdu_save(pdu=pdu)
    pdu.refresh_from_db()
    assert pdu.endpoint_url == "https://pdu-r1-a.example.net/redfish/v1"
    pdu.endpoint_url = url
    services.pdu_save(pdu=pdu, credential=CredentialChange(password="entered-again"))
    assert stored(pdu) == credentials.Credential(SECRET_USER, "entered-again")


def test_a_new_path_on_the_same_host_keeps_the_credential(site) -> None:
    pdu = sealed_pdu(site)
    pdu.endpoint_url = "https://PDU-R1-A.example.net:443/redfish/v1/PowerEquipment/RackPDUs/1"
    services.pdu_save(pdu=pdu)
    assert stored(pdu).password == SECRET


def test_without_a_key_nothing_is_sealed(site, settings) -> None:
    settings.KILN_CREDENTIAL_KEY = ""
    pdu = site.pdus["pdu-r1-a"]
    with pytest.raises(FacilityError, match="no credential key.*kiln_init"):
        services.pdu_save(pdu=pdu, credential=CredentialChange(SECRET_USER, SECRET))
    assert not Pdu.objects.get(pk=pdu.pk).credential_sealed


def test_keys_rotate_the_first_seals_every_one_opens(site, settings, credential_key: str) -> None:
    pdu = sealed_pdu(site)
    settings.KILN_CREDENTIAL_KEY = f"{credentials.generate_key()},{credential_key}"
    assert stored(pdu).password == SECRET
    services.pdu_save(pdu=pdu, credential=CredentialChange(password="rotated"))
    settings.KILN_CREDENTIAL_KEY = settings.KILN_CREDENTIAL_KEY.split(",")[0]
    assert stored(pdu).password == "rotated"


def test_a_loop_keeps_its_credential_like_a_pdu(site) -> None:
    loop = site.loop
    loop.endpoint_url = "https://cdu1.example.net/redfish/v1"
    services.loop_save(loop=loop, racks=[site.racks["r1"]], credential=CredentialChange(SECRET_USER, SECRET))
    loop = CoolingLoop.objects.get(pk=loop.pk)
    assert credentials.unseal(loop.credential_sealed).password == SECRET and loop.racks.count() == 1


def test_reprs_of_changes_and_credentials_hide_them() -> None:
    for obj in (CredentialChange(SECRET_USER, SECRET), credentials.Credential(SECRET_USER, SECRET)):
        assert SECRET not in repr(obj) and SECRET_USER not in repr(obj) and SECRET not in str(obj)
