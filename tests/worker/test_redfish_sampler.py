"""worker/redfish.py against the testbed's Redfish PDU/CDU service on 127.0.0.1 (real HTTP, the
DMTF document shapes): readings per interval through checks/soak/samples.py's readers, the
credentials never in what it returns, and hostile or broken endpoints that cost readings, never a
wrong number."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from checks.soak.samples import FACILITY_READERS
from testbed.sim import write_state
from testbed.sim.redfish_facility import make_server
from tests.testbed.test_redfish_facility import PASSWORD, USER, facility, loaded, write
from worker.endpoints import Endpoint
from worker.redfish import sample_endpoint


@pytest.fixture
def base(tmp_path: Path) -> Iterator[str]:
    nodes = tmp_path / "nodes"
    for name in ("gpu01", "gpu02"):
        write_state(nodes / name / "state", node=name)
        loaded(nodes / name / "state")
    config = tmp_path / "facility.json"
    write(config, facility())
    server = make_server(config, nodes, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield "http://{}:{}".format(*server.server_address[:2])
    server.shutdown()
    server.server_close()


def sample(endpoint: Endpoint, *, duration: float = 3.0, interval: float = 0.5) -> dict[str, Any]:
    reader = FACILITY_READERS[endpoint.kind]
    return sample_endpoint(
        endpoint,
        link=reader.link,
        read=reader.read,
        start_at=time.time() + 0.2,
        duration_s=duration,
        interval_s=interval,
        stop=threading.Event(),
    )


def test_it_reads_pdu_phase_currents_every_interval(base: str) -> None:
    pdu = Endpoint("pdu", "r1-a", f"{base}/redfish/v1/PowerEquipment/RackPDUs/r1-a", USER, PASSWORD)
    doc = sample(pdu)
    assert doc["errors"] == [] and len(doc["t"]) == 6
    assert doc["t"] == sorted(doc["t"]) and doc["t"][0] == 0.0
    assert set(doc["readings"]) == {"1", "2", "3"}
    for values in doc["readings"].values():
        assert all(isinstance(v, float) and 1.0 < v < 32.0 for v in values), values  # loaded nodes, 230 V
    assert PASSWORD not in json.dumps(doc)


def test_it_reads_the_loop_supply_return_and_flow(base: str) -> None:
    loop = Endpoint("loop", "loop1", f"{base}/redfish/v1/ThermalEquipment/CDUs/loop1", USER, PASSWORD)
    doc = sample(loop, duration=1.0)
    assert doc["errors"] == []
    readings = doc["readings"]
    assert set(readings) == {"supply_c", "return_c", "flow_lpm"}
    assert all(r > s for r, s in zip(readings["return_c"], readings["supply_c"], strict=True))
    assert readings["flow_lpm"][0] == pytest.approx(60.0)


def test_it_says_why_on_wrong_credentials_and_never_shows_them(base: str) -> None:
    bad = Endpoint("pdu", "r1-a", f"{base}/redfish/v1/PowerEquipment/RackPDUs/r1-a", USER, "wrong-planted-pw")
    doc = sample(bad, duration=1.0)
    assert doc["t"] == [] and "HTTP 401" in doc["errors"][0]
    assert "wrong-planted-pw" not in json.dumps(doc) and "wrong-planted-pw" not in repr(bad)


def test_it_reports_an_endpoint_that_is_not_there(base: str) -> None:
    gone = Endpoint("pdu", "r9", f"{base}/redfish/v1/PowerEquipment/RackPDUs/r9", USER, PASSWORD)
    assert "HTTP 404" in sample(gone, duration=1.0)["errors"][0]
    closed = Endpoint("pdu", "r1-a", "http://127.0.0.1:9/redfish/v1/PowerEquipment/RackPDUs/r1-a", "", "")
    assert "r1-a" in sample(closed, duration=1.0)["errors"][0]
    assert "not an http(s) URL" in sample(Endpoint("pdu", "x", "file:///etc/passwd", "", ""), duration=1.0)["errors"][0]


class _Hostile(BaseHTTPRequestHandler):
    """A 'PDU' whose links point at another host, then one that answers slowly and with garbage."""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        mode = self.server.mode  # type: ignore[attr-defined]
        if self.path.endswith("/Mains"):
            member = "http://169.254.169.254/latest" if mode == "offsite" else "/redfish/v1/pdu/Mains/AC1"
            body: Any = {"Members": [{"@odata.id": member}]}
        elif self.path.endswith("/AC1"):
            if mode == "slow":
                time.sleep(2.5)
            body = "not json at all" if mode == "garbage" else {"@odata.type": "#Circuit.v1_7_0.Circuit",
                    "CurrentAmps": {"Reading": float("nan")}}  # fmt: skip
        else:
            body = {"Mains": {"@odata.id": "/redfish/v1/pdu/Mains"}}
        data = (body if isinstance(body, str) else json.dumps(body)).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.mark.parametrize("mode", ["offsite", "slow", "garbage", "nan"])
def test_a_hostile_or_broken_endpoint_costs_readings_never_a_number(mode: str) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hostile)
    server.mode = mode  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = "http://{}:{}/redfish/v1/pdu".format(*server.server_address[:2])
        doc = sample(Endpoint("pdu", "p", url, "", ""), duration=2.0, interval=1.0)
    finally:
        server.shutdown()
        server.server_close()
    values = [v for column in doc["readings"].values() for v in column]
    assert all(v is None for v in values), doc
    if mode != "nan":  # a NaN reading is no reading (None); the others also say why
        assert doc["errors"], doc
    if mode == "offsite":
        assert "no usable @odata.id" in doc["errors"][0]
