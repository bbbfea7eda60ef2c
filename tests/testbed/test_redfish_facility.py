"""The testbed's Redfish PDU/CDU service (testbed/sim/redfish_facility.py) on 127.0.0.1 with an
ephemeral port: authentication, DMTF document shapes, readings that follow the nodes' power
(testbed/sim/power.py), the miscabled-phase and low-flow faults, and a clean shutdown."""

from __future__ import annotations

import base64
import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed.sim import write_state
from testbed.sim.facility import ConfigError, parse_config
from testbed.sim.power import node_power
from testbed.sim.redfish_facility import FacilityServer, make_server

USER, PASSWORD = "facility", "planted-s3cret"
PDU = "/redfish/v1/PowerEquipment/RackPDUs/r1-a"
CDU = "/redfish/v1/ThermalEquipment/CDUs/loop1"
REPO = Path(__file__).resolve().parents[2]


def facility(**changes: Any) -> dict[str, Any]:
    """Two nodes on a 3-phase 230 V PDU (gpu01 split over L1/L2, gpu02 on L3), a single-phase PDU,
    and a loop of both nodes at 60 L/min."""
    pdu: dict[str, Any] = {
        "id": "r1-a",
        "name": "Rack 1 PDU A",
        "rack": "r1",
        "phases": 3,
        "voltage_v": 230,
        "rated_current_a": 32,
        "feeds": [
            {"node": "gpu01", "phase": 1, "share": 0.5},
            {"node": "gpu01", "phase": 2, "share": 0.5},
            {"node": "gpu02", "phase": 3, "share": 1.0},
        ],
    }
    single = {"id": "r1-b", "phases": 1, "voltage_v": 230, "rated_current_a": 63, "feeds": [{"node": "gpu02"}]}
    loop: dict[str, Any] = {"id": "loop1", "nodes": ["gpu01", "gpu02"], "flow_lpm": 60}
    pdu.update(changes.pop("pdu", {}))
    loop.update(changes.pop("loop", {}))
    return {"username": USER, "password": PASSWORD, "pdus": [pdu, single], "cdus": [loop], **changes}


def write(path: Path, doc: dict[str, Any] | str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    os.replace(tmp, path)  # atomic, as the testbed rewrites it: a new file the service notices


def loaded(state: Path) -> None:
    """gpu_burn's load marker, live pid (this test) and aged past the ramp: the node at full load."""
    marker = Path(f"{state}.load")
    marker.write_text(f"{os.getpid()}\n")
    past = time.time() - 60
    os.utime(marker, (past, past))


class Service:
    def __init__(self, server: FacilityServer, config: Path, nodes: Path) -> None:
        self.server, self.config, self.nodes = server, config, nodes
        self.base = "http://{}:{}".format(*server.server_address[:2])

    def get(self, path: str, auth: tuple[str, str] | None = (USER, PASSWORD), method: str = "GET") -> tuple[int, Any]:
        request = urllib.request.Request(self.base + path, method=method)
        if auth:
            request.add_header("Authorization", "Basic " + base64.b64encode(":".join(auth).encode()).decode())
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())

    def doc(self, path: str) -> dict[str, Any]:
        status, body = self.get(path)
        assert status == 200, body
        return body

    def state(self, node: str) -> Path:
        return self.nodes / node / "state"

    def power(self, node: str) -> float:
        return node_power(self.state(node)).total_w


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    nodes = tmp_path / "nodes"
    for name in ("gpu01", "gpu02"):
        write_state(nodes / name / "state", node=name)
    config = tmp_path / "facility.json"
    write(config, facility())
    server = make_server(config, nodes, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield Service(server, config, nodes)
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)
    assert not thread.is_alive()


def phase_amps(service: Service) -> list[float]:
    amps = service.doc(f"{PDU}/Mains/AC1")["PolyPhaseCurrentAmps"]
    return [amps[f"Line{n}"]["Reading"] for n in (1, 2, 3)]


# --- authentication ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "auth", [None, (USER, "wrong"), ("someone", PASSWORD), (USER, PASSWORD + "x"), (USER, "")], ids=str
)
def test_documents_need_the_configured_credentials(service: Service, auth: tuple[str, str] | None) -> None:
    status, body = service.get(PDU, auth=auth)
    assert status == 401 and body["error"]["code"].endswith("NoValidSession")
    assert service.get(PDU)[0] == 200


@pytest.mark.parametrize(
    "header", ["Basic", "Basic !!!notbase64", "Bearer abc", "Basic " + base64.b64encode(b"nocolon").decode()]
)
def test_malformed_authorization_is_401(service: Service, header: str) -> None:
    request = urllib.request.Request(service.base + PDU, headers={"Authorization": header})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request, timeout=10)
    assert err.value.code == 401
    assert err.value.headers["WWW-Authenticate"].startswith("Basic realm=")


