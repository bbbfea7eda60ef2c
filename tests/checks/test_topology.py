"""topology: nvidia-smi topo -m parsed on real outputs, each GPU's nearest NIC judged, the odd node flagged."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from checks import get_check, presentation_of, run_check
from checks.core.base import ERROR, FAIL, PASS, WARN, Command, CommandOutput, EvidenceError, Measurement, NodeContext
from checks.core.parsers import PARSERS, parse_output
from checks.core.profiles import resolve_thresholds
from checks.core.schema import ParamsError
from checks.topology.check import TOPO_LABEL, GpuNicTopology, nics_needed, topology_facts
from checks.topology.matrix import link_rank

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi-topo"
A100 = FIXTURES / "dgx-a100-8gpu-12nic.txt"
DGX1 = FIXTURES / "dgx1-v100-pcie-only-topo-mp.txt"
H100 = FIXTURES / "hgx-h100-8gpu-8nic-nic-legend-drv570.txt"
LEGACY = FIXTURES / "legacy-k40m-4gpu-mlx4-soc.txt"
NODE = NodeContext(hostname="gpu001")
COMMAND = Command(argv=("nvidia-smi", "topo", "-m"), timeout=30, label=TOPO_LABEL, read_only=True)
LEGEND = "\nLegend:\n\n  X    = Self\n  NV#  = Connection traversing a bonded set of # NVLinks\n"
GPUS_ONLY = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tNV4\t0-15\t0\nGPU1\tNV4\t X \t0-15\t0\n" + LEGEND


def judge(stdout: str, profile: str | None = "H100-SXM-8", *, exit_code: int = 0, **overrides: Any):
    thresholds = resolve_thresholds("topology", profile, overrides)
    return run_check(get_check("topology"), None, thresholds, [CommandOutput(COMMAND, stdout, "", exit_code)], NODE)


def parsed(path: Path) -> list[Measurement]:
    return parse_output("nvidia_smi_topo", path.read_text()).measurements


def by(measurements: list[Measurement], name: str, gpu: int | None = None, nic: str | None = None) -> Measurement:
    return next(
        m for m in measurements if m.name == name and m.gpu == gpu and (nic is None or m.labels.get("nic") == nic)
    )


# --- the parser on real outputs ------------------------------------------------------------------


def test_it_reads_the_dgx_a100_matrix_with_twelve_nics() -> None:
    ms = parsed(A100)
    assert by(ms, "nic_count").value == 12
    assert len([m for m in ms if m.name == "gpu_nic_link"]) == 8 * 12
    link = by(ms, "gpu_nic_link", 0, "mlx5_0")
    assert (link.value, link.text, link.labels) == (3, "PXB", {"nic": "mlx5_0"})
    assert (by(ms, "gpu_nic_link", 0, "mlx5_4").value, by(ms, "gpu_nic_link", 0, "mlx5_4").text) == (6, "SYS")
    nearest = by(ms, "gpu_nearest_nic_link", 6)
    assert (nearest.value, nearest.text, nearest.labels["nic"]) == (3, "PXB", "mlx5_8,mlx5_9")
    assert [by(ms, "gpu_numa_affinity", g).value for g in range(8)] == [3, 3, 1, 1, 7, 7, 5, 5]
    assert by(ms, "gpu_numa_affinity", 4).labels == {"cpu_affinity": "112-127,240-255"}
    # mlx5_4/5 and mlx5_10/11 (a PIX pair each) are near no GPU
    assert not any(m.name == "gpu_nearest_nic_link" and "mlx5_4" in m.labels["nic"].split(",") for m in ms)


def test_it_reads_the_dgx1_pcie_only_matrix() -> None:
    ms = parsed(DGX1)
    assert by(ms, "nic_count").value == 4
    assert [by(ms, "gpu_nearest_nic_link", g).labels["nic"] for g in range(8)] == [
        "mlx5_0", "mlx5_0", "mlx5_1", "mlx5_1", "mlx5_2", "mlx5_2", "mlx5_3", "mlx5_3",
    ]  # fmt: skip
    assert {by(ms, "gpu_nearest_nic_link", g).text for g in range(8)} == {"PIX"}
    assert (by(ms, "gpu_nic_link", 0, "mlx5_1").text, by(ms, "gpu_nic_link", 0, "mlx5_1").value) == ("PHB", 4)
    assert [by(ms, "gpu_numa_affinity", g).value for g in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_it_names_nic_columns_from_the_nic_legend() -> None:
    ms = parsed(H100)
    assert by(ms, "nic_count").value == 8
    link = by(ms, "gpu_nic_link", 5, "mlx5_5")
    assert (link.text, link.value, link.labels) == ("PIX", 2, {"nic": "mlx5_5", "column": "NIC5"})
    assert not any(m.labels.get("nic", "").startswith("NIC") for m in ms)
    assert [by(ms, "gpu_nearest_nic_link", g).labels["nic"] for g in range(8)] == [f"mlx5_{g}" for g in range(8)]
    numa = by(ms, "gpu_numa_affinity", 7)
    assert (numa.value, numa.labels) == (1, {"cpu_affinity": "48-95,144-191"})  # GPU NUMA ID N/A: left out


def test_it_reads_the_legacy_soc_link_as_across_the_sockets() -> None:
    ms = parsed(LEGACY)
    link = by(ms, "gpu_nic_link", 0, "mlx4_0")
    assert (link.text, link.value) == ("SOC", 6)
    assert by(ms, "gpu_nearest_nic_link", 2).text == "PHB"
    numa = by(ms, "gpu_numa_affinity", 0)
    assert (numa.value, numa.labels["missing"]) == (None, "no NUMA Affinity column (an older nvidia-smi)")


def test_it_ranks_links_nearest_first() -> None:
    assert [link_rank(t) for t in ("X", "NV18", "PIX", "PXB", "PHB", "NODE", "SYS")] == [0, 1, 2, 3, 4, 5, 6]
    assert link_rank("NV1") == link_rank("NV12") == 1
    assert link_rank("N/A") is None


def test_its_cli_prints_the_measurements() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "checks", "parse", "nvidia_smi_topo", str(H100)],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert '"gpu_nearest_nic_link"' in result.stdout and '"mlx5_7"' in result.stdout


BROKEN = [
        ("", "printed nothing"),
        ("\x00\x01\x02 garbage", "binary bytes"),
        ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", "no matrix header"),
        (H100.read_text().split("NIC5    SYS")[0], "no row for NIC5"),
        (H100.read_text()[: H100.read_text().index("NIC2    NODE") + 30], "row NIC2 has 3 cells, the header 16"),
        (H100.read_text().split("\nLegend:")[0], "no Legend after the matrix"),
        (H100.read_text().split("  NIC6: mlx5_6")[0], "the NIC Legend does not name NIC6"),
        (H100.read_text().replace("GPU3    NV18", "GPU3    NVX "), "unknown link type 'NVX' between GPU3 and GPU0"),
        (H100.read_text().replace("GPU0     X      NV18", "GPU0     X      N/A", 1), "unknown link type 'N/A'"),
        (LEGACY.read_text().replace("SMP link between CPU sockets", "on-chip interconnect"), "unknown link type 'SOC'"),
        (H100.read_text().replace("GPU1    NV18     X      NV18", "GPU1    NV18    PIX     NV18"), "its own diagonal"),
        (H100.read_text().replace("NIC3    NODE    NODE    NODE    PIX", "NIC3    NODE    NODE    NODE    SYS"),
         "GPU3 to NIC3 reads PIX but back reads SYS"),
        (H100.read_text().replace("0-47,96-143     0 ", "0-47,96-143     nan ", 1), "NUMA Affinity reads 'nan'"),
        (H100.read_text().replace("GPU2    NV18", "GPU9    NV18"), "matrix row 3 is 'GPU9', expected GPU2"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "why"), BROKEN, ids=[why for _, why in BROKEN])
def test_it_refuses_what_is_not_a_whole_matrix(text: str, why: str) -> None:
    with pytest.raises(EvidenceError, match=why.replace("(", r"\(").replace(")", r"\)")):
        PARSERS["nvidia_smi_topo"](text)
    _, verdict = judge(text)
    assert verdict.status == ERROR and why in verdict.reason


@pytest.mark.parametrize("path", [A100, DGX1, H100, LEGACY], ids=lambda p: p.name)
def test_a_matrix_cut_anywhere_is_never_a_pass(path: Path) -> None:
    text = path.read_text()
    legend = text.index("Legend:")
    for cut in range(0, legend, max(1, legend // 40)):
        _, verdict = judge(text[:cut], "A100-SXM-8")
        assert verdict.status == ERROR, (cut, verdict.reason)


# --- the check ------------------------------------------------------------------------------------


def test_it_passes_the_dgx_a100_on_its_profile() -> None:
    measurements, verdict = judge(A100.read_text(), "A100-SXM-8")
    assert (verdict.status, verdict.reason) == (PASS, "8 GPUs, 12 NICs: each GPU's nearest NIC is PXB, within PXB")
    nearest = by(measurements, "gpu_nearest_nic_link", 0)
    assert (nearest.threshold, nearest.ok) == ("<= PXB", True)


def test_it_passes_the_hgx_h100_on_its_profile() -> None:
    _, verdict = judge(H100.read_text())
    assert (verdict.status, verdict.reason) == (PASS, "8 GPUs, 8 NICs: each GPU's nearest NIC is PIX, within PXB")


def test_it_fails_a_gpu_whose_nearest_nic_is_across_the_sockets() -> None:
    measurements, verdict = judge(LEGACY.read_text())
    assert verdict.status == FAIL
    assert verdict.reason == (
        "GPU0's nearest NIC mlx4_0 is SOC (across the CPU sockets); allowed PIX or PXB; "
        "GPU1's nearest NIC mlx4_0 is SOC (across the CPU sockets); allowed PIX or PXB; "
        "GPU2's nearest NIC mlx4_0 is PHB (through the CPU's PCIe host bridge); allowed PIX or PXB; "
        "GPU3's nearest NIC mlx4_0 is PHB (through the CPU's PCIe host bridge); allowed PIX or PXB"
    )
    assert by(measurements, "gpu_nearest_nic_link", 0).ok is False


def test_it_allows_what_the_threshold_allows() -> None:
    _, verdict = judge(LEGACY.read_text(), max_gpu_nic_link="sys")
    assert (verdict.status, verdict.reason) == (PASS, "4 GPUs, 1 NIC: each GPU's nearest NIC is PHB/SOC, within SYS")


def test_it_fails_a_gpu_short_of_the_nics_it_needs() -> None:
    _, verdict = judge(H100.read_text(), expect_nic_per_gpu=2)
    assert verdict.status == FAIL
    assert verdict.reason.startswith("GPU0 has 1 NIC(s) at or within PXB, expected 2; GPU1 has 1 NIC(s)")
    _, verdict = judge(A100.read_text(), "A100-SXM-8", expect_nic_per_gpu=2)  # a switch pair each
    assert verdict.status == PASS


def test_it_fails_a_matrix_without_nics_when_each_gpu_needs_one() -> None:
    measurements, verdict = judge(GPUS_ONLY)
    assert (verdict.status, verdict.reason) == (
        FAIL, "no NIC in the topology matrix (2 GPUs); expected 1 per GPU at or within PXB"
    )  # fmt: skip
    count = by(measurements, "nic_count")
    assert (count.value, count.threshold, count.ok) == (0, ">= 1", False)


def test_it_warns_on_a_matrix_without_nics_when_none_is_expected() -> None:
    _, verdict = judge(GPUS_ONLY, None)
    assert (verdict.status, verdict.reason) == (
        WARN, "2 GPUs and no NIC in the topology matrix: GPU-NIC placement not judged"
    )  # fmt: skip
    _, verdict = judge(GPUS_ONLY, max_gpu_nic_link="PXB", expect_nic_per_gpu=False)
    assert verdict.status == WARN


def test_it_warns_without_a_threshold_never_a_bare_pass() -> None:
    measurements, verdict = judge(H100.read_text(), None)
    assert (verdict.status, verdict.reason) == (
        WARN,
        "8 GPUs, 8 NICs: each GPU's nearest NIC is PIX; GPU-NIC links not judged (no max_gpu_nic_link set)",
    )
    assert all(m.ok is None for m in measurements)
    _, verdict = judge(LEGACY.read_text(), "generic")
    assert verdict.status == WARN


def test_it_errors_naming_what_nvidia_smi_said_when_it_failed() -> None:
    said = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    _, verdict = judge(said + "\n", exit_code=9)
    assert (verdict.status, verdict.reason) == (ERROR, f"nvidia-smi topo exited 9: {said}")


def test_it_validates_its_thresholds() -> None:
    assert resolve_thresholds("topology", None, {"max_gpu_nic_link": " pxb "})["max_gpu_nic_link"] == "PXB"
    for bad in ("NV18", "FAR", "X"):
        with pytest.raises(ParamsError, match="max_gpu_nic_link"):
            resolve_thresholds("topology", None, {"max_gpu_nic_link": bad})
    assert [nics_needed(v) for v in (None, False, True, 0, 2, "yes", "no", "3", 1.0)] == [0, 0, 1, 0, 2, 1, 0, 3, 1]
    for bad in (-1, "maybe", 1.5, [1]):
        with pytest.raises(ParamsError, match="expect_nic_per_gpu"):
            resolve_thresholds("topology", None, {"expect_nic_per_gpu": bad})


def test_it_declares_what_the_portal_shows() -> None:
    shown = presentation_of("topology")
    assert [k.name for k in shown.key_metrics] == ["gpu_nearest_nic_link"]
    assert (shown.key_metrics[0].better, shown.key_metrics[0].gpu_agg) == ("lower", "max")
    assert [(p.measurement, p.metric, p.label) for p in shown.prometheus] == [
        ("gpu_nearest_nic_link", "kiln_gpu_nearest_nic_link_rank", "nic")
    ]
    assert shown.chart == "matrix"
    assert [(m.measurements, m.rows_label, m.cols_label, m.marks) for m in shown.matrices] == [
        (("gpu_nic_link",), "gpu", "nic", "gpu_nearest_nic_link")
    ]


# --- the simulator --------------------------------------------------------------------------------


def sim_topo(tmp_path: Path, **faults: Any) -> str:
    from testbed.sim import NVIDIA_SMI_SOURCE, write_state

    state = tmp_path / "state"
    write_state(state, node="gpu01", **faults)
    env = {**os.environ, "KILN_SIM_STATE": str(state)}
    result = subprocess.run(
        [sys.executable, str(NVIDIA_SMI_SOURCE), "topo", "-m"], env=env, capture_output=True, text=True, check=True
    )
    return result.stdout


def test_it_passes_the_simulated_healthy_node(tmp_path: Path) -> None:
    measurements, verdict = judge(sim_topo(tmp_path))
    assert (verdict.status, verdict.reason) == (PASS, "8 GPUs, 9 NICs: each GPU's nearest NIC is PIX, within PXB")
    assert [by(measurements, "gpu_nearest_nic_link", g).labels["nic"] for g in range(8)] == [
        f"mlx5_{g}" for g in range(8)
    ]
    assert by(measurements, "gpu_nic_link", 0, "mlx5_8").text == "NODE"  # the front-end NIC
    assert by(measurements, "gpu_nic_link", 0, "mlx5_4").text == "SYS"
    assert by(measurements, "gpu_nic_link", 0, "mlx5_1").text == "NODE"


def test_it_fails_the_simulated_far_nic_naming_the_gpu_and_its_nearest_nics(tmp_path: Path) -> None:
    measurements, verdict = judge(sim_topo(tmp_path, topo_nic_far_gpu=3))
    assert verdict.status == FAIL
    assert verdict.reason == (
        "GPU3's nearest NICs mlx5_0, mlx5_1, mlx5_2 and 1 more are NODE "
        "(across PCIe host bridges within one NUMA node); allowed PIX or PXB"
    )
    assert by(measurements, "gpu_nic_link", 3, "mlx5_3").text == "SYS"
    assert by(measurements, "gpu_nearest_nic_link", 3).labels["nic"] == "mlx5_0,mlx5_1,mlx5_2,mlx5_8"
    assert by(measurements, "gpu_nic_link", 4, "mlx5_3").text == "NODE"  # now on GPU4's socket, behind no switch


def test_the_simulated_matrix_follows_a_missing_gpu(tmp_path: Path) -> None:
    measurements, verdict = judge(sim_topo(tmp_path, missing_gpu=2))
    assert (verdict.status, verdict.reason) == (PASS, "7 GPUs, 9 NICs: each GPU's nearest NIC is PIX, within PXB")
    assert by(measurements, "gpu_nearest_nic_link", 2).labels["nic"] == "mlx5_3"  # slot 3 is GPU2 now


def test_the_simulated_garbage_fault_is_an_error(tmp_path: Path) -> None:
    _, verdict = judge(sim_topo(tmp_path, garbage=1))
    assert verdict.status == ERROR


# --- cross-node agreement -------------------------------------------------------------------------


def fleet(tmp_path: Path, n: int = 8, **odd: dict[str, Any]) -> dict[str, list[Measurement]]:
    healthy = judge(sim_topo(tmp_path))[0]
    per_node = {f"gpu{i:02d}": healthy for i in range(1, n + 1)}
    for host, faults in odd.items():
        per_node[host] = judge(sim_topo(tmp_path, **faults))[0]
    return per_node


def test_consensus_flags_the_node_wired_unlike_the_fleet(tmp_path: Path) -> None:
    per_node = fleet(tmp_path, gpu05={"topo_nic_far_gpu": 6})
    assert GpuNicTopology.consensus(per_node) == {
        "gpu05": "GPU6 nearest NIC mlx5_4,mlx5_5,mlx5_7 NODE differs from 7 of 8 nodes (mlx5_6 PIX)"
    }


def test_consensus_flags_a_different_nic_count_and_numa_node() -> None:
    def node(nics: int, numa: float) -> list[Measurement]:
        return [
            Measurement("nic_count", float(nics)),
            Measurement("gpu_numa_affinity", numa, gpu=0),
            Measurement("gpu_nearest_nic_link", 2.0, gpu=0, text="PIX", labels={"nic": "mlx5_0"}),
        ]

    per_node = {"a": node(9, 0), "b": node(9, 0), "c": node(8, 1)}
    assert GpuNicTopology.consensus(per_node) == {
        "c": "GPU0 NUMA node 1 differs from 2 of 3 nodes (0); NIC count 8 differs from 2 of 3 nodes (9)"
    }


def test_consensus_flags_nothing_without_a_strict_majority_or_when_all_agree(tmp_path: Path) -> None:
    assert GpuNicTopology.consensus(fleet(tmp_path, 4)) == {}
    split = fleet(tmp_path, 2, gpu02={"topo_nic_far_gpu": 1})
    assert GpuNicTopology.consensus(split) == {}


def test_consensus_reads_only_the_names_it_declares(tmp_path: Path) -> None:
    per_node = fleet(tmp_path, 5, gpu02={"topo_nic_far_gpu": 0}, gpu04={"missing_gpu": 7})
    names = GpuNicTopology.consensus_names
    assert names is not None
    kept = {host: [m for m in ms if m.name in names] for host, ms in per_node.items()}
    full = GpuNicTopology.consensus(per_node)
    assert set(full) == {"gpu02", "gpu04"}
    assert GpuNicTopology.consensus(kept) == full
    assert sum(map(len, kept.values())) * 4 < sum(map(len, per_node.values()))  # the point of declaring them


def test_its_consensus_facts_leave_unknowns_out() -> None:
    ms = parsed(LEGACY)
    facts = topology_facts(ms)
    assert facts["NIC count"] == "1" and facts["GPU0 nearest NIC"] == "mlx4_0 SOC"
    assert not any("NUMA" in key for key in facts)  # no NUMA Affinity column: not voted on
