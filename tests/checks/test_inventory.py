"""gpu_inventory: count, models, driver, identities; and cross-node consensus."""

from __future__ import annotations

from typing import Any

import pytest

from checks import get_check, run_check
from checks.core.base import ERROR, FAIL, PASS, Measurement, NodeContext
from checks.core.profiles import resolve_thresholds
from checks.gpu.inventory import inventory_consensus, inventory_facts, parse_version
from tests.checks.probe_docs import DRIVER, H100, gpu_doc, output, probe_doc

NODE = NodeContext(hostname="gpu001")


def judge(doc: dict[str, Any], *, profile: str | None = "H100-SXM-8", node: NodeContext = NODE, **overrides: Any):
    thresholds = resolve_thresholds("gpu_inventory", profile, overrides)
    return run_check(get_check("gpu_inventory"), None, thresholds, output(doc), node)


def by(measurements: list[Measurement], name: str, gpu: int | None = None) -> Measurement:
    return next(m for m in measurements if m.name == name and m.gpu == gpu)


def test_it_passes_eight_h100s_on_the_h100_profile() -> None:
    measurements, verdict = judge(probe_doc())
    assert verdict.status == PASS
    assert verdict.reason == f"8 x {H100}, driver {DRIVER}"
    count = by(measurements, "gpu_count")
    assert (count.value, count.threshold, count.ok) == (8, "== 8", True)


def test_it_records_gpu_identities_per_gpu() -> None:
    measurements, _ = judge(probe_doc())
    assert by(measurements, "gpu_uuid", 3).text == "GPU-00000003-aaaa-bbbb-cccc-dddddddddddd"
    assert by(measurements, "gpu_serial", 3).text == "1654922001233"
    assert by(measurements, "gpu_pci_bus_id", 3).text == "00000000:1B:00.0"
    assert by(measurements, "gpu_model", 3).text == H100
    assert by(measurements, "driver_version").text == DRIVER
    assert by(measurements, "cuda_version").text == "12.4"
    assert by(measurements, "hostname").text == "gpu001"
    assert len([m for m in measurements if m.name == "gpu_uuid"]) == 8


def test_it_fails_on_a_missing_gpu() -> None:
    _, verdict = judge(probe_doc(7))
    assert (verdict.status, verdict.reason) == (FAIL, "expected 8 GPUs, found 7")


def test_it_fails_on_a_wrong_model_naming_the_gpu() -> None:
    doc = probe_doc()
    doc["gpus"][3]["name"] = "NVIDIA H100 PCIe"
    measurements, verdict = judge(doc)
    assert (verdict.status, verdict.reason) == (FAIL, f"GPU 3: model NVIDIA H100 PCIe, expected {H100}")
    assert by(measurements, "gpu_model", 3).ok is False
    assert by(measurements, "gpu_model", 2).ok is True


def test_it_fails_on_a_driver_that_is_not_the_pinned_one() -> None:
    _, verdict = judge(probe_doc(driver_version="535.104.05"), expected_driver="550.54.15")
    assert (verdict.status, verdict.reason) == (FAIL, "driver 535.104.05, expected 550.54.15")


def test_it_fails_on_a_driver_older_than_the_minimum() -> None:
    measurements, verdict = judge(probe_doc(driver_version="535.104.05"), min_driver="550.54.15")
    assert (verdict.status, verdict.reason) == (FAIL, "driver 535.104.05 is older than the minimum 550.54.15")
    assert by(measurements, "driver_version").threshold == ">= 550.54.15"


def test_it_compares_driver_versions_numerically() -> None:
    _, verdict = judge(probe_doc(driver_version="550.100.1"), min_driver="550.54.15")
    assert verdict.status == PASS
    assert parse_version("550.100.1") > parse_version("550.54.15")  # type: ignore[operator]


def test_it_errors_naming_a_missing_driver_version() -> None:
    doc = probe_doc(driver_version=None, errors=["nvml: nvmlSystemGetDriverVersion: Unknown Error"])
    _, verdict = judge(doc)
    assert verdict.status == ERROR
    assert verdict.reason == "driver version unavailable (nvml: nvmlSystemGetDriverVersion: Unknown Error)"


