"""Reads of the facility model: the lists the facility page shows, each node's feeds (explicit, or
the even default), the judge's snapshot, and the endpoints the worker polls."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from portal.facility import credentials
from portal.facility.models import CoolingLoop, EndpointFields, NodeFeed, Pdu, Rack, Ups
from portal.inventory.models import Cluster
from portal.ordering import natural_key
from worker.endpoints import Endpoint, EndpointKind


@dataclass(frozen=True)
class FeedRow:
    """A node's share of power on one PDU phase; `default` when computed, not entered."""

    node: str
    pdu: str
    phase: int
    share: float
    default: bool = False

    def as_contract(self) -> dict[str, Any]:
        return {"node": self.node, "pdu": self.pdu, "phase": self.phase, "share": self.share}


def racks(*, cluster: Cluster) -> list[Rack]:
    return sorted(Rack.objects.filter(cluster=cluster), key=lambda r: natural_key(r.name))


def pdus(*, cluster: Cluster) -> list[Pdu]:
    return sorted(Pdu.objects.filter(cluster=cluster).select_related("rack"), key=lambda p: natural_key(p.name))


def upses(*, cluster: Cluster) -> list[Ups]:
    found = Ups.objects.filter(cluster=cluster).prefetch_related("racks")
    return sorted(found, key=lambda u: natural_key(u.name))


def loops(*, cluster: Cluster) -> list[CoolingLoop]:
    found = CoolingLoop.objects.filter(cluster=cluster).prefetch_related("racks")
    return sorted(found, key=lambda u: natural_key(u.name))


def rack_names(item: Ups | CoolingLoop) -> list[str]:
    """The racks a UPS carries or a loop serves, in natural order (prefetched by upses()/loops())."""
    return sorted((r.name for r in item.racks.all()), key=natural_key)


def explicit_feeds(*, cluster: Cluster) -> list[FeedRow]:
    rows = NodeFeed.objects.filter(node__cluster=cluster).values_list("node__hostname", "pdu__name", "phase", "share")
    return [FeedRow(node, pdu, phase, share) for node, pdu, phase, share in rows]


def _slots(rack_pdus: list[Pdu]) -> list[tuple[str, int]]:
    """One feed's (PDU, phase) slots in round-robin order: phase 1 of every PDU, then phase 2, ..."""
    ordered = sorted(rack_pdus, key=lambda p: natural_key(p.name))
    return [(p.name, k) for k in (1, 2, 3) for p in ordered if k <= p.phases]


def default_feeds(*, cluster: Cluster) -> list[FeedRow]:
    """Feeds of the nodes without explicit ones, spread evenly: a node in a rack with PDUs on both the
    A and B feeds takes 0.5 from one phase of each (1.0 from one feed when its rack has only one);
    phases go round-robin across the rack's nodes in natural hostname order, all of them counted, so
    giving one node explicit feeds moves no other node. Nodes whose rack has no PDU get none."""
    explicit = set(NodeFeed.objects.filter(node__cluster=cluster).values_list("node_id", flat=True))
    by_rack: dict[str, dict[str, list[Pdu]]] = defaultdict(lambda: defaultdict(list))
    for pdu in Pdu.objects.filter(cluster=cluster).select_related("rack"):
        by_rack[pdu.rack.name][pdu.feed].append(pdu)
    nodes: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for node_id, hostname, rack in cluster.nodes.exclude(rack="").values_list("id", "hostname", "rack"):
        nodes[rack].append((node_id, hostname))
    found: list[FeedRow] = []
    for rack, members in nodes.items():
        feeds = by_rack.get(rack)
        if not feeds:
            continue
        slots = {feed: _slots(feeds[feed]) for feed in sorted(feeds)}
        share = 1.0 / len(slots)
        for index, (node_id, hostname) in enumerate(sorted(members, key=lambda m: natural_key(m[1]))):
            if node_id in explicit:
                continue
            for feed_slots in slots.values():
                pdu_name, phase = feed_slots[index % len(feed_slots)]
                found.append(FeedRow(hostname, pdu_name, phase, share, default=True))
    return found


def node_feeds(*, cluster: Cluster) -> list[FeedRow]:
    """Every node's feeds, explicit and default, by node (natural order), PDU and phase."""
    rows = explicit_feeds(cluster=cluster) + default_feeds(cluster=cluster)
    return sorted(rows, key=lambda f: (natural_key(f.node), natural_key(f.pdu), f.phase))


def _watts(kw: float) -> float:
    return round(kw * 1000.0, 6)  # 12.3 kW is 12300 W, not 12300.000000000002


