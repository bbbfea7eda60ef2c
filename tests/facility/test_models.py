"""Validation of the facility model: names, budgets, voltages, breakers per phase, endpoint URLs,
feeds (phase within the PDU's, share in (0, 1], same cluster), and the fluids the judge knows."""

from __future__ import annotations

import math

import pytest
from django.core.exceptions import ValidationError

from checks.soak.physics import FLUIDS
from portal.facility import services
from portal.facility.models import Fluid, NodeFeed, Pdu, Rack, breakers_parse, breakers_text, number_text
from portal.facility.services import FacilityError
from tests.facility.conftest import build_site

pytestmark = pytest.mark.django_db


def test_it_offers_exactly_the_fluids_the_judge_knows() -> None:
    assert {c.value for c in Fluid} == set(FLUIDS)


@pytest.mark.parametrize(
    ("text", "phases", "expected"),
    [
        ("32", 3, [32.0, 32.0, 32.0]),
        ("32;32;16", 3, [32.0, 32.0, 16.0]),
        (" 16 ", 1, [16.0]),
        ("63,63,63", 3, [63.0] * 3),
    ],
)
def test_it_reads_one_breaker_for_every_phase_or_one_per_phase(text: str, phases: int, expected: list[float]) -> None:
    assert breakers_parse(text, phases) == expected


@pytest.mark.parametrize(("text", "phases"), [("32;32", 3), ("32;16", 1), ("", 3), ("32;;16", 3), ("thirty", 1)])
def test_it_refuses_a_breaker_list_that_does_not_fit_the_phases(text: str, phases: int) -> None:
    with pytest.raises(ValidationError):
        breakers_parse(text, phases)


def test_breaker_text_reads_back_the_same() -> None:
    for values in ([32.0] * 3, [32.0, 32.0, 16.0], [12.5]):
        assert breakers_parse(breakers_text(values), len(values)) == values
    assert breakers_text([32.0, 32.0, 32.0]) == "32" and number_text(0.1) == "0.1" and number_text(1 / 6) == repr(1 / 6)


def rack_errors(**fields) -> set[str]:
    cluster = build_site().cluster
    values = {"name": "rx", "power_budget_kw": 40.0, "cooling_budget_kw": 40.0, **fields}
    with pytest.raises(FacilityError) as caught:
        services.rack_save(rack=Rack(cluster=cluster, **values))
    return set(caught.value.fields)


@pytest.mark.parametrize(
    ("fields", "bad"),
    [
        ({"power_budget_kw": 0.0}, "power_budget_kw"),
        ({"power_budget_kw": -5.0}, "power_budget_kw"),
        ({"cooling_budget_kw": math.nan}, "cooling_budget_kw"),
        ({"cooling_budget_kw": math.inf}, "cooling_budget_kw"),
        ({"power_budget_kw": 40_000.0}, "power_budget_kw"),  # W typed as kW
        ({"name": "=cmd|' /C calc'!A0"}, "name"),  # a spreadsheet formula
        ({"name": ""}, "name"),
        ({"room": "-hall"}, "room"),
    ],
)
def test_it_refuses_impossible_racks(fields: dict, bad: str) -> None:
    assert bad in rack_errors(**fields)


def test_rack_names_are_unique_per_cluster_only(site) -> None:
    with pytest.raises(FacilityError, match="name"):
        services.rack_save(rack=Rack(cluster=site.cluster, name="r1", power_budget_kw=1, cooling_budget_kw=1))
    other = build_site("other")
    assert Rack.objects.filter(name="r1", cluster=other.cluster).exists()


def pdu(site, **fields) -> Pdu:
    values = {
        "rack": site.racks["r1"],
        "name": "pdu-x",
        "feed": "A",
        "phases": 3,
        "voltage_v": 230.0,
        "breaker_a": [32.0] * 3,
    }
    return Pdu(**{**values, **fields})


@pytest.mark.parametrize(
    ("fields", "bad"),
    [
        ({"breaker_a": [32.0, 32.0]}, "breaker_a"),
        ({"phases": 1}, "breaker_a"),  # three ratings for one phase
        ({"phases": 2, "breaker_a": [32.0, 32.0]}, "phases"),
        ({"breaker_a": [32.0, -1.0, 32.0]}, "breaker_a"),
        ({"breaker_a": [32.0, math.nan, 32.0]}, "breaker_a"),
        ({"breaker_a": [32.0, 5000.0, 32.0]}, "breaker_a"),
        ({"breaker_a": ["32", "32", "32"]}, "breaker_a"),
        ({"voltage_v": 400.0}, "voltage_v"),  # phase-to-phase, not phase-to-neutral
        ({"voltage_v": 12.0}, "voltage_v"),
        ({"feed": "C"}, "feed"),
        ({"endpoint_url": "ftp://pdu.example.net/"}, "endpoint_url"),
        ({"endpoint_url": "https://admin:pw@pdu.example.net/redfish/v1"}, "endpoint_url"),
        ({"endpoint_url": "pdu.example.net"}, "endpoint_url"),
        ({"name": "pdu-r2-a"}, "__all__"),  # another rack's PDU of the same cluster has that name
    ],
)
def test_it_refuses_impossible_pdus(site, fields: dict, bad: str) -> None:
    with pytest.raises(FacilityError) as caught:
        services.pdu_save(pdu=pdu(site, **fields))
    assert bad in caught.value.fields, caught.value
    assert not Pdu.objects.filter(name="pdu-x").exists()


def test_a_pdu_takes_its_racks_cluster_and_integer_breakers_as_amperes(site) -> None:
    saved = services.pdu_save(pdu=pdu(site, breaker_a=[32, 32, 16], endpoint_url="http://10.0.0.5:8000/redfish/v1"))
    saved.refresh_from_db()
    assert saved.cluster == site.cluster and saved.breaker_a == [32.0, 32.0, 16.0]


@pytest.mark.parametrize(("phase", "share"), [(4, 0.5), (0, 0.5), (1, 0.0), (1, 1.5), (1, -0.5), (1, math.nan)])
def test_it_refuses_a_feed_outside_the_pdu_or_a_share_outside_0_1(site, phase: int, share: float) -> None:
    node = site.cluster.nodes.get(hostname="gpu01")
    feed = NodeFeed(node=node, pdu=site.pdus["pdu-r1-a"], phase=phase, share=share)
    with pytest.raises(ValidationError):
        feed.full_clean()


def test_a_single_phase_pdu_has_only_phase_1(site) -> None:
    single = services.pdu_save(pdu=pdu(site, name="pdu-1ph", phases=1, breaker_a=[16.0]))
    node = site.cluster.nodes.get(hostname="gpu01")
    with pytest.raises(ValidationError, match="1 phase"):
        NodeFeed(node=node, pdu=single, phase=2, share=0.5).full_clean()


def test_a_node_cannot_draw_from_another_clusters_pdu(site) -> None:
    other = build_site("other")
    node = site.cluster.nodes.get(hostname="gpu01")
    with pytest.raises(ValidationError, match="not in node gpu01's cluster"):
        NodeFeed(node=node, pdu=other.pdus["pdu-r1-a"], phase=1, share=1.0).full_clean()


def test_str_and_repr_of_items_with_a_credential_hold_no_secret(secret_site) -> None:
    from tests.facility.conftest import SECRET, SECRET_USER

    for item in (secret_site.pdus["pdu-r2-a"], secret_site.loop):
        item.refresh_from_db()
        for text in (str(item), repr(item), str(vars(item))):
            assert SECRET not in text and SECRET_USER not in text