def test_the_service_root_is_open_and_never_shows_the_password(service: Service) -> None:
    status, root = service.get("/redfish/v1/", auth=None)
    assert status == 200 and root["PowerEquipment"] == {"@odata.id": "/redfish/v1/PowerEquipment"}
    assert PASSWORD not in json.dumps(root) and PASSWORD not in json.dumps(service.doc(PDU))


# --- shapes ------------------------------------------------------------------------------------------


def test_pdu_documents_have_the_dmtf_shapes(service: Service) -> None:
    pdu = service.doc(PDU)
    assert pdu["@odata.type"] == "#PowerDistribution.v1_6_0.PowerDistribution" and pdu["EquipmentType"] == "RackPDU"
    assert pdu["Mains"] == {"@odata.id": f"{PDU}/Mains"}
    assert service.doc(f"{PDU}/Mains")["Members"] == [{"@odata.id": f"{PDU}/Mains/AC1"}]
    mains = service.doc(f"{PDU}/Mains/AC1")
    assert mains["@odata.type"] == "#Circuit.v1_9_0.Circuit"
    assert (mains["CircuitType"], mains["PhaseWiringType"], mains["RatedCurrentAmps"]) == (
        "Mains",
        "ThreePhase5Wire",
        32,
    )
    assert set(mains["PolyPhaseCurrentAmps"]) == {"Line1", "Line2", "Line3", "Neutral"}
    assert set(mains["PolyPhaseVoltage"]) == {
        "Line1ToNeutral", "Line2ToNeutral", "Line3ToNeutral", "Line1ToLine2", "Line2ToLine3", "Line3ToLine1",
    }  # fmt: skip
    assert mains["PolyPhaseVoltage"]["Line1ToNeutral"] == {"Reading": 230.0}
    assert mains["PolyPhaseVoltage"]["Line1ToLine2"]["Reading"] == pytest.approx(398.4, abs=0.05)
    assert all(isinstance(v["Reading"], float) for v in mains["PolyPhaseCurrentAmps"].values())
    metrics = service.doc(f"{PDU}/Metrics")
    assert metrics["@odata.type"] == "#PowerDistributionMetrics.v1_4_0.PowerDistributionMetrics"
    assert metrics["PowerWatts"]["Reading"] == pytest.approx(mains["PowerWatts"]["Reading"])
    outlets = service.doc(f"{PDU}/Outlets")["Members"]
    assert len(outlets) == 3
    outlet = service.doc(outlets[2]["@odata.id"])
    assert (outlet["@odata.type"], outlet["UserLabel"]) == ("#Outlet.v1_4_4.Outlet", "gpu02")
    assert outlet["CurrentAmps"]["Reading"] == pytest.approx(service.power("gpu02") / 230, abs=0.01)


def test_a_single_phase_pdu_reports_current_amps(service: Service) -> None:
    mains = service.doc("/redfish/v1/PowerEquipment/RackPDUs/r1-b/Mains/AC1")
    assert mains["PhaseWiringType"] == "OnePhase3Wire"
    assert set(mains["PolyPhaseCurrentAmps"]) == {"Line1"}
    assert mains["CurrentAmps"] == mains["PolyPhaseCurrentAmps"]["Line1"]
    assert mains["CurrentAmps"]["Reading"] == pytest.approx(service.power("gpu02") / 230, abs=0.01)


def test_cdu_documents_have_the_dmtf_shapes(service: Service) -> None:
    assert service.doc("/redfish/v1/ThermalEquipment/CDUs")["Members"] == [{"@odata.id": CDU}]
    cdu = service.doc(CDU)
    assert (cdu["@odata.type"], cdu["EquipmentType"]) == ("#CoolingUnit.v1_1_2.CoolingUnit", "CDU")
    assert cdu["Coolant"] == {
        "CoolantType": "Water",
        "SpecificHeatkJoulesPerKgK": 4.178,
        "DensityKgPerCubicMeter": 995.7,
    }
    members = service.doc(f"{CDU}/PrimaryCoolantConnectors")["Members"]
    connector = service.doc(members[0]["@odata.id"])
    assert connector["@odata.type"] == "#CoolantConnector.v1_3_0.CoolantConnector"
    for key in ("FlowLitersPerMinute", "SupplyTemperatureCelsius", "ReturnTemperatureCelsius", "HeatRemovedkW"):
        assert isinstance(connector[key]["Reading"], float), key
    env = service.doc(f"{CDU}/EnvironmentMetrics")
    assert env["@odata.type"] == "#EnvironmentMetrics.v1_4_0.EnvironmentMetrics" and "TemperatureCelsius" in env