def facility_snapshot(*, cluster: Cluster) -> dict[str, Any]:
    """The facility as checks/soak/judge.py reads it (its docstring's input contract), JSON-ready:
        {"racks": [{"name", "power_budget_w", "cooling_budget_w", "room", "row", "position"}],
         "pdus": [{"name", "rack", "feed", "phases", "voltage_v", "breaker_a": [A per phase], "has_endpoint"}],
         "feeds": [{"node", "pdu", "phase", "share"}],   explicit feeds and the computed defaults
         "ups": [{"name", "capacity_w", "racks": [names]}],
         "loops": [{"name", "racks": [names], "fluid", "has_endpoint"}],
         "nodes": {hostname: rack}}                       the cluster's nodes whose rack is set
    Powers in W (the model holds kW), lists in natural name order. No credential, URL or user name."""
    return {
        "racks": [
            {
                "name": r.name,
                "power_budget_w": _watts(r.power_budget_kw),
                "cooling_budget_w": _watts(r.cooling_budget_kw),
                "room": r.room,
                "row": r.row,
                "position": r.position,
            }
            for r in racks(cluster=cluster)
        ],  # fmt: skip
        "pdus": [
            {
                "name": p.name,
                "rack": p.rack.name,
                "feed": p.feed,
                "phases": p.phases,
                "voltage_v": float(p.voltage_v),
                "breaker_a": [float(a) for a in p.breaker_a],
                "has_endpoint": p.has_endpoint,
            }
            for p in pdus(cluster=cluster)
        ],  # fmt: skip
        "feeds": [f.as_contract() for f in node_feeds(cluster=cluster)],
        "ups": [
            {"name": u.name, "capacity_w": _watts(u.capacity_kw), "racks": rack_names(u)}
            for u in upses(cluster=cluster)
        ],
        "loops": [
            {"name": lp.name, "racks": rack_names(lp), "fluid": lp.fluid, "has_endpoint": lp.has_endpoint}
            for lp in loops(cluster=cluster)
        ],
        "nodes": {
            hostname: rack
            for hostname, rack in sorted(
                cluster.nodes.exclude(rack="").values_list("hostname", "rack"), key=lambda n: natural_key(n[0])
            )
        },
    }


def _endpoint(kind: EndpointKind, item: EndpointFields, name: str, racks: list[str]) -> Endpoint:
    username = password = problem = ""
    if item.credential_sealed:
        try:
            opened = credentials.unseal(item.credential_sealed)
        except credentials.CredentialError as exc:
            problem = f"{kind} {name}: {exc}"
        else:
            username, password = opened.username, opened.password
    return Endpoint(
        kind=kind,
        name=name,
        url=item.endpoint_url,
        username=username,
        password=password,
        verify_tls=item.verify_tls,
        racks=tuple(racks),
        problem=problem,
    )


def facility_endpoints(*, cluster: Cluster) -> list[Endpoint]:
    """The PDUs and cooling loops with a Redfish endpoint, credentials opened: for the worker that
    samples them during a soak, never for a page or a log (Endpoint's repr hides the password)."""
    found = [_endpoint("pdu", p, p.name, [p.rack.name]) for p in pdus(cluster=cluster) if p.endpoint_url]
    found += [_endpoint("loop", lp, lp.name, rack_names(lp)) for lp in loops(cluster=cluster) if lp.endpoint_url]
    return found


def model_gaps(*, cluster: Cluster) -> list[str]:
    """What the facility model lacks for a soak to judge the cluster's nodes (the judge would say
    `error` for each): racks the nodes name but the model does not hold, racks of nodes without a
    PDU, and, once any UPS or loop exists, racks of nodes that none carries or serves."""
    counts: dict[str, int] = defaultdict(int)
    for name in cluster.nodes.exclude(rack="").values_list("rack", flat=True):
        counts[name] += 1
    found = Rack.objects.filter(cluster=cluster).prefetch_related("pdus", "upses", "cooling_loops")
    modelled = {r.name: r for r in found}
    any_ups = Ups.objects.filter(cluster=cluster).exists()
    any_loop = CoolingLoop.objects.filter(cluster=cluster).exists()
    gaps = []
    for name in sorted(counts, key=natural_key):
        rack = modelled.get(name)
        nodes = f"{counts[name]} node{'s' if counts[name] != 1 else ''}"
        if rack is None:
            gaps.append(f"rack {name} ({nodes}) is not in the facility model")
            continue
        if not rack.pdus.all():
            gaps.append(f"rack {name} ({nodes}) has no PDU: its nodes draw from nothing the model knows")
        if any_ups and not rack.upses.all():
            gaps.append(f"rack {name} ({nodes}) is on no UPS")
        if any_loop and not rack.cooling_loops.all():
            gaps.append(f"rack {name} ({nodes}) is served by no cooling loop")
    return gaps
