"""Facility reads: the even default feeds, the snapshot the power-soak judge reads (its exact input
contract, proven by judging it), and the endpoints the worker polls."""

from __future__ import annotations

import json

import pytest

from checks.core.base import ERROR, FAIL, PASS
from checks.soak.data import PROFILE_THRESHOLDS, SoakThresholds
from checks.soak.judge import SoakResult, judge_soak
from portal.facility import selectors, services
from portal.facility.models import Pdu
from portal.facility.selectors import FeedRow
from portal.facility.services import CredentialChange, FeedSpec
from portal.inventory.models import Node
from tests.facility.conftest import HOSTS, SECRET, SECRET_USER, rack_of

pytestmark = pytest.mark.django_db


def feeds_of(site, host: str) -> list[tuple[str, int, float]]:
    return [(f.pdu, f.phase, f.share) for f in selectors.node_feeds(cluster=site.cluster) if f.node == host]


def test_a_node_on_a_and_b_feeds_draws_half_from_each_phases_in_turn(site) -> None:
    assert feeds_of(site, "gpu01") == [("pdu-r1-a", 1, 0.5), ("pdu-r1-b", 1, 0.5)]
    assert feeds_of(site, "gpu02") == [("pdu-r1-a", 2, 0.5), ("pdu-r1-b", 2, 0.5)]
    assert feeds_of(site, "gpu03") == [("pdu-r1-a", 3, 0.5), ("pdu-r1-b", 3, 0.5)]
    assert feeds_of(site, "gpu04") == [("pdu-r1-a", 1, 0.5), ("pdu-r1-b", 1, 0.5)]
    assert feeds_of(site, "gpu05") == [("pdu-r2-a", 1, 0.5), ("pdu-r2-b", 1, 0.5)]
    rows = selectors.default_feeds(cluster=site.cluster)
    assert len(rows) == 24 and all(r.default for r in rows)
    for host in HOSTS:
        assert sum(share for _, _, share in feeds_of(site, host)) == 1.0


def test_phases_follow_natural_hostname_order(site) -> None:
    # gpu100 and gpu9 join rack r1: gpu9 comes before gpu100 (text order would put it after).
    Node.objects.bulk_create(Node(cluster=site.cluster, hostname=h, rack="r1") for h in ("gpu100", "gpu9"))
    assert feeds_of(site, "gpu9")[0][:2] == ("pdu-r1-a", 2)
    assert feeds_of(site, "gpu100")[0][:2] == ("pdu-r1-a", 3)


def test_explicit_feeds_replace_the_default_and_move_no_other_node(site) -> None:
    before = feeds_of(site, "gpu03")
    services.node_feeds_set(node=site.cluster.nodes.get(hostname="gpu02"), feeds=[FeedSpec("pdu-r1-b", 3, 1.0)])
    assert feeds_of(site, "gpu02") == [("pdu-r1-b", 3, 1.0)]
    assert feeds_of(site, "gpu03") == before
    explicit = [f for f in selectors.node_feeds(cluster=site.cluster) if not f.default]
    assert explicit == [FeedRow("gpu02", "pdu-r1-b", 3, 1.0)]


def test_a_rack_with_one_feed_gives_it_all_and_a_rack_without_pdus_none(site) -> None:
    services.item_delete(item=site.pdus["pdu-r2-b"])
    single = site.pdus["pdu-r2-a"]
    single.phases, single.breaker_a = 1, [32.0]
    services.pdu_save(pdu=single)
    assert feeds_of(site, "gpu06") == [("pdu-r2-a", 1, 1.0)]
    for name in ("pdu-r3-a", "pdu-r3-b"):
        services.item_delete(item=Pdu.objects.get(name=name))
    assert feeds_of(site, "gpu09") == []
    assert "rack r3 (4 nodes) has no PDU" in " ".join(selectors.model_gaps(cluster=site.cluster))


