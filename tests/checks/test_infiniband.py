"""ib_ports: ibstat parsing on real captures, judging, and the simulated ibstat end to end."""

from __future__ import annotations

from pathlib import Path

import pytest

from checks import get_check, run_check
from checks.core.base import ERROR, FAIL, PASS, WARN, Command, CommandOutput, EvidenceError, Measurement, NodeContext
from checks.core.parsers import parse_output
from checks.core.profiles import resolve_thresholds
from checks.rdma.infiniband import parse_ibstat
from tests.checks.probe_docs import REPO

FIXTURES = REPO / "tests/fixtures/ibstat"
SOME_DOWN = "ibstat_H100_node_8xNDR400_some_down.txt"
ROCE = "ibstat_H100_node_all_active_roce.txt"
NODE = NodeContext(hostname="gpu001")


def judge(stdout: str, *, exit_code: int = 0, stderr: str = "", profile: str | None = "H100-SXM-8", **overrides):
    out = CommandOutput(Command(("ibstat",), 30, label="ibstat"), stdout, stderr, exit_code)
    return run_check(get_check("ib_ports"), None, resolve_thresholds("ib_ports", profile, overrides), [out], NODE)


def ports(measurements, name="port_state"):
    return {m.labels["ca"]: m for m in measurements if m.name == name}


def test_it_parses_both_ibstat_fixtures() -> None:
    names = sorted(p.name for p in FIXTURES.glob("*.txt") if not p.name.endswith(".source.txt"))
    assert names == [SOME_DOWN, ROCE]
    for name in names:
        parsed = parse_ibstat((FIXTURES / name).read_text())
        assert len(ports(parsed.measurements)) == 12
        # ...and so does the `ibstat` kind of `python -m checks parse`.
        assert len(ports(parse_output("ibstat", (FIXTURES / name).read_text()).measurements)) == 12


def test_it_pins_ports_and_firmware_of_the_ndr_node() -> None:
    ms = parse_ibstat((FIXTURES / SOME_DOWN).read_text()).measurements
    state, rate = ports(ms), ports(ms, "port_rate")
    assert (state["mlx5_0"].text, rate["mlx5_0"].value, rate["mlx5_0"].unit) == ("Active", 400, "Gb/s")
    assert state["mlx5_0"].labels == {
        "ca": "mlx5_0",
        "port": "1",
        "link_layer": "InfiniBand",
        "physical_state": "LinkUp",
        "ca_type": "MT4129",
    }
    assert (state["mlx5_7"].text, state["mlx5_7"].labels["physical_state"], rate["mlx5_7"].value) == (
        "Down",
        "Disabled",
        40,
    )
    fw = ports(ms, "ca_firmware")
    assert (fw["mlx5_0"].text, fw["mlx5_1"].text, fw["mlx5_1"].labels["ca_type"]) == (
        "28.39.1002",
        "22.38.1002",
        "MT4125",
    )
    assert sum(1 for m in state.values() if m.labels["link_layer"] == "InfiniBand" and m.text == "Active") == 8


def test_it_passes_the_ndr_fixture_judging_only_infiniband_ports() -> None:
    _, verdict = judge((FIXTURES / SOME_DOWN).read_text())
    assert (verdict.status, verdict.reason) == (PASS, "8 InfiniBand ports Active at 400 Gb/s")


def test_it_errors_on_a_roce_node_judged_as_infiniband_and_says_how_to_fix_it() -> None:
    _, verdict = judge((FIXTURES / ROCE).read_text())
    assert verdict.status == ERROR
    assert "link_layers=InfiniBand,Ethernet" in verdict.reason


def test_it_passes_the_roce_fixture_with_ethernet_and_the_front_end_cas_ignored() -> None:
    text = (FIXTURES / ROCE).read_text()
    _, verdict = judge(text, link_layers="InfiniBand,Ethernet", ignore_cas="mlx5_1,mlx5_2,mlx5_7,mlx5_8")
    assert (verdict.status, verdict.reason) == (PASS, "8 InfiniBand,Ethernet ports Active at 400 Gb/s")


def test_it_fails_a_down_port_and_the_missing_count() -> None:
    text = (FIXTURES / SOME_DOWN).read_text().replace("State: Active", "State: Down", 1)
    text = text.replace("Physical state: LinkUp", "Physical state: Polling", 1)
    measurements, verdict = judge(text)
    assert verdict.status == FAIL
    assert verdict.reason == "mlx5_0 port 1: Down (Polling); 7 active ports, expected 8"
    assert ports(measurements)["mlx5_0"].ok is False


