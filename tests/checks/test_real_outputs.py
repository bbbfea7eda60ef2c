"""Both checks on real `nvidia-smi -q -x` captures, through the probe's XML converter."""

from __future__ import annotations

import json

import pytest

from checks import get_check, run_check
from checks.core.base import ERROR, FAIL, PASS, NodeContext
from checks.core.profiles import resolve_thresholds
from tests.checks.probe_docs import A100_MIG, RTX_ADA, fixture, output


def probe_json(name: str) -> str:
    probe = pytest.importorskip("checks.probe.probe")
    return json.dumps(probe.parse_nvidia_smi_xml(fixture(name).read_text()))


def judge(kind: str, name: str, profile: str | None):
    thresholds = resolve_thresholds(kind, profile)
    return run_check(get_check(kind), None, thresholds, output(probe_json(name)), NodeContext(hostname="n"))


def test_it_fails_ecc_on_the_ada_card_with_ecc_disabled() -> None:
    measurements, verdict = judge("ecc_health", RTX_ADA, None)
    assert (verdict.status, verdict.reason) == (FAIL, "GPU 0: ECC mode disabled")
    enabled = next(m for m in measurements if m.name == "ecc_enabled")
    assert (enabled.value, enabled.ok) == (0, False)
    # v13 schema: the full remapped_rows block is read even with ECC off.
    assert next(m for m in measurements if m.name == "remap_pending").value == 0


def test_it_errors_ecc_on_the_a100_in_mig_mode() -> None:
    # remapped_rows is N/A with MIG on and only 1 of 4 attached GPUs is listed:
    # we cannot tell whether a remap is pending, so this is error, never pass.
    measurements, verdict = judge("ecc_health", A100_MIG, "A100-SXM-8")
    assert verdict.status == ERROR
    assert verdict.reason == (
        "GPUs 1, 2, 3: no ECC data (driver reports 4 GPUs, probe listed 1); "
        "GPU 0: row remapping state unavailable (N/A) and no page retirement data"
    )
    counter = next(m for m in measurements if m.name == "ecc_volatile_uncorrected")
    assert (counter.gpu, counter.value, counter.ok) == (0, 0, True)


def test_it_fails_inventory_on_model_and_count_for_the_a100_against_h100() -> None:
    measurements, verdict = judge("gpu_inventory", A100_MIG, "H100-SXM-8")
    assert verdict.status == FAIL
    assert "expected 8 GPUs, found 4" in verdict.reason
    assert "GPU 0: model NVIDIA A100-SXM4-80GB, expected NVIDIA H100 80GB HBM3" in verdict.reason
    uuid = next(m for m in measurements if m.name == "gpu_uuid")
    assert uuid.text == "GPU-513536b6-7d19-9063-b049-1e69664bb298"
    assert next(m for m in measurements if m.name == "gpu_serial").text == "1650522003820"
    assert next(m for m in measurements if m.name == "driver_version").text == "535.54.03"
    assert next(m for m in measurements if m.name == "cuda_version").text == "12.2"


def test_it_passes_inventory_on_the_ada_card_with_the_generic_profile() -> None:
    _, verdict = judge("gpu_inventory", RTX_ADA, "generic")
    assert (verdict.status, verdict.reason) == (PASS, "1 x NVIDIA RTX 4000 SFF Ada Generation, driver 595.84")
