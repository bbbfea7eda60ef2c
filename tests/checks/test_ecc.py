"""ecc_health: ECC mode, counters and memory repair state; never a pass without evidence."""

from __future__ import annotations

from typing import Any

from checks import get_check, run_check
from checks.core.base import ERROR, FAIL, PASS, WARN, Measurement, NodeContext
from checks.core.profiles import resolve_thresholds
from tests.checks.probe_docs import gpu_doc, output, probe_doc

NODE = NodeContext(hostname="gpu001")


def judge(doc: dict[str, Any], **overrides: Any):
    thresholds = resolve_thresholds("ecc_health", "H100-SXM-8", overrides)
    return run_check(get_check("ecc_health"), None, thresholds, output(doc), NODE)


def with_gpu(index: int, n: int = 8, **changes: Any) -> dict[str, Any]:
    return probe_doc(n, gpus=[gpu_doc(i, **changes) if i == index else gpu_doc(i) for i in range(n)])


def by(measurements: list[Measurement], name: str, gpu: int | None = None) -> Measurement:
    return next(m for m in measurements if m.name == name and m.gpu == gpu)


def pre_ampere(index: int, **pages: Any) -> dict[str, Any]:
    retired = {"single_bit": 0, "double_bit": 0, "pending": False, **pages}
    return gpu_doc(index, remapped_rows=None, retired_pages=retired, errors={"remapped_rows": "Not Supported"})


def test_it_passes_healthy_gpus() -> None:
    measurements, verdict = judge(probe_doc())
    assert verdict.status == PASS
    assert verdict.reason == "8 GPUs: ECC on, no uncorrectable errors, no pending or failed repairs"
    m = by(measurements, "ecc_volatile_uncorrected", 5)
    assert (m.value, m.threshold, m.ok) == (0, "<= 0", True)
    assert by(measurements, "remap_pending", 5).ok is True
    assert by(measurements, "ecc_enabled", 5).threshold == "== 1"


def test_it_records_every_counter_per_gpu() -> None:
    measurements, _ = judge(probe_doc(2))
    names = {m.name for m in measurements if m.gpu == 1}
    assert names >= {
        "ecc_enabled",
        "ecc_volatile_uncorrected",
        "ecc_volatile_corrected",
        "ecc_aggregate_uncorrected",
        "ecc_aggregate_corrected",
        "remapped_rows_correctable",
        "remapped_rows_uncorrectable",
        "remap_pending",
        "remap_failure",
    }
    assert not any(m.name.startswith("retired_pages") for m in measurements)


def test_it_fails_on_uncorrectable_volatile_errors_naming_the_gpu() -> None:
    measurements, verdict = judge(with_gpu(3, ecc_errors__volatile__uncorrected=2))
    assert verdict.status == FAIL
    assert verdict.reason == "GPU 3: 2 uncorrectable volatile ECC errors (max 0)"
    assert by(measurements, "ecc_volatile_uncorrected", 3).ok is False


def test_it_fails_on_a_pending_row_remap() -> None:
    _, verdict = judge(with_gpu(1, remapped_rows__pending=True))
    assert (verdict.status, verdict.reason) == (FAIL, "GPU 1: row remap pending (reset the GPU)")


def test_it_allows_a_pending_remap_when_told() -> None:
    _, verdict = judge(with_gpu(1, remapped_rows__pending=True), allow_remap_pending=True)
    assert verdict.status == PASS


def test_it_fails_on_a_row_remap_failure() -> None:
    _, verdict = judge(with_gpu(4, remapped_rows__failure=True))
    assert (verdict.status, verdict.reason) == (FAIL, "GPU 4: row remapping failed (RMA candidate)")


def test_it_fails_when_ecc_is_disabled() -> None:
    doc = with_gpu(
        2,
        ecc_mode={"current": False, "pending": False},
        ecc_errors={
            "volatile": {"corrected": None, "uncorrected": None},
            "aggregate": {"corrected": None, "uncorrected": None},
        },
    )
    _, verdict = judge(doc)
    assert (verdict.status, verdict.reason) == (FAIL, "GPU 2: ECC mode disabled")


def test_it_says_when_ecc_comes_back_after_a_reset() -> None:
    _, verdict = judge(with_gpu(2, ecc_mode={"current": False, "pending": True}))
    assert verdict.reason == "GPU 2: ECC mode disabled (enabled after the next reset)"


def test_it_warns_when_ecc_will_be_disabled_at_the_next_reset() -> None:
    _, verdict = judge(with_gpu(0, ecc_mode={"current": True, "pending": False}))
    assert (verdict.status, verdict.reason) == (
        WARN,
        "GPU 0: ECC will be disabled at the next reset (pending mode off)",
    )


def test_it_errors_on_a_null_required_counter_with_the_probes_reason() -> None:
    doc = with_gpu(4, ecc_errors__volatile__uncorrected=None)
    doc["gpus"][4]["errors"]["ecc_errors.volatile.uncorrected"] = "Not Supported"
    measurements, verdict = judge(doc)
    assert verdict.status == ERROR
    assert verdict.reason == "GPU 4: volatile uncorrected ECC count unavailable (Not Supported)"
    assert by(measurements, "ecc_volatile_uncorrected", 4).labels == {"missing": "Not Supported"}


def test_it_errors_on_all_null_counters() -> None:
    nulls = {
        "volatile": {"corrected": None, "uncorrected": None},
        "aggregate": {"corrected": None, "uncorrected": None},
    }
    doc = probe_doc(2, gpus=[gpu_doc(i, ecc_errors=nulls, remapped_rows=None) for i in range(2)])
    _, verdict = judge(doc)
    assert verdict.status == ERROR
    assert "GPU 0: volatile uncorrected ECC count unavailable" in verdict.reason
    assert "GPU 1: row remapping state unavailable" in verdict.reason