def test_it_keeps_partial_output_when_ibstat_exits_255() -> None:
    text = (FIXTURES / SOME_DOWN).read_text()
    _, verdict = judge(text, exit_code=255, stderr="ibpanic: [42] main: stat of IB device 'mlx5_12' failed\n")
    assert verdict.status == WARN
    assert verdict.reason.startswith("ibstat exited 255 (ibpanic: [42] main: stat of IB device 'mlx5_12' failed)")
    _, verdict = judge(text, exit_code=255, profile=None)
    assert verdict.status == ERROR  # no expected count: cannot tell what is missing


@pytest.mark.parametrize("stdout", ["", "ibwarn: umad_init failed\n"])
def test_it_errors_when_no_ca_is_readable(stdout: str) -> None:
    measurements, verdict = judge(stdout, exit_code=255, stderr="ibpanic: no IB devices\n")
    assert verdict.status == ERROR and measurements == []
    assert "ibstat printed" in verdict.reason and "ibpanic: no IB devices" in verdict.reason
    with pytest.raises(EvidenceError):
        parse_ibstat(stdout)


def test_it_sets_ndr_and_hdr_expectations_per_profile() -> None:
    assert resolve_thresholds("ib_ports", "H100-SXM-8")["expected_rate_gbps"] == 400
    assert resolve_thresholds("ib_ports", "A100-SXM-8")["expected_rate_gbps"] == 200
    assert resolve_thresholds("ib_ports", "generic")["expected_ports"] is None


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory):
    from testbed.sim import build_simulator

    return build_simulator(tmp_path_factory.mktemp("sim"))


def run_sim(sim, tmp_path: Path, **faults):
    from testbed.sim import node_env, write_state
    from worker.ssh import LocalTransport, NodeTarget

    state = tmp_path / "gpu01" / "state"
    write_state(state, node="gpu01", **faults)
    transport = LocalTransport(NodeTarget(hostname="gpu01", transport="local", local_env=node_env(sim, state)))
    check = get_check("ib_ports")
    outputs = [transport.run(c) for c in check.commands(check.make_params(None), NODE)]
    return run_check(check, None, resolve_thresholds("ib_ports", "H100-SXM-8"), outputs, NODE)


def test_it_passes_the_simulated_healthy_node(sim, tmp_path: Path) -> None:
    measurements, verdict = run_sim(sim, tmp_path)
    assert (verdict.status, verdict.reason) == (PASS, "8 InfiniBand ports Active at 400 Gb/s")
    assert ports(measurements)["mlx5_8"].labels["link_layer"] == "Ethernet"  # the front-end port, not judged


def test_it_fails_a_simulated_down_port_naming_it(sim, tmp_path: Path) -> None:
    measurements, verdict = run_sim(sim, tmp_path, ib_port_down="mlx5_3")
    assert verdict.status == FAIL
    assert verdict.reason == "mlx5_3 port 1: Down (Polling); 7 active ports, expected 8"
    assert ports(measurements, "port_rate")["mlx5_3"].value == 10


def test_it_fails_a_simulated_slow_port_naming_the_rate(sim, tmp_path: Path) -> None:
    _, verdict = run_sim(sim, tmp_path, ib_port_rate="mlx5_2:200")
    assert (verdict.status, verdict.reason) == (FAIL, "mlx5_2 port 1: 200 Gb/s, expected 400")


def test_it_prints_the_firmware_from_the_state(sim, tmp_path: Path) -> None:
    measurements, _ = run_sim(sim, tmp_path, nic_fw="28.41.1000")
    assert ports(measurements, "ca_firmware")["mlx5_0"].text == "28.41.1000"


def test_its_consensus_names_are_what_the_consensus_compares() -> None:
    """Closing a run reads only IbPorts.consensus_names for every node."""
    from checks.rdma.infiniband import IB_CONSENSUS_NAMES, IbPorts

    assert IbPorts.consensus_names == frozenset(IB_CONSENSUS_NAMES) == {"ports_active", "port_rate_min"}
    ports = {f"n{i}": 8.0 for i in range(1, 5)} | {"n3": 6.0}
    per_node = {
        host: [Measurement(name="ports_active", value=v), Measurement(name="ibstat_exit_code", value=0)]
        for host, v in ports.items()
    }
    kept = {h: [m for m in ms if m.name in IbPorts.consensus_names] for h, ms in per_node.items()}
    assert set(IbPorts.consensus(per_node)) == {"n3"} and IbPorts.consensus(kept) == IbPorts.consensus(per_node)


def test_it_records_each_cas_node_guid_as_its_identity() -> None:
    ms = parse_ibstat((FIXTURES / ROCE).read_text()).measurements
    guids = ports(ms, "ca_guid")
    assert guids["mlx5_0"].text == "0xa088c20300e3142a"
    assert guids["mlx5_0"].labels["ca_type"] == "MT4129"
    assert guids["mlx5_1"].text == "0xe8ebd303003307da"
    assert set(guids) == set(ports(ms, "ca_firmware"))  # one identity per CA, beside its firmware
