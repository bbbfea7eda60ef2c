"""checks.core.sampling on the probe's columnar sampling document (schema 2: arrays per GPU), and the
same reading of the older one-object-per-sample form (schema 1): same columns, same evidence rules."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from checks import get_check
from checks.burnin.telemetry import telemetry_measurements
from checks.core.base import Command, CommandOutput, EvidenceError
from checks.core.sampling import SAMPLING_LABEL, SAMPLING_SCHEMA, load_sampling, parse_sampling

FIELDS = ("temp_gpu", "temp_memory", "power_w", "sm_clock_mhz", "clock_event_reasons",
          "ecc_volatile_uncorrected", "ecc_volatile_corrected")  # fmt: skip


def columns(t: list[Any], gpus: dict[int, dict[str, list[Any]]], **extra: Any) -> dict[str, Any]:
    """A schema 2 document; fields a GPU leaves out get healthy constant readings."""
    base = {"temp_gpu": 60, "temp_memory": 66, "power_w": 650.125, "sm_clock_mhz": 1980,
            "clock_event_reasons": 4, "ecc_volatile_uncorrected": 0, "ecc_volatile_corrected": 0}  # fmt: skip
    entries = [{"index": i, **{f: [base[f]] * len(t) for f in FIELDS}, **given} for i, given in gpus.items()]
    return {"schema": SAMPLING_SCHEMA, "mode": "sample", "interval_s": 1.0, "before": None, "after": None,
            "samples": {"t": t, "gpus": entries}, "child": None, "errors": [], **extra}  # fmt: skip


def rows(doc: dict[str, Any]) -> dict[str, Any]:
    """The same document as an older probe printed it (schema 1: one object per sample)."""
    t, entries = doc["samples"]["t"], doc["samples"]["gpus"]
    samples = [{"t": tk, "gpus": [{"index": g["index"], **{f: g[f][k] for f in FIELDS}} for g in entries]}
               for k, tk in enumerate(t)]  # fmt: skip
    return {**doc, "schema": 1, "samples": samples}


def parsed(doc: dict[str, Any]):
    return parse_sampling(json.dumps(doc, separators=(",", ":")))


def test_both_layouts_give_the_same_series_stats_and_events() -> None:
    doc = columns(
        [0, 1.006, 2.012, 3.019, 4.025],
        {
            0: {"temp_gpu": [35, 50, None, 70, 71], "clock_event_reasons": [4, 0x40, 0x44, 0, 0x20]},
            3: {"power_w": [90.5, 680.25, 690.125, None, 0.0]},
        },
    )
    new, old = parsed(doc), parsed(rows(doc))
    assert (new.schema, old.schema) == (2, 1)
    assert new.sample_count == old.sample_count == 5
    assert new.gpu_indices() == old.gpu_indices() == [0, 3]
    assert [vars(s) for s in new.series()] == [vars(s) for s in old.series()]
    temps = next(s for s in new.series() if (s.name, s.gpu) == ("temp_gpu", 0))
    assert (temps.x, temps.y) == ([0.0, 1.006, 2.012, 3.019, 4.025], [35.0, 50.0, None, 70.0, 71.0])
    assert new.stats(0, "temp_gpu") == old.stats(0, "temp_gpu")
    assert (new.stats(0, "temp_gpu").count, new.stats(0, "temp_gpu").total) == (4, 5)
    assert new.stats(3, "power_w", since_t=2.0) == old.stats(3, "power_w", since_t=2.0)
    assert new.throttle_events() == old.throttle_events()
    assert [e.describe() for e in new.throttle_events()] == [
        "hw_thermal_slowdown t=1.006-2.012s (2 samples)", "sw_thermal_slowdown at t=4.025s (1 sample)",
    ]  # fmt: skip
    assert [vars(m) for m in telemetry_measurements(new)] == [vars(m) for m in telemetry_measurements(old)]


def test_it_reads_an_empty_columnar_document() -> None:
    doc = parsed(columns([], {}, errors=["sample: nvmlInit failed: NVMLError_LibraryNotFound"]))
    assert (doc.sample_count, doc.gpu_indices(), doc.series(), doc.span_s()) == (0, [], [], 0.0)
    assert doc.errors == ["sample: nvmlInit failed: NVMLError_LibraryNotFound"]


def test_a_missing_field_is_unread_in_every_sample_never_zero() -> None:
    doc = columns([0, 1], {0: {}})
    del doc["samples"]["gpus"][0]["clock_event_reasons"]
    read = parsed(doc)
    assert read.values(0, "clock_event_reasons") == [(0.0, None), (1.0, None)]
    assert read.stats(0, "clock_event_reasons").count == 0


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["samples"]["gpus"][0]["temp_gpu"].pop(), r"GPU 0: temp_gpu has 2 readings for 3 sample times"),
        (lambda d: d["samples"]["t"].pop(), r"GPU 0: temp_gpu has 3 readings for 2 sample times"),
        (lambda d: d["samples"]["gpus"][0].update(power_w=5), r"GPU 0: power_w is int, expected an array"),
        (lambda d: d["samples"]["t"].__setitem__(1, "1"), r"sample #1 has no numeric 't'"),
        (lambda d: d["samples"]["t"].__setitem__(2, 0.5), r"sample #2 is out of time order \(t=0.5 after 1\)"),
        (lambda d: d["samples"]["gpus"].append(d["samples"]["gpus"][0]), r"GPU 0 is listed twice"),
        (lambda d: d["samples"]["gpus"][0].update(index=True), r"GPU entry #0 has no valid 'index'"),
        (lambda d: d["samples"].pop("gpus"), r"no 'gpus' list"),
        (lambda d: d.update(samples=[]), r"no 'samples' object \(schema 2"),
        (lambda d: d.update(schema=3), r"expected schema 1 or 2"),
        (lambda d: d.update(schema=True), r"not a sampling document"),
    ],
)
def test_it_refuses_cut_or_malformed_columns(edit: Any, message: str) -> None:
    doc = columns([0, 1, 2], {0: {}})
    edit(doc)
    with pytest.raises(EvidenceError, match=message):
        parsed(doc)


@pytest.mark.parametrize("layout", ["columns", "rows"])
@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("temp_gpu", float("nan"), "temp_gpu is nan, expected a number"),
        ("power_w", float("inf"), "power_w is inf, expected a number"),
        ("power_w", -1.5, "impossible evidence: sample #1 GPU 2 power_w = -1.5 (a power must be a number in 0..1e+06)"),
        ("temp_memory", 151, "sample #1 GPU 2 temp_memory = 151 (an NVML temperature must be a number in 0..150)"),
        ("ecc_volatile_corrected", -1, "sample #1 GPU 2 ecc_volatile_corrected = -1 (a count must be a non-negative"),
        ("ecc_volatile_corrected", 2.5, "sample #1 GPU 2 ecc_volatile_corrected = 2.5"),
        ("clock_event_reasons", True, "sample #1 GPU 2: clock_event_reasons is True, expected a number"),
        ("sm_clock_mhz", "1980", "sample #1 GPU 2: sm_clock_mhz is '1980', expected a number"),
    ],
)
def test_an_impossible_reading_in_either_layout_is_named(layout: str, name: str, value: Any, message: str) -> None:
    doc = columns([0, 1, 2], {0: {}, 2: {}})
    doc["samples"]["gpus"][1][name][1] = value
    text = json.dumps(doc if layout == "columns" else rows(doc))  # NaN and Infinity as Python writes them
    with pytest.raises(EvidenceError) as caught:
        parse_sampling(text)
    assert message in str(caught.value)


def test_integral_floats_are_counts_and_big_counters_fit() -> None:
    doc = columns([0, 1], {0: {"clock_event_reasons": [4.0, 0x40], "ecc_volatile_corrected": [2**63, 2**63]}})
    read = parsed(doc)
    assert [e.reason for e in read.throttle_events()] == ["hw_thermal_slowdown"]
    assert read.ecc_increase(0, "ecc_volatile_corrected") == 0


def test_the_rows_layout_is_read_in_time_order_and_names_the_documents_sample() -> None:
    doc = rows(columns([0, 1, 2], {0: {"temp_gpu": [40, 41, 42]}}))
    doc["samples"].reverse()
    read = parsed(doc)
    assert read.values(0, "temp_gpu") == [(0.0, 40), (1.0, 41), (2.0, 42)]
    doc["samples"][0]["gpus"][0]["temp_gpu"] = 200  # t=2, first in the document
    with pytest.raises(EvidenceError, match=r"sample #0 GPU 0 temp_gpu = 200"):
        parsed(doc)
    doc["samples"][0]["gpus"].append({"index": 0})
    with pytest.raises(EvidenceError, match=r"sample #0 lists GPU 0 twice"):
        parsed(doc)


def test_parse_and_series_read_the_output_once() -> None:
    doc = columns([0, 1], {0: {}})
    out = CommandOutput(Command(argv=("python3", "-"), timeout=1, label=SAMPLING_LABEL), json.dumps(doc), "", 0)
    first = load_sampling([out])
    assert load_sampling([out]) is first
    bad = CommandOutput(Command(argv=("python3", "-"), timeout=1, label=SAMPLING_LABEL), "{cut", "", 0)
    for _ in range(2):
        with pytest.raises(EvidenceError, match="not JSON"):
            load_sampling([bad])
    assert get_check("burn_in").series([bad]) == []


def test_an_output_copied_with_a_new_stdout_is_read_again() -> None:
    out = CommandOutput(
        Command(argv=("python3", "-"), timeout=1, label=SAMPLING_LABEL), json.dumps(columns([0], {0: {}})), "", 0
    )
    assert load_sampling([out]).gpu_indices() == [0]
    other = replace(out, stdout=json.dumps(columns([0], {5: {}})))
    assert load_sampling([other]).gpu_indices() == [5]
    with pytest.raises(EvidenceError, match="not JSON"):
        load_sampling([replace(out, stdout="{cut")])