def test_two_pdus_on_one_feed_share_the_turns(site) -> None:
    services.pdu_save(pdu=Pdu(rack=site.racks["r1"], name="pdu-r1-a2", feed="A", phases=3, breaker_a=[32.0] * 3))
    assert [feeds_of(site, h)[0][:2] for h in ("gpu01", "gpu02", "gpu03", "gpu04")] == [
        ("pdu-r1-a", 1), ("pdu-r1-a2", 1), ("pdu-r1-a", 2), ("pdu-r1-a2", 2)
    ]  # fmt: skip


def test_model_gaps_name_racks_the_model_lacks(site) -> None:
    Node.objects.create(cluster=site.cluster, hostname="gpu13", rack="r9")
    assert selectors.model_gaps(cluster=site.cluster) == ["rack r9 (1 node) is not in the facility model"]


# --- the snapshot: the judge's input contract -----------------------------------------------------


def test_the_snapshot_is_the_judges_input_contract(site) -> None:
    Node.objects.create(cluster=site.cluster, hostname="login01")  # no rack: not in "nodes"
    snap = selectors.facility_snapshot(cluster=site.cluster)
    assert json.loads(json.dumps(snap)) == snap
    assert set(snap) == {"racks", "pdus", "feeds", "ups", "loops", "nodes"}
    assert snap["racks"][0] == {"name": "r1", "power_budget_w": 40_000.0, "cooling_budget_w": 40_000.0,
                                "room": "hall1", "row": "A", "position": 0}  # fmt: skip
    assert snap["pdus"][0] == {"name": "pdu-r1-a", "rack": "r1", "feed": "A", "phases": 3, "voltage_v": 230.0,
                               "breaker_a": [63.0, 63.0, 63.0], "has_endpoint": False}  # fmt: skip
    assert snap["feeds"][0] == {"node": "gpu01", "pdu": "pdu-r1-a", "phase": 1, "share": 0.5}
    assert len(snap["feeds"]) == 24
    assert snap["ups"] == [{"name": "ups1", "capacity_w": 120_000.0, "racks": ["r1", "r2", "r3"]}]
    assert snap["loops"] == [{"name": "cdu1", "racks": ["r1", "r2", "r3"], "fluid": "water", "has_endpoint": False}]
    assert snap["nodes"] == {h: rack_of(h) for h in HOSTS}


def test_watts_are_exact_for_decimal_kilowatts(site) -> None:
    rack = site.racks["r1"]
    rack.power_budget_kw = 12.3
    services.rack_save(rack=rack)
    assert selectors.facility_snapshot(cluster=site.cluster)["racks"][0]["power_budget_w"] == 12_300.0


def test_the_snapshot_holds_no_credential(secret_site) -> None:
    text = json.dumps(selectors.facility_snapshot(cluster=secret_site.cluster))
    assert SECRET not in text and SECRET_USER not in text and "example.net" not in text
    assert '"has_endpoint": true' in text


N = 60
H100 = SoakThresholds(**PROFILE_THRESHOLDS["H100-SXM-8"])


def samples(watts: dict[str, float], gpu_share: float = 0.75) -> dict:
    """A flat soak: each node at its power for N seconds, its 8 GPUs drawing gpu_share of it."""
    return {
        "t": [1_700_000_000.0 + i for i in range(N)],
        "node_power_w": {h: [w] * N for h, w in watts.items()},
        "gpu_power_w": {h: [w * gpu_share] * N for h, w in watts.items()},
        "gpu_count": dict.fromkeys(watts, 8),
    }


def judged(site, watts: float = 7500.0) -> SoakResult:
    return judge_soak(selectors.facility_snapshot(cluster=site.cluster), samples(dict.fromkeys(HOSTS, watts)), H100)


