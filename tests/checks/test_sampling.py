"""checks.sampling: reading the probe's sampling document into series, events and window stats."""

from __future__ import annotations

import json
from typing import Any

import pytest

from checks.base import Command, CommandOutput, EvidenceError
from checks.sampling import SAMPLING_LABEL, load_sampling, parse_sampling


def sample(t: float, **per_gpu: dict[str, Any]) -> dict[str, Any]:
    gpus = []
    for key, values in per_gpu.items():
        base = {"temp_gpu": 40, "temp_memory": 45, "power_w": 100.0, "sm_clock_mhz": 1980,
                "clock_event_reasons": 0, "ecc_volatile_uncorrected": 0, "ecc_volatile_corrected": 0}  # fmt: skip
        gpus.append({"index": int(key[1:]), **base, **values})
    return {"t": t, "gpus": gpus}


def doc(samples: list[dict[str, Any]], **extra: Any) -> str:
    return json.dumps({"schema": 1, "mode": "sample", "interval_s": 1.0, "before": None, "after": None,
                       "samples": samples, "child": None, "errors": [], **extra})  # fmt: skip


def test_it_builds_per_gpu_series_keeping_nulls() -> None:
    parsed = parse_sampling(doc([sample(0, g0={"temp_gpu": 35}, g1={}), sample(1, g0={"temp_gpu": None}, g1={})]))
    series = {(s.name, s.gpu): s for s in parsed.series()}
    assert set(series) == {(n, g) for n in ("temp_gpu", "temp_memory", "power_w", "sm_clock_mhz") for g in (0, 1)}
    assert (series["temp_gpu", 0].x, series["temp_gpu", 0].y, series["temp_gpu", 0].unit) == ([0, 1], [35.0, None], "C")


def test_it_finds_throttle_runs_and_ignores_power_cap() -> None:
    masks = [0, 0x40, 0x40 | 0x4, 0, 0x4, 0x20]
    parsed = parse_sampling(doc([sample(t, g2={"clock_event_reasons": m}) for t, m in enumerate(masks)]))
    events = [(e.gpu, e.reason, e.start_t, e.end_t, e.samples) for e in parsed.throttle_events()]
    assert events == [(2, "hw_thermal_slowdown", 1, 2, 2), (2, "sw_thermal_slowdown", 5, 5, 1)]
    assert parsed.throttle_events()[0].describe() == "hw_thermal_slowdown t=1-2s (2 samples)"


def test_it_computes_steady_state_after_the_warmup() -> None:
    temps = [35, 50, 60, 70, 71, 72, 70, 71, 72]
    parsed = parse_sampling(doc([sample(t, g0={"temp_gpu": v}) for t, v in enumerate(temps)]))
    assert parsed.steady_start() == 2.0  # a quarter of the 8 s span
    stats = parsed.steady_stats(0, "temp_gpu")
    assert (stats.min, stats.max, stats.count) == (60, 72, 7)
    assert parsed.steady_stats(0, "temp_gpu", warmup_s=3).min == 70


def test_it_counts_new_ecc_errors_from_before_samples_and_after() -> None:
    before = {"gpus": [{"index": 0, "ecc_errors": {"volatile": {"uncorrected": 1, "corrected": 0}}}]}
    after = {"gpus": [{"index": 0, "ecc_errors": {"volatile": {"uncorrected": 3, "corrected": None}}}]}
    samples = [sample(0, g0={"ecc_volatile_uncorrected": 1}), sample(1, g0={"ecc_volatile_uncorrected": 2})]
    parsed = parse_sampling(doc(samples, before=before, after=after))
    assert parsed.ecc_increase(0, "ecc_volatile_uncorrected") == 2
    assert parsed.ecc_increase(0, "ecc_volatile_corrected") == 0
    none = parse_sampling(doc([sample(0, g0={"ecc_volatile_corrected": None})]))
    assert none.ecc_increase(0, "ecc_volatile_corrected") is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "printed nothing"),
        ("{oops", "not JSON"),
        (json.dumps({"schema": 1, "gpus": []}), "not a sampling document"),
        (doc([{"t": "x", "gpus": []}]), "no numeric 't'"),
        (doc([{"t": 0, "gpus": [{"index": 0, "temp_gpu": "hot"}]}]), "temp_gpu is 'hot'"),
    ],
)
def test_it_rejects_untrustworthy_documents(text: str, message: str) -> None:
    with pytest.raises(EvidenceError, match=message):
        parse_sampling(text)


def test_it_picks_the_labelled_output() -> None:
    out = CommandOutput(Command(argv=("python3", "-"), timeout=1, label=SAMPLING_LABEL), doc([sample(0, g0={})]), "", 0)
    other = CommandOutput(Command(argv=("true",), timeout=1), "", "", 0)
    assert load_sampling([other, out]).gpu_indices() == [0]
