"""checks.core.sampling: reading the probe's sampling document into series, events and window stats."""

from __future__ import annotations

import json
from typing import Any

import pytest

from checks.core.base import Command, CommandOutput, EvidenceError
from checks.core.sampling import SAMPLING_LABEL, load_sampling, parse_sampling


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


def columns_doc(node_power: Any, **extra: Any) -> str:
    """A schema 2 document of 3 samples on one GPU, with `node_power` as samples.node_power_w."""
    gpu = {"index": 0, "power_w": [100.0, 650.0, 660.0]}
    samples: dict[str, Any] = {"t": [0.0, 1.0, 2.0], "gpus": [gpu]}
    if node_power is not ...:
        samples["node_power_w"] = node_power
    info = {"source": "dcmi", "readings": 2, "errors": ["dcmi: ipmitool gave no answer in 15 s (killed)"]}
    return json.dumps({"schema": 2, "mode": "sample", "interval_s": 1.0, "before": None, "after": None,
                       "samples": samples, "child": None, "errors": [],
                       "node_power": info if node_power is not ... else None, **extra})  # fmt: skip


def test_it_reads_node_power_in_step_with_the_samples() -> None:
    parsed = parse_sampling(columns_doc([None, 6843, 6851.5], started_at=1764514800.25, start_at=1764514800.0,
                                        start_late_s=0.25))  # fmt: skip
    assert parsed.node_power() == [(0.0, None), (1.0, 6843.0), (2.0, 6851.5)]
    assert parsed.node_power_info is not None and parsed.node_power_info.source == "dcmi"
    assert parsed.node_power_info.errors == ["dcmi: ipmitool gave no answer in 15 s (killed)"]
    assert (parsed.started_at, parsed.start_at, parsed.start_late_s) == (1764514800.25, 1764514800.0, 0.25)
    node = [s for s in parsed.series() if s.name == "node_power"]
    assert [(s.unit, s.gpu, s.x, s.y) for s in node] == [("W", None, [0.0, 1.0, 2.0], [None, 6843.0, 6851.5])]
    assert parsed.gpu_power_sums() == [100.0, 650.0, 660.0]


def test_it_has_no_node_power_when_the_probe_did_not_sample_it() -> None:
    parsed = parse_sampling(columns_doc(...))
    assert (parsed.has_node_power, parsed.node_power(), parsed.node_power_info, parsed.started_at) == (
        False, [], None, None,
    )  # fmt: skip
    assert {s.name for s in parsed.series()} == {"temp_gpu", "temp_memory", "power_w", "sm_clock_mhz"}


@pytest.mark.parametrize(
    ("node_power", "extra", "message"),
    [
        ([6843.0, 6851.0], {}, "node_power_w has 2 readings for 3 sample times"),
        ("6843", {}, "node_power_w is str"),
        ([6843.0, float("nan"), 6851.0], {}, "sample #1: node_power_w is nan"),
        ([6843.0, float("inf"), 6851.0], {}, "sample #1: node_power_w is inf"),
        ([6843.0, -5, 6851.0], {}, r"impossible evidence: sample #1 node_power_w = -5 W"),
        ([6843.0, 0, 6851.0], {}, r"node_power_w = 0 W \(a node's input power must be a number in 1\.\.100000\)"),
        ([6843.0, 2e5, 6851.0], {}, "node_power_w = 200000.0 W"),
        ([6843.0, "6k", 6851.0], {}, "node_power_w is '6k', expected a number"),
        ([None, None, None], {"started_at": "yesterday"}, "'started_at' is 'yesterday'"),
        ([None, None, None], {"start_late_s": -1}, "'start_late_s' is -1"),
    ],
)
def test_it_refuses_untrustworthy_node_power(node_power: Any, extra: dict[str, Any], message: str) -> None:
    with pytest.raises(EvidenceError, match=message):
        parse_sampling(columns_doc(node_power, **extra))


def test_it_refuses_node_power_without_its_account() -> None:
    raw = json.loads(columns_doc([None, 6843.0, 6851.0]))
    raw["node_power"] = None
    with pytest.raises(EvidenceError, match="no 'node_power' object"):
        parse_sampling(json.dumps(raw))
    raw["node_power"] = {"source": "redfish", "errors": []}
    with pytest.raises(EvidenceError, match="source 'redfish'"):
        parse_sampling(json.dumps(raw))
