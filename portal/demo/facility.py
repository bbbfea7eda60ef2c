"""The demo cluster's facility (kiln_demo): two racks of four nodes, an A and a B PDU per rack, one
UPS and one coolant loop, served over Redfish by the testbed's facility service on this host
(`make up` starts it), so the capacity page and the heat soak work after `make up`.

The service's config (its own user and password, the PDUs' feeds, the loop's nodes) is written
next to the demo's node state files, readable by this user only; Kiln keeps the same password
sealed in its database (portal/facility/credentials.py) like any site's.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from django.conf import settings

from portal.facility.models import CoolingLoop, Pdu, Rack, Ups
from portal.facility.services import (
    CredentialChange,
    FeedSpec,
    loop_save,
    node_feeds_set,
    pdu_save,
    rack_save,
    ups_save,
)
from portal.inventory.models import Cluster

DEMO_USER = "kiln-demo"
# A simulated node under gpu_burn draws ~6.9 kW (testbed/sim/power.py). Per rack of 4 on 6 PSUs
# spread over both PDUs' 3 phases: 4.6 kW = 21 A per phase at 230 V, under 80% of 63 A (50.4 A);
# one feed alone carries 3 x 230 V x 50.4 A x PF 0.95 = 33 kW, above the rack's 27.6 kW (failover).
BREAKER_A = 63.0
# 8 nodes x 6.9 kW = 55 kW at peak; a UPS must carry 120% of it (66 kW): 80 kW leaves margin.
UPS_KW = 80.0
# 4 x 6.9 kW per rack at peak, with room for the 10.2 kW profile maximum on one node.
RACK_BUDGET_KW = 32.0
# The loop takes 90% of the heat at this flow (testbed/sim/facility.py): ~50 kW, 10 K rise at 72 L/min.
LOOP_FLOW_LPM = 80.0


@contextlib.contextmanager
def facility_served() -> Iterator[None]:
    """The demo's facility service for the length of an inline run (kiln_demo --certificate), unless
    one already listens on its port (`make up`'s)."""
    with contextlib.closing(socket.socket()) as probe:
        probe.settimeout(0.5)
        if probe.connect_ex(("127.0.0.1", settings.KILN_DEMO_FACILITY_PORT)) == 0:
            yield
            return
    from testbed.sim.redfish_facility import make_server

    server = make_server(config_path(), config_path().parent / "nodes", "127.0.0.1", settings.KILN_DEMO_FACILITY_PORT)
    thread = threading.Thread(target=server.serve_forever, name="demo-facility", daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()


def config_path() -> Path:
    return Path(settings.DATA_DIR) / "demo" / "facility.json"


def _service_config(racks: dict[str, list[str]], password: str) -> dict[str, Any]:
    pdus = []
    for rack, hosts in racks.items():
        for feed in ("a", "b"):
            feeds = [{"node": h, "phase": k, "share": 1 / 6} for h in hosts for k in (1, 2, 3)]
            ident = f"{rack}-{feed}"
            pdus.append({"id": ident, "name": f"{rack} PDU {feed.upper()}", "rack": rack, "phases": 3,
                         "voltage_v": 230, "rated_current_a": BREAKER_A, "feeds": feeds})  # fmt: skip
    hosts = [h for members in racks.values() for h in members]
    loop = {"id": "cdu1", "name": "CDU 1", "nodes": hosts, "flow_lpm": LOOP_FLOW_LPM}
    return {"username": DEMO_USER, "password": password, "pdus": pdus, "cdus": [loop]}


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)


def demo_facility_ensure(*, cluster: Cluster, racks: dict[str, list[str]]) -> list[str]:
    """Create or refresh the demo's facility model and the service config that matches it. Nodes
    outside the demo's racks (an operator's own, no rack or another) keep their feeds as they are:
    their hostnames are returned."""
    password = secrets.token_urlsafe(18)
    base = f"http://127.0.0.1:{settings.KILN_DEMO_FACILITY_PORT}/redfish/v1"
    credential = CredentialChange(username=DEMO_USER, password=password)
    saved = []
    for position, name in enumerate(racks):
        rack = Rack.objects.filter(cluster=cluster, name=name).first() or Rack(cluster=cluster, name=name)
        rack.power_budget_kw, rack.cooling_budget_kw = RACK_BUDGET_KW, RACK_BUDGET_KW
        rack.room, rack.row, rack.position = "Hall 1", "A", position
        saved.append(rack_save(rack=rack))
    for rack in saved:
        for feed in ("A", "B"):
            ident = f"{rack.name}-{feed.lower()}"
            pdu = Pdu.objects.filter(cluster=cluster, name=ident).first() or Pdu(rack=rack, name=ident)
            pdu.feed, pdu.phases, pdu.voltage_v, pdu.breaker_a = feed, 3, 230.0, [BREAKER_A] * 3
            pdu.endpoint_url = f"{base}/PowerEquipment/RackPDUs/{ident}"
            pdu_save(pdu=pdu, credential=credential)
    outside = []
    for node in cluster.nodes.order_by("hostname"):
        if node.rack not in racks:
            outside.append(node.hostname)
            continue
        specs = [FeedSpec(pdu=f"{node.rack}-{f}", phase=k, share=1 / 6) for f in ("a", "b") for k in (1, 2, 3)]
        node_feeds_set(node=node, feeds=specs)
    ups = Ups.objects.filter(cluster=cluster, name="UPS-1").first() or Ups(cluster=cluster, name="UPS-1")
    ups.capacity_kw = UPS_KW
    ups_save(ups=ups, racks=saved)
    loop = CoolingLoop.objects.filter(cluster=cluster, name="cdu1").first() or CoolingLoop(cluster=cluster, name="cdu1")
    loop.fluid, loop.endpoint_url = "water", f"{base}/ThermalEquipment/CDUs/cdu1"
    loop_save(loop=loop, racks=saved, credential=credential)
    _write_private(config_path(), json.dumps(_service_config(racks, password), indent=1))
    return outside