def test_it_errors_naming_a_missing_gpu_count() -> None:
    _, verdict = judge(probe_doc(gpu_count=None))
    assert (verdict.status, verdict.reason) == (ERROR, "GPU count unavailable (not reported by the probe)")


def test_it_errors_when_a_model_is_unreadable() -> None:
    doc = probe_doc()
    doc["gpus"][5]["name"] = None
    doc["gpus"][5]["errors"]["name"] = "Unknown Error"
    _, verdict = judge(doc)
    assert (verdict.status, verdict.reason) == (ERROR, "GPU 5: model unavailable (Unknown Error)")


def test_it_errors_when_a_uuid_is_unreadable_because_certificates_need_it() -> None:
    doc = probe_doc()
    doc["gpus"][2]["uuid"] = None
    _, verdict = judge(doc)
    assert (verdict.status, verdict.reason) == (ERROR, "GPU 2: UUID unavailable (not reported by the probe)")


def test_it_fails_a_gpu_that_does_not_answer() -> None:
    lost = {"index": 6, "errors": {"handle": "GPU is lost"}}
    doc = probe_doc(gpus=[gpu_doc(i) for i in range(6)] + [lost, gpu_doc(7)])
    _, verdict = judge(doc)
    assert (verdict.status, verdict.reason) == (FAIL, "GPU 6: not responding (GPU is lost)")


def test_it_fails_gpus_the_driver_counts_but_the_probe_could_not_list() -> None:
    doc = probe_doc(8, gpus=[gpu_doc(i) for i in range(6)])
    _, verdict = judge(doc)
    assert (verdict.status, verdict.reason) == (FAIL, "GPUs 6, 7: counted by the driver but not listed by the probe")


def test_it_uses_the_nodes_own_expected_gpu_count_first() -> None:
    _, verdict = judge(probe_doc(4), node=NodeContext(hostname="gpu001", expected_gpus=4))
    assert verdict.status == PASS


def test_it_requires_at_least_one_gpu_without_expectations() -> None:
    measurements, verdict = judge(probe_doc(0), profile=None)
    assert (verdict.status, verdict.reason) == (FAIL, "no GPUs found")
    _, verdict = judge(probe_doc(3), profile="generic")
    assert verdict.status == PASS


def test_it_accepts_any_listed_model_of_the_profile() -> None:
    doc = probe_doc(gpus=[gpu_doc(i, name="NVIDIA A100-SXM4-40GB") for i in range(8)])
    _, verdict = judge(doc, profile="A100-SXM-8")
    assert verdict.status == PASS


def test_it_reports_every_failure_at_once() -> None:
    doc = probe_doc(7, driver_version="535.104.05")
    doc["gpus"][1]["name"] = "NVIDIA H200"
    _, verdict = judge(doc, expected_driver="550.54.15")
    assert verdict.status == FAIL
    assert verdict.reason == (
        "expected 8 GPUs, found 7; GPU 1: model NVIDIA H200, expected NVIDIA H100 80GB HBM3; "
        "driver 535.104.05, expected 550.54.15"
    )


# --- consensus -----------------------------------------------------------------------------------


def cluster(n: int = 8, **odd: dict[str, str]) -> dict[str, dict[str, str]]:
    base = {"driver_version": "550.54.15", "gpu_model": H100, "gpu_count": "8", "cuda_version": "12.4"}
    facts = {f"gpu{i:03d}": dict(base) for i in range(1, n + 1)}
    for node, changes in odd.items():
        facts[node].update(changes)
    return facts


def test_it_flags_the_node_whose_driver_differs_from_the_majority() -> None:
    flagged = inventory_consensus(cluster(gpu003={"driver_version": "535.104.05"}))
    assert flagged == {"gpu003": "driver 535.104.05 differs from 7 of 8 nodes (550.54.15)"}


