"""pcie_link on simulated nodes: each node's sysfs is its own tree (testbed/sim/node_root.py), and
a fault is written into one node's files here, with no simulator code."""

from __future__ import annotations

from pathlib import Path

import pytest

from checks.core.base import ERROR, FAIL, PASS, Measurement, NodeContext, Verdict, by_slug, catalogued, run_check
from checks.core.profiles import resolve_thresholds
from checks.gpu.pcie_link import PcieLink
from testbed.sim import SimPaths, build_simulator, node_env, write_node_file, write_state
from worker.ssh import LocalTransport, NodeTarget

NODE = NodeContext(hostname="gpu01", expected_gpus=8)
GPU0, GPU3, NIC0 = "0000:18:00.0", "0000:5d:00.0", "0000:19:00.0"


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> SimPaths:
    return build_simulator(tmp_path_factory.mktemp("sim"))


@pytest.fixture
def state(tmp_path: Path) -> Path:
    path = tmp_path / "nodes" / "gpu01" / "state"
    write_state(path, node="gpu01")
    return path


def set_link(state: Path, bus: str, **attributes: str | None) -> None:
    for name, text in attributes.items():
        write_node_file(state, f"/sys/bus/pci/devices/{bus}/{name}", text)


def run(sim: SimPaths, state: Path, thresholds: dict | None = None) -> tuple[list[Measurement], Verdict]:
    check = PcieLink()
    transport = LocalTransport(NodeTarget(hostname="gpu01", transport="local", local_env=node_env(sim, state)))
    outputs = [transport.run(c) for c in check.commands(check.make_params({}), NODE)]
    t = resolve_thresholds("pcie_link", "H100-SXM-8") if thresholds is None else thresholds
    return run_check(check, {}, t, outputs, NODE)


def test_a_healthy_node_passes_with_every_gpu_and_nic_judged(sim: SimPaths, state: Path) -> None:
    measurements, verdict = run(sim, state)
    assert verdict.status == PASS, verdict.reason
    assert verdict.reason == "8 GPUs and 8 NICs at their full PCIe link width and speed"
    widths = [m for m in measurements if m.name == "pcie_width"]
    assert len(widths) == 16 and all(m.ok and m.threshold == ">= 16" for m in widths)
    assert [m.labels["bus"] for m in widths if m.gpu == 0] == [GPU0]


def test_a_gpu_trained_at_x8_fails_naming_it_and_its_bus(sim: SimPaths, tmp_path: Path, state: Path) -> None:
    other = tmp_path / "nodes" / "gpu02" / "state"
    write_state(other, node="gpu02")
    set_link(state, GPU0, current_link_width="8")
    measurements, verdict = run(sim, state)
    assert verdict.status == FAIL
    assert verdict.reason.startswith(f"GPU 0 ({GPU0}): link trained at x8, expected x16")
    [bad] = [m for m in measurements if m.ok is False]
    assert (bad.name, bad.gpu, bad.value) == ("pcie_width", 0, 8)
    assert run(sim, other)[1].status == PASS  # the fault is that node's alone


def test_the_simulator_degraded_gpu_fails_on_speed_and_width(sim: SimPaths, state: Path) -> None:
    write_state(state, node="gpu01", pcie_degraded_gpu=3)
    _, verdict = run(sim, state)
    assert verdict.status == FAIL
    assert f"GPU 3 ({GPU3}): link trained at x8, expected x16 and 16 GT/s, expected 32 GT/s" in verdict.reason


def test_a_nic_below_its_generation_fails(sim: SimPaths, state: Path) -> None:
    set_link(state, NIC0, current_link_speed="16.0 GT/s PCIe")
    _, verdict = run(sim, state)
    assert verdict.status == FAIL and f"NIC {NIC0}: link trained at 16 GT/s, expected 32 GT/s" in verdict.reason


def test_an_idle_gpu_parked_at_gen1_is_noted_not_failed(sim: SimPaths, state: Path) -> None:
    set_link(state, GPU0, current_link_speed="2.5 GT/s PCIe")
    measurements, verdict = run(sim, state)
    assert verdict.status == PASS
    [speed] = [m for m in measurements if m.name == "pcie_speed" and m.gpu == 0]
    assert speed.ok is None and "idle GPU" in speed.labels["note"]
    set_link(state, GPU0, current_link_speed="8.0 GT/s PCIe")  # Gen3: trained low, not idle
    assert run(sim, state)[1].status == FAIL


def test_defaults_judge_each_device_against_its_own_maximum(sim: SimPaths, state: Path) -> None:
    set_link(state, GPU3, current_link_width="4")
    measurements, verdict = run(sim, state, thresholds={})
    assert verdict.status == FAIL and f"GPU 3 ({GPU3}): link trained at x4, expected x16" in verdict.reason


def test_a_missing_link_file_is_an_error_naming_the_device(sim: SimPaths, state: Path) -> None:
    set_link(state, GPU3, current_link_width=None)
    _, verdict = run(sim, state)
    assert verdict.status == ERROR
    assert verdict.reason == f"GPU 3 ({GPU3}): current_link_width missing or unreadable"
    set_link(state, GPU3, current_link_width="wide")
    assert "current_link_width is 'wide'" in run(sim, state)[1].reason


def test_a_fault_beside_missing_evidence_still_fails(sim: SimPaths, state: Path) -> None:
    set_link(state, GPU0, current_link_width="8")
    set_link(state, GPU3, max_link_speed=None)
    _, verdict = run(sim, state)
    assert verdict.status == FAIL and "could not tell" in verdict.reason


def test_impossible_values_are_refused(sim: SimPaths, state: Path) -> None:
    set_link(state, GPU0, current_link_width="64")
    _, verdict = run(sim, state)
    assert verdict.status == ERROR and "GPU 0 pcie_width (bus=0000:18:00.0, device=gpu) = 64 lanes" in verdict.reason
    set_link(state, GPU0, current_link_width="16", current_link_speed="512.0 GT/s PCIe")
    assert (
        "impossible evidence: GPU 0 pcie_speed (bus=0000:18:00.0, device=gpu) = 512 GT/s" in run(sim, state)[1].reason
    )


def test_a_node_with_no_gpu_on_the_bus_is_an_error(sim: SimPaths, state: Path) -> None:
    write_state(state, node="gpu01", gpus=0)
    _, verdict = run(sim, state)
    assert verdict.status == ERROR and verdict.reason.startswith("no NVIDIA GPU among the PCI devices")


def test_its_catalog_entry_comes_from_the_class() -> None:
    assert by_slug("pcie-link") is PcieLink and PcieLink in catalogued()
    assert PcieLink.name and PcieLink.description