# --- readings follow the load --------------------------------------------------------------------------


def test_phase_currents_follow_node_load_and_shares(service: Service) -> None:
    idle = phase_amps(service)
    one, two = service.power("gpu01"), service.power("gpu02")
    assert idle == pytest.approx([one * 0.5 / 230, one * 0.5 / 230, two / 230], abs=0.006)
    loaded(service.state("gpu01"))
    busy = phase_amps(service)
    one = service.power("gpu01")
    assert one == pytest.approx(6840.0, abs=1)
    assert busy == pytest.approx([one * 0.5 / 230, one * 0.5 / 230, two / 230], abs=0.006)
    assert busy[0] > idle[0] and busy[1] > idle[1] and busy[2] == idle[2]
    mains = service.doc(f"{PDU}/Mains/AC1")
    assert mains["PowerWatts"]["Reading"] == pytest.approx(one + two, abs=0.2)
    i1, i2, i3 = busy
    neutral = math.sqrt(i1 * i1 + i2 * i2 + i3 * i3 - i1 * i2 - i2 * i3 - i3 * i1)
    assert mains["PolyPhaseCurrentAmps"]["Neutral"]["Reading"] == pytest.approx(neutral, abs=0.01)


def test_a_node_without_a_state_file_draws_nothing(service: Service) -> None:
    before = phase_amps(service)
    feeds = [{"node": "gpu01", "phase": 1, "share": 0.5}, {"node": "gpu01", "phase": 2, "share": 0.5}]
    write(service.config, facility(pdu={"feeds": [*feeds, {"node": "gpu09", "phase": 3}]}))
    assert phase_amps(service) == [before[0], before[1], 0.0]


def test_the_power_over_fault_shows_on_the_pdu(service: Service) -> None:
    before = phase_amps(service)[2]
    write_state(service.state("gpu02"), node="gpu02", power_over_pct=30)
    assert phase_amps(service)[2] == pytest.approx(before + 0.3 * sum(70 + 0.137 * s for s in range(8)) / 230, abs=0.01)


def test_a_miscabled_phase_carries_more_and_only_that_phase(service: Service) -> None:
    loaded(service.state("gpu01"))
    loaded(service.state("gpu02"))
    healthy = phase_amps(service)
    write(service.config, facility(pdu={"miscabled": {"phase": 1, "nodes": ["gpu02"], "extra_current_a": 5}}))
    miscabled = phase_amps(service)
    assert miscabled[0] == pytest.approx(healthy[0] + healthy[2] + 5, abs=0.02)
    assert miscabled[1] == healthy[1] and miscabled[2] == 0.0
    write(service.config, facility(pdu={"miscabled": {"phase": 2, "extra_current_a": 12.5}}))
    extra = phase_amps(service)
    assert (extra[0], extra[1], extra[2]) == (healthy[0], pytest.approx(healthy[1] + 12.5, abs=0.01), healthy[2])


def heat_ratio(connector: dict[str, Any], node_watts: float) -> float:
    """What the judge computes: flow x density x specific heat x (return - supply) over node power."""
    flow_l_s = connector["FlowLitersPerMinute"]["Reading"] / 60
    rise = connector["ReturnTemperatureCelsius"]["Reading"] - connector["SupplyTemperatureCelsius"]["Reading"]
    return flow_l_s * 0.9957 * 4178 * rise / node_watts


def test_the_loop_removes_most_of_the_heat_and_low_flow_less(service: Service) -> None:
    loaded(service.state("gpu01"))
    loaded(service.state("gpu02"))
    total = service.power("gpu01") + service.power("gpu02")
    healthy = service.doc(f"{CDU}/PrimaryCoolantConnectors/1")
    assert healthy["FlowLitersPerMinute"]["Reading"] == 60.0 and healthy["SupplyTemperatureCelsius"]["Reading"] == 30.0
    assert heat_ratio(healthy, total) == pytest.approx(0.9, abs=0.005)
    assert healthy["HeatRemovedkW"]["Reading"] == pytest.approx(0.9 * total / 1000, abs=0.001)
    write(service.config, facility(loop={"low_flow": 0.3}))
    low = service.doc(f"{CDU}/PrimaryCoolantConnectors/1")
    assert low["FlowLitersPerMinute"]["Reading"] == 18.0
    assert low["ReturnTemperatureCelsius"]["Reading"] > healthy["ReturnTemperatureCelsius"]["Reading"]
    assert heat_ratio(low, total) == pytest.approx(0.9 * 0.3**0.8, abs=0.005) and heat_ratio(low, total) < 0.8
    assert low["HeatRemovedkW"]["Reading"] < healthy["HeatRemovedkW"]["Reading"]