def test_it_flags_several_facts_on_one_node() -> None:
    flagged = inventory_consensus(cluster(gpu002={"gpu_count": "7", "cuda_version": "12.2"}))
    assert flagged == {
        "gpu002": "GPU count 7 differs from 7 of 8 nodes (8); CUDA 12.2 differs from 7 of 8 nodes (12.4)"
    }


def test_it_flags_nothing_when_all_agree() -> None:
    assert inventory_consensus(cluster()) == {}


def test_it_flags_nothing_without_a_strict_majority_but_notes_it() -> None:
    facts = cluster(4, gpu001={"driver_version": "535.104.05"}, gpu002={"driver_version": "535.104.05"})
    notes: list[str] = []
    assert inventory_consensus(facts, notes=notes) == {}
    assert notes == ["no majority for driver: 535.104.05 on 2, 550.54.15 on 2 nodes"]


def test_it_ignores_unknown_facts_in_consensus() -> None:
    facts = cluster(3, gpu001={"driver_version": ""})
    del facts["gpu002"]["cuda_version"]
    assert inventory_consensus(facts) == {}


def test_it_does_not_judge_a_single_node() -> None:
    assert inventory_consensus(cluster(1)) == {}


def test_it_extracts_consensus_facts_from_measurements() -> None:
    measurements, _ = judge(probe_doc())
    assert inventory_facts(measurements) == {
        "gpu_count": "8",
        "driver_version": DRIVER,
        "cuda_version": "12.4",
        "gpu_model": H100,
    }


def test_its_verdict_lists_every_finding_worst_first() -> None:
    doc = probe_doc(7)
    doc["gpus"][3]["name"] = "NVIDIA H100 PCIe"
    _, verdict = judge(doc)
    assert verdict.status == FAIL
    assert [(f.status, f.reason) for f in verdict.findings] == [
        (FAIL, "expected 8 GPUs, found 7"),
        (FAIL, f"GPU 3: model NVIDIA H100 PCIe, expected {H100}"),
    ]


@pytest.mark.parametrize("bad", ["550.x", "latest", "550..1"])
def test_it_rejects_a_malformed_min_driver(bad: str) -> None:
    from checks.core.base import ParamsError

    with pytest.raises(ParamsError, match="min_driver"):
        resolve_thresholds("gpu_inventory", None, {"min_driver": bad})


def test_consensus_reads_only_the_names_it_declares() -> None:
    """Closing a run reads only `consensus_names` for every node: the consensus of those rows must be
    the consensus of everything the nodes measured (a name left out would silently drop a fact)."""
    check = get_check("gpu_inventory")
    docs = {f"gpu{i:03d}": probe_doc(hostname=f"gpu{i:03d}") for i in range(1, 6)}
    docs["gpu002"] = probe_doc(hostname="gpu002", driver_version="535.104.05")
    docs["gpu004"] = probe_doc(7, hostname="gpu004")
    per_node = {host: judge(doc, node=NodeContext(hostname=host))[0] for host, doc in docs.items()}
    names = type(check).consensus_names
    assert names is not None
    kept = {host: [m for m in ms if m.name in names] for host, ms in per_node.items()}
    full = type(check).consensus(per_node)
    assert set(full) == {"gpu002", "gpu004"}
    assert type(check).consensus(kept) == full
    assert sum(map(len, kept.values())) * 4 < sum(map(len, per_node.values()))  # the point of declaring them


def test_every_check_with_a_consensus_declares_the_names_it_reads() -> None:
    """Without consensus_names, closing a run reads every measurement of that check for every node."""
    import inspect

    from checks.core.base import REGISTRY, Check

    overriding = [
        kind
        for kind, cls in REGISTRY.items()
        if inspect.getattr_static(cls, "consensus") is not inspect.getattr_static(Check, "consensus")
    ]
    assert set(overriding) >= {"gpu_inventory", "ib_ports", "sw_consistency"}
    assert [kind for kind in overriding if REGISTRY[kind].consensus_names is None] == []