def test_the_judge_reads_the_snapshot_racks_pdus_ups_and_loop(site) -> None:
    """The contract proved: the judge finds every rack, PDU phase, A/B feed, the UPS and the loop in
    the snapshot. 4 nodes at 7.5 kW: 30 kW in a 40 kW rack, within one feed's 33 kW; 90 kW x 1.2 on
    a 120 kW UPS."""
    result = judged(site)
    assert {f.kind for f in result.findings} == {"node", "rack", "pdu_phase", "feed", "ups", "loop"}
    assert {f.name for f in result.of("rack")} == {"r1", "r2", "r3"}
    assert len(result.of("pdu_phase")) == 18 and len(result.of("feed")) == 6 and len(result.of("node")) == 12
    passed = result.of("rack") + result.of("node") + result.of("feed") + result.of("ups")
    assert [f.reason for f in passed if f.status != PASS] == []
    # Round-robin over 3 phases puts the 4th node of each rack on phase 1 again: L1 carries two
    # nodes' halves, L2 and L3 one each (50% imbalance, derived from the model), within the breakers.
    failed = {f.name: f.reason for f in result.of("pdu_phase") if f.status != PASS}
    assert set(failed) == {f"{p} phase 1" for p in site.pdus}
    assert all("imbalance 50%" in reason and "within 80% of its 63 A breaker" in reason for reason in failed.values())
    (loop,) = result.of("loop")
    assert loop.status == ERROR and "cdu1" in loop.reason  # no CDU readings: never a pass


def test_the_judge_fails_an_undersized_ups_from_the_snapshot(site) -> None:
    site.ups.capacity_kw = 100.0
    services.ups_save(ups=site.ups, racks=list(site.racks.values()))
    (ups,) = judged(site).of("ups")
    assert ups.status == FAIL and "ups1" in ups.reason


def test_the_judge_fails_a_rack_over_its_budget_from_the_snapshot(site) -> None:
    rack = site.racks["r2"]
    rack.power_budget_kw = 25.0
    services.rack_save(rack=rack)
    assert [f.name for f in judged(site).of("rack") if f.status == FAIL] == ["r2"]


def test_balanced_explicit_feeds_pass_every_phase(site) -> None:
    """Each node on every phase of both PDUs (1/6 each, as a 6-PSU HGX node): the phases balance."""
    for node in site.cluster.nodes.all():
        specs = [FeedSpec(f"pdu-{node.rack}-{f}", k, 1 / 6) for f in ("a", "b") for k in (1, 2, 3)]
        services.node_feeds_set(node=node, feeds=specs)
    assert [f.reason for f in judged(site).of("pdu_phase") if f.status != PASS] == []


# --- endpoints for the worker ---------------------------------------------------------------------


def test_endpoints_carry_the_opened_credential_and_hide_it_in_repr(secret_site) -> None:
    found = selectors.facility_endpoints(cluster=secret_site.cluster)
    assert [(e.kind, e.name, e.racks) for e in found] == [
        ("pdu", "pdu-r2-a", ("r2",)),
        ("loop", "cdu1", ("r1", "r2", "r3")),
    ]
    pdu = found[0]
    assert (pdu.url, pdu.username, pdu.password, pdu.problem) == (
        "https://pdu-r2-a.example.net/redfish/v1", SECRET_USER, SECRET, ""
    )  # fmt: skip
    for text in (repr(pdu), str(pdu), repr(found), f"{pdu}"):
        assert SECRET not in text and SECRET_USER not in text
    assert "password=<set>" in repr(pdu)


def test_an_endpoint_sealed_under_another_key_says_so(secret_site, settings) -> None:
    from portal.facility import credentials

    settings.KILN_CREDENTIAL_KEY = credentials.generate_key()
    (pdu, loop) = selectors.facility_endpoints(cluster=secret_site.cluster)
    assert pdu.password == "" and "pdu pdu-r2-a" in pdu.problem and "cannot be opened" in pdu.problem


def test_an_endpoint_without_a_credential_is_listed_without_one(site) -> None:
    pdu = site.pdus["pdu-r1-b"]
    pdu.endpoint_url = "http://10.1.0.7:8000/redfish/v1"
    services.pdu_save(pdu=pdu, credential=CredentialChange())
    (endpoint,) = selectors.facility_endpoints(cluster=site.cluster)
    assert endpoint.name == "pdu-r1-b" and not endpoint.has_credential and endpoint.problem == ""