def test_it_errors_on_null_ecc_mode() -> None:
    doc = with_gpu(6, ecc_mode=None)
    doc["gpus"][6]["errors"]["ecc_mode"] = "Unknown Error"
    _, verdict = judge(doc)
    assert (verdict.status, verdict.reason) == (ERROR, "GPU 6: ECC mode unavailable (Unknown Error)")


def test_it_errors_on_zero_gpus() -> None:
    _, verdict = judge(probe_doc(0))
    assert (verdict.status, verdict.reason) == (ERROR, "probe listed no GPUs")


def test_it_errors_on_zero_gpus_quoting_probe_errors() -> None:
    _, verdict = judge(probe_doc(0, gpu_count=None, errors=["nvml: Driver Not Loaded"]))
    assert verdict.status == ERROR
    assert "probe listed no GPUs (nvml: Driver Not Loaded)" in verdict.reason


def test_it_errors_when_gpus_counted_by_the_driver_were_not_listed() -> None:
    _, verdict = judge(probe_doc(8, gpus=[gpu_doc(i) for i in range(7)]))
    assert (verdict.status, verdict.reason) == (ERROR, "GPU 7: no ECC data (driver reports 8 GPUs, probe listed 7)")


def test_it_errors_on_a_gpu_that_does_not_answer() -> None:
    doc = probe_doc(2, gpus=[gpu_doc(0), {"index": 1, "errors": {"handle": "GPU is lost"}}])
    _, verdict = judge(doc)
    assert (verdict.status, verdict.reason) == (ERROR, "GPU 1: no ECC data (GPU not responding: GPU is lost)")


def test_it_errors_when_the_gpu_count_is_unknown() -> None:
    _, verdict = judge(probe_doc(gpu_count=None))
    assert verdict.status == ERROR
    assert verdict.reason.startswith("GPU count unavailable")


def test_it_errors_when_remapping_is_unavailable_even_with_a_reason() -> None:
    doc = with_gpu(0, remapped_rows=None)
    doc["gpus"][0]["errors"]["remapped_rows"] = "Not Supported"
    _, verdict = judge(doc)
    assert verdict.status == ERROR
    assert verdict.reason == "GPU 0: row remapping state unavailable (Not Supported) and no page retirement data"


def test_it_waives_unavailable_remapping_when_told() -> None:
    _, verdict = judge(with_gpu(0, remapped_rows=None), allow_remap_unavailable=True)
    assert verdict.status == PASS


def test_it_judges_pre_ampere_gpus_by_retired_pages() -> None:
    measurements, verdict = judge(probe_doc(2, gpus=[pre_ampere(0), pre_ampere(1, single_bit=3)]))
    assert verdict.status == PASS, verdict.reason
    assert by(measurements, "retired_pages_single_bit", 1).value == 3


def test_it_fails_on_pages_pending_retirement() -> None:
    _, verdict = judge(probe_doc(2, gpus=[pre_ampere(0), pre_ampere(1, pending=True)]))
    assert (verdict.status, verdict.reason) == (FAIL, "GPU 1: retired pages pending (reboot or reset the GPU)")


def test_it_fails_on_a_nearly_full_retirement_table() -> None:
    _, verdict = judge(probe_doc(1, gpus=[pre_ampere(0, single_bit=60, double_bit=5)]))
    assert (verdict.status, verdict.reason) == (FAIL, "GPU 0: 65 retired pages (max 61)")


def test_it_fails_on_double_bit_retired_pages_over_the_threshold() -> None:
    _, verdict = judge(probe_doc(1, gpus=[pre_ampere(0, double_bit=2)]), max_retired_pages_double_bit=1)
    assert (verdict.status, verdict.reason) == (FAIL, "GPU 0: 2 double-bit retired pages (max 1)")


def test_it_does_not_judge_lifetime_aggregate_errors_by_default() -> None:
    doc = with_gpu(5, ecc_errors__aggregate__uncorrected=4, ecc_errors__aggregate__corrected=900)
    _, verdict = judge(doc)
    assert verdict.status == PASS
    _, verdict = judge(doc, max_aggregate_uncorrected=0)
    assert (verdict.status, verdict.reason) == (FAIL, "GPU 5: 4 uncorrectable aggregate (lifetime) ECC errors (max 0)")


def test_it_judges_correctable_errors_only_when_a_limit_is_set() -> None:
    doc = with_gpu(7, ecc_errors__volatile__corrected=12)
    assert judge(doc)[1].status == PASS
    _, verdict = judge(doc, max_volatile_corrected=10)
    assert verdict.reason == "GPU 7: 12 correctable volatile ECC errors (max 10)"


def test_it_does_not_require_an_unjudged_counter() -> None:
    _, verdict = judge(with_gpu(7, ecc_errors__aggregate__uncorrected=None))
    assert verdict.status == PASS


def test_it_reports_every_bad_gpu() -> None:
    gpus = [gpu_doc(i) for i in range(8)]
    gpus[2]["ecc_errors"]["volatile"]["uncorrected"] = 1
    gpus[6]["remapped_rows"]["pending"] = True
    _, verdict = judge(probe_doc(gpus=gpus))
    assert (
        verdict.reason == "GPU 2: 1 uncorrectable volatile ECC errors (max 0); GPU 6: row remap pending (reset the GPU)"
    )
