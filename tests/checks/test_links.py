"""gpu_links: PCIe width/generation per GPU and NVLinks, on real nvlink outputs and the simulator."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from checks import get_check, run_check
from checks.core.base import ERROR, FAIL, PASS, Command, CommandOutput, EvidenceError, NodeContext
from checks.core.parsers import parse_output
from checks.core.profiles import resolve_thresholds
from checks.gpu.links import NVLINK_LABEL, parse_nvlink_status
from tests.checks.probe_docs import REPO, gpu_doc, output, probe_doc

FIXTURES = REPO / "tests/fixtures/nvidia-smi"
NODE = NodeContext(hostname="gpu001")
BUSY = {"mask": 0, "active": []}


def nvlink_text(n: int = 8, links: int = 18, speed: str = "26.562", down: int | None = None) -> str:
    out = []
    for i in range(n):
        out.append(f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd)")
        if i == down:
            out.append("NVML: Unable to retrieve NVLink information as all links are inactive")
        else:
            out += [f"\t Link {k}: {speed} GB/s" for k in range(links)]
    return "\n".join(out) + "\n"


def judge(doc: dict, nvlink: str, profile: str | None = "H100-SXM-8", **overrides):
    nv = CommandOutput(Command(("nvidia-smi", "nvlink", "--status"), 30, label=NVLINK_LABEL), nvlink, "", 0)
    thresholds = resolve_thresholds("gpu_links", profile, overrides)
    return run_check(get_check("gpu_links"), None, thresholds, [*output(doc), nv], NODE)


def test_it_parses_both_nvlink_fixtures() -> None:
    good = parse_nvlink_status((FIXTURES / "nvsmi_nvlink_status_A100_good.txt").read_text()).measurements
    summary = next(m for m in good if m.name == "nvlinks_active")
    assert (summary.gpu, summary.value, summary.labels["model"]) == (7, 12, "NVIDIA A100-SXM4-80GB")
    assert [m.value for m in good if m.name == "nvlink_speed"] == [25.0] * 12
    bad = parse_nvlink_status((FIXTURES / "nvsmi_nvlink_status_A100_all_inactive.txt").read_text())
    (only,) = bad.measurements
    assert (only.gpu, only.value) == (6, 0)
    assert only.labels["note"] == "NVML: Unable to retrieve NVLink information as all links are inactive"
    assert bad.warnings == ["GPU 6: NVML: Unable to retrieve NVLink information as all links are inactive"]
    # The kind `python -m checks parse nvlink_status` dispatches to reads the same links.
    text = (FIXTURES / "nvsmi_nvlink_status_A100_good.txt").read_text()
    assert [m.value for m in parse_output("nvlink_status", text).measurements if m.name == "nvlink_speed"] == [
        25.0
    ] * 12


def test_it_rejects_output_without_a_gpu() -> None:
    with pytest.raises(EvidenceError, match="listed no GPU"):
        parse_nvlink_status("Failed to initialize NVML: Driver/library version mismatch\n")


def test_it_passes_healthy_links() -> None:
    measurements, verdict = judge(probe_doc(), nvlink_text())
    assert (verdict.status, verdict.reason) == (PASS, "8 GPUs: PCIe at full width, 18 NVLinks each")
    width = next(m for m in measurements if m.name == "pcie_width_current" and m.gpu == 0)
    assert (width.threshold, width.ok) == (">= 16", True)


def test_it_fails_a_narrow_pcie_link_even_when_idle() -> None:
    doc = probe_doc(
        gpus=[
            gpu_doc(i, pcie={"gen_current": 4, "gen_max": 5, "width_current": 8, "width_max": 16})
            if i == 2
            else gpu_doc(i)
            for i in range(8)
        ]
    )
    _, verdict = judge(doc, nvlink_text())
    assert (verdict.status, verdict.reason) == (FAIL, "GPU 2: PCIe Gen4 x8, expected Gen5 x16")


def test_it_does_not_judge_a_low_generation_on_an_idle_gpu() -> None:
    idle_gen1 = {"gen_current": 1, "gen_max": 5, "width_current": 16, "width_max": 16}
    doc = probe_doc(gpus=[gpu_doc(i, pcie=dict(idle_gen1)) for i in range(8)])
    measurements, verdict = judge(doc, nvlink_text())
    assert verdict.status == PASS
    gen = next(m for m in measurements if m.name == "pcie_gen_current" and m.gpu == 0)
    assert gen.ok is None and "idle" in gen.labels["note"]


def test_it_fails_a_low_generation_under_load() -> None:
    busy_gen4 = {"gen_current": 4, "gen_max": 5, "width_current": 16, "width_max": 16}
    gpus = [gpu_doc(i, pcie=dict(busy_gen4), clock_event_reasons=BUSY) if i == 5 else gpu_doc(i) for i in range(8)]
    _, verdict = judge(probe_doc(gpus=gpus), nvlink_text())
    assert (verdict.status, verdict.reason) == (FAIL, "GPU 5: PCIe Gen4 x16, expected Gen5 x16")


def test_it_fails_a_slot_that_cannot_reach_the_profile_generation() -> None:
    gen4_slot = {"gen_current": 4, "gen_max": 4, "width_current": 16, "width_max": 16}
    gpus = [gpu_doc(i, pcie=dict(gen4_slot)) if i == 1 else gpu_doc(i) for i in range(8)]
    _, verdict = judge(probe_doc(gpus=gpus), nvlink_text())
    assert verdict.reason == "GPU 1: PCIe Gen4 x16, expected Gen5 x16 (GPU/slot capable of Gen4 only)"


def test_it_judges_pcie_against_the_gpus_own_max_without_a_profile() -> None:
    doc = probe_doc(
        gpus=[gpu_doc(i, pcie={"gen_current": 4, "gen_max": 4, "width_current": 16, "width_max": 16}) for i in range(8)]
    )
    _, verdict = judge(doc, nvlink_text(), profile=None)
    assert verdict.status == PASS


def test_it_errors_on_missing_pcie_facts() -> None:
    gpus = [gpu_doc(i) for i in range(8)]
    gpus[4]["pcie"]["width_current"] = None
    gpus[4]["errors"]["pcie.width_current"] = "Not Supported"
    _, verdict = judge(probe_doc(gpus=gpus), nvlink_text())
    assert (verdict.status, verdict.reason) == (ERROR, "GPU 4: pcie_width_current unavailable (Not Supported)")


def test_it_fails_a_gpu_with_all_nvlinks_inactive() -> None:
    _, verdict = judge(probe_doc(), nvlink_text(down=5))
    assert (verdict.status, verdict.reason) == (FAIL, "GPU 5: 0 of 18 NVLinks active")


def test_it_fails_all_inactive_links_even_without_an_expected_count() -> None:
    _, verdict = judge(probe_doc(), nvlink_text(down=6), profile=None)
    assert verdict.status == FAIL
    assert verdict.reason.startswith("GPU 6: all NVLinks inactive (NVML:")


def test_it_fails_slow_nvlinks() -> None:
    _, verdict = judge(probe_doc(), nvlink_text(speed="13.281"))
    assert verdict.status == FAIL
    assert verdict.reason.startswith("GPU 0: NVLink 0 at 13.281 GB/s, 1 at 13.281 GB/s")


def test_it_errors_on_a_gpu_missing_from_the_nvlink_output() -> None:
    _, verdict = judge(probe_doc(), nvlink_text(n=7))
    assert (verdict.status, verdict.reason) == (ERROR, "GPU 7: not listed by nvidia-smi nvlink --status")


def test_it_reports_nvidia_smis_own_words_when_nvlink_fails() -> None:
    nv = CommandOutput(
        Command(("nvidia-smi", "nvlink", "--status"), 30, label=NVLINK_LABEL),
        "NVML: Unable to retrieve NVLink information as all links are inactive\n",
        "",
        3,
    )
    _, verdict = run_check(get_check("gpu_links"), None, None, [*output(probe_doc()), nv], NODE)
    assert verdict.status == ERROR
    assert verdict.reason == (
        "nvidia-smi nvlink exited 3: NVML: Unable to retrieve NVLink information as all links are inactive"
    )


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory):
    from testbed.sim import build_simulator

    return build_simulator(tmp_path_factory.mktemp("sim"))


def run_sim(sim, tmp_path: Path, **faults):
    from testbed.sim import node_env, write_state
    from worker.ssh import LocalTransport, NodeTarget

    pytest.importorskip("pynvml")
    state = tmp_path / "gpu01" / "state"
    write_state(state, node="gpu01", **faults)
    transport = LocalTransport(NodeTarget(hostname="gpu01", transport="local", local_env=node_env(sim, state)))
    check = get_check("gpu_links")
    node = NodeContext(hostname="gpu01", since=time.time())
    outputs = [transport.run(c) for c in check.commands(check.make_params(None), node)]
    return run_check(check, None, resolve_thresholds("gpu_links", "H100-SXM-8"), outputs, node)


def test_it_passes_the_simulated_healthy_node(sim, tmp_path: Path) -> None:
    measurements, verdict = run_sim(sim, tmp_path)
    assert verdict.status == PASS, verdict.reason
    assert len([m for m in measurements if m.name == "nvlink_speed" and m.value == 26.562]) == 8 * 18


def test_it_fails_the_simulated_nvlink_down_gpu(sim, tmp_path: Path) -> None:
    _, verdict = run_sim(sim, tmp_path, nvlink_down_gpu=5)
    assert (verdict.status, verdict.reason) == (FAIL, "GPU 5: 0 of 18 NVLinks active")


def test_it_fails_the_simulated_pcie_degraded_gpu(sim, tmp_path: Path) -> None:
    _, verdict = run_sim(sim, tmp_path, pcie_degraded_gpu=2)
    assert (verdict.status, verdict.reason) == (FAIL, "GPU 2: PCIe Gen4 x8, expected Gen5 x16")