def test_an_idle_loop_warms_its_return_less(service: Service) -> None:
    idle = service.doc(f"{CDU}/PrimaryCoolantConnectors/1")["ReturnTemperatureCelsius"]["Reading"]
    loaded(service.state("gpu01"))
    assert service.doc(f"{CDU}/PrimaryCoolantConnectors/1")["ReturnTemperatureCelsius"]["Reading"] > idle > 30.0


# --- errors ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/redfish/v1/Nope",
        "/redfish/v2/",
        "/etc/passwd",
        "/redfish/v1/PowerEquipment/RackPDUs/nope",
        f"{PDU}/Mains/AC9",
        f"{PDU}/Outlets/0",
        f"{PDU}/Outlets/99",
        f"{PDU}/Outlets/999999999999",
        f"{PDU}/Branches",
        f"{CDU}/PrimaryCoolantConnectors/2",
        "/redfish/v1/ThermalEquipment/CDUs/../../PowerEquipment",
        "/redfish/v1/ThermalEquipment/Fans",
    ],
)
def test_unknown_paths_are_404(service: Service, path: str) -> None:
    status, body = service.get(path)
    assert status == 404 and "ResourceMissingAtURI" in body["error"]["code"]


def test_the_service_is_read_only(service: Service) -> None:
    status, body = service.get(PDU, method="POST")
    assert status == 405 and "OperationNotAllowed" in body["error"]["code"]


def test_a_broken_rewrite_is_500_until_fixed(service: Service) -> None:
    write(service.config, "{not json")
    status, body = service.get(PDU)
    assert status == 500 and "facility config" in body["error"]["message"]
    write(service.config, facility())
    assert service.get(PDU)[0] == 200


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"password": ""}, "'password'"),
        ({"pdu": {"phases": 2}}, "'phases' must be 1 or 3"),
        ({"pdu": {"voltage_v": float("nan")}}, "'voltage_v' must be a finite number"),
        ({"pdu": {"rated_current_a": -1}}, "'rated_current_a'"),
        ({"pdu": {"feeds": [{"node": "gpu01", "phase": 4}]}}, "phase must be 1..3"),
        ({"pdu": {"feeds": [{"node": "../etc", "phase": 1}]}}, "is not a name"),
        ({"pdu": {"feeds": [{"node": "gpu01", "share": 1.5}]}}, "'share' must be in (0, 1]"),
        ({"pdu": {"miscabled": {"phase": 1, "extra_current_a": "lots"}}}, "'extra_current_a'"),
        ({"loop": {"low_flow": 0}}, "'low_flow' in (0, 1]"),
        ({"loop": {"flow_lpm": None}}, "'flow_lpm' is required"),
    ],
)
def test_bad_configs_are_refused_with_the_place(change: dict[str, Any], message: str) -> None:
    doc = facility(**{k: v for k, v in change.items() if k in ("pdu", "loop")})
    doc.update({k: v for k, v in change.items() if k not in ("pdu", "loop")})
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_config(json.dumps(doc))


def test_duplicate_ids_are_refused() -> None:
    doc = facility()
    doc["pdus"][1]["id"] = "r1-a"
    with pytest.raises(ConfigError, match="duplicate PDU id"):
        parse_config(json.dumps(doc))


# --- the command line --------------------------------------------------------------------------------


def test_the_cli_serves_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes"
    write_state(nodes / "gpu01" / "state", node="gpu01")
    config = tmp_path / "facility.json"
    write(config, facility())
    argv = [sys.executable, "-m", "testbed.sim.redfish_facility", "--config", str(config), "--state-dir", str(nodes)]
    proc = subprocess.Popen([*argv, "--port", "0"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("redfish_facility listening on http://127.0.0.1:"), line
        base = line.split()[-1]
        request = urllib.request.Request(base + "/redfish/v1/PowerEquipment/RackPDUs")
        request.add_header("Authorization", "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode())
        with urllib.request.urlopen(request, timeout=10) as response:
            assert json.loads(response.read())["Members@odata.count"] == 2
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
        assert proc.returncode == 0, err
        assert PASSWORD not in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_cli_refuses_a_bad_config(tmp_path: Path) -> None:
    config = tmp_path / "facility.json"
    config.write_text(json.dumps({"username": USER, "password": PASSWORD, "pdus": [{"id": "x", "phases": 3}]}))
    argv = ["--config", str(config), "--state-dir", str(tmp_path), "--port", "0"]
    proc = subprocess.run(
        [sys.executable, "-m", "testbed.sim.redfish_facility", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "PDU x: 'voltage_v' is required" in proc.stderr
