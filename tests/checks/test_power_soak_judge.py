"""The power-soak judgement (checks/soak/judge.py) on a synthetic 12-node, 3-rack, 6-PDU, one-loop,
one-UPS soak (tests/checks/soak_builder.py): the healthy soak passes, each planted fault fails exactly
its subject with the numbers, bad or missing data is `error` and never a pass, and sums over nodes
are taken per time point."""

from __future__ import annotations

import math
import random

import pytest

from checks.core.base import ERROR, FAIL, PASS, WARN, ParamsError
from checks.core.evidence import problems
from checks.soak.data import PROFILE_THRESHOLDS, SoakThresholds
from checks.soak.judge import SOAK_EVIDENCE, SoakResult, judge_soak, soak_charts
from checks.soak.physics import FLUIDS, feed_capacity_w, heat_removed_w, phase_deviations
from tests.checks.soak_builder import HOSTS, N, Soak, flat_soak
from tests.checks.test_threshold_sources import _uncommented_fields

H100 = SoakThresholds(**PROFILE_THRESHOLDS["H100-SXM-8"])


def judged(soak: Soak, thresholds: SoakThresholds = H100) -> SoakResult:
    return judge_soak(*soak.build(), thresholds)


def not_passing(result: SoakResult) -> dict[tuple[str, str], str]:
    return {(f.kind, f.name): f.status for f in result.findings if f.status != PASS}


def one(result: SoakResult, kind: str, name: str):
    found = result.of(kind, name)
    assert len(found) == 1, (kind, name, [(f.kind, f.name) for f in result.findings])
    return found[0]


def value(finding, name: str) -> float:
    (m,) = [m for m in finding.measurements if m.name == name]
    assert m.value is not None
    return m.value


# --- the healthy soak and the planted faults ----------------------------------------------------


def test_it_passes_the_healthy_soak_and_judges_every_subject() -> None:
    result = judged(Soak())
    assert not_passing(result) == {}
    assert result.verdict.status == PASS
    kinds = [f.kind for f in result.findings]
    counts = {k: kinds.count(k) for k in set(kinds)}
    assert counts == {"node": 12, "rack": 3, "pdu_phase": 18, "feed": 6, "ups": 1, "loop": 1}
    # Every subject compared something with a threshold; the measurements are possible evidence.
    assert all(any(m.ok for m in f.measurements) for f in result.findings)
    assert problems(result.measurements, SOAK_EVIDENCE) == []
    assert "all within spec: 12 nodes, 3 racks, 18 pdu phases" in result.verdict.reason


def test_the_healthy_fleet_spread_passes_the_non_gpu_rule() -> None:
    soak = Soak()
    platforms = [soak.platform_full(h) for h in HOSTS]
    gpus = [soak.gpu_full(h) for h in HOSTS]
    assert max(platforms) - min(platforms) > 500 and max(gpus) - min(gpus) > 250  # a real spread
    for host in HOSTS:
        node = one(judged(soak), "node", host)
        assert node.status == PASS and "non-GPU draw" in node.reason


def test_a_node_drawing_30_percent_over_its_gpus_fails_alone() -> None:
    result = judged(Soak(over_drawing="gpu05"))
    assert not_passing(result) == {("node", "gpu05"): FAIL}
    node = one(result, "node", "gpu05")
    assert node.reason.startswith("node gpu05: non-GPU draw 3.31 kW (node 8.92 kW - GPUs 5.61 kW")
    assert "above the fleet median (12 nodes) 1.56 kW + 10% of node power (0.89 kW)" in node.reason
    non_gpu = [m for m in node.measurements if m.name == "node_non_gpu_power_w"][0]
    assert non_gpu.ok is False and non_gpu.labels == {"node": "gpu05", "rack": "r2"}
    assert result.verdict.status == FAIL and "gpu05" in result.verdict.reason


def test_a_node_whose_gpus_alone_draw_30_percent_more_than_nvml_says_fails() -> None:
    soak = Soak()
    facility, samples = soak.build()
    samples["node_power_w"]["gpu07"] = [
        n + 0.3 * g for n, g in zip(samples["node_power_w"]["gpu07"], samples["gpu_power_w"]["gpu07"], strict=True)
    ]
    result = judge_soak(facility, samples, H100)
    assert not_passing(result) == {("node", "gpu07"): FAIL}


@pytest.mark.parametrize(("share", "status"), [(0.09, PASS), (0.11, FAIL)])
def test_the_non_gpu_tolerance_is_a_share_of_node_power(share: float, status: str) -> None:
    # Every node draws its GPUs + 1.5 kW; gpu03 draws `share` of its own power on top of that.
    facility, samples = Soak().build()
    for host in HOSTS:
        base = [g + 1500.0 for g in samples["gpu_power_w"][host]]
        extra = share / (1 - share) if host == "gpu03" else 0.0
        samples["node_power_w"][host] = [b * (1 + extra) for b in base]
    finding = one(judge_soak(facility, samples, H100), "node", "gpu03")
    assert finding.status == status, finding.reason
    assert "the fleet median (12 nodes) 1.50 kW + 10% of node power" in finding.reason


def test_a_mis_cabled_phase_fails_naming_the_pdu_and_phase() -> None:
    result = judged(Soak(mis_cabled="pdu-r2-a"))
    assert not_passing(result) == {("pdu_phase", "pdu-r2-a phase 2"): FAIL}
    phase = one(result, "pdu_phase", "pdu-r2-a phase 2")
    assert phase.reason.startswith("PDU pdu-r2-a phase 2: peak 54.1 A at t=99 s (measured by the PDU) above 80% of "
                                   "its 63 A breaker (50.4 A")  # fmt: skip
    assert "phase imbalance 160%" in phase.reason and "above 10%: phase 2 deviates most" in phase.reason
    assert "the facility model's feeds imply 21.3 A at steady, not 53.7 A" in phase.reason
    assert phase.labels == {"pdu": "pdu-r2-a", "rack": "r2", "feed": "A", "phase": "2"}
    peak = [m for m in phase.measurements if m.name == "phase_peak_current_a"][0]
    assert (peak.threshold, peak.ok) == ("<= 50.4 A", False)
    # The phases it robbed stay within their breakers and say the model disagrees.
    assert "cabling" in one(result, "pdu_phase", "pdu-r2-a phase 1").reason


def test_a_low_flow_loop_fails_with_its_capture() -> None:
    result = judged(Soak(low_flow=True))
    assert not_passing(result) == {("loop", "cdu1"): FAIL}
    loop = one(result, "loop", "cdu1")
    assert "flow 40 L/min" in loop.reason and "captures only 55%, below the 80%" in loop.reason
    assert value(loop, "loop_capture_ratio") == pytest.approx(0.55, abs=0.005)


def test_an_undersized_ups_fails_with_its_numbers() -> None:
    result = judged(Soak(ups_capacity_w=90_000.0))
    assert not_passing(result) == {("ups", "ups1"): FAIL}
    reason = one(result, "ups", "ups1").reason
    assert reason == ("UPS ups1: capacity 90.00 kW below 1.2 x the time-aligned peak 84.14 kW at t=99 s of racks "
                      "r1, r2, r3 = 100.97 kW")  # fmt: skip


def test_all_four_faults_fail_exactly_their_subjects() -> None:
    soak = Soak(over_drawing="gpu05", mis_cabled="pdu-r2-a", low_flow=True, ups_capacity_w=90_000.0)
    assert not_passing(judged(soak)) == {
        ("node", "gpu05"): FAIL,
        ("pdu_phase", "pdu-r2-a phase 2"): FAIL,
        ("loop", "cdu1"): FAIL,
        ("ups", "ups1"): FAIL,
    }


def test_a_b_feed_that_cannot_carry_the_rack_alone_fails() -> None:
    result = judged(Soak(b_breaker_a={"r3": 32.0}))
    assert not_passing(result) == {("feed", "r3 feed B"): FAIL}
    reason = one(result, "feed", "r3 feed B").reason
    assert "feed B alone (1 PDU, 80% of breakers, PF 0.95) carries 16.78 kW; the rack's peak is 27.72 kW" in reason


def test_the_node_maximum_follows_the_profile() -> None:
    a100 = SoakThresholds(**PROFILE_THRESHOLDS["A100-SXM-8"])
    result = judged(Soak(), a100)  # 7 kW nodes are over an A100 node's 6.5 kW
    assert {k for k, s in not_passing(result).items()} == {("node", h) for h in HOSTS}
    assert "above the node maximum 6.50 kW" in one(result, "node", "gpu01").reason
    generic = judged(Soak(), SoakThresholds())
    assert set(not_passing(generic).values()) == {WARN}
    assert "not judged against a node maximum" in one(generic, "node", "gpu01").reason


def test_group_verdict_attributes_nodes() -> None:
    group = judged(Soak(over_drawing="gpu05")).group_verdict()
    assert group.status == FAIL and set(group.node_verdicts) == set(HOSTS)
    assert group.node_verdicts["gpu05"].status == FAIL and group.node_verdicts["gpu01"].status == PASS


# --- missing, impossible and truncated data: error, never pass -----------------------------------


def _broken(host: str, series: list) -> SoakResult:
    facility, samples = Soak().build()
    samples["node_power_w"][host] = series
    return judge_soak(facility, samples, H100)


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda s: None, "no node power readings"),
        (lambda s: [*s[:50], math.nan, *s[51:]], "reading 50 is nan"),
        (lambda s: [*s[:50], math.inf, *s[51:]], "reading 50 is inf"),
        (lambda s: [*s[:50], -5.0, *s[51:]], "reading 50 is -5 W (impossible"),
        (lambda s: [*s[:50], 150_000.0, *s[51:]], "reading 50 is 150000 W (impossible"),
        (lambda s: [*s[:50], "7000", *s[51:]], "reading 50 is '7000' (not a finite number)"),
        (lambda s: [*s[:50], True, *s[51:]], "reading 50 is True"),
        (lambda s: s[:100], "100 readings for 120 time points (truncated or misaligned)"),
        (lambda s: [None if i % 5 == 0 else v for i, v in enumerate(s)], "readings at 96 of 120 time points"),
        (lambda s: [*s[:90], *[None] * 30], "readings at 90 of 120"),
        (lambda s: "7000", "not a series"),
    ],
)
def test_bad_node_power_is_an_error_naming_the_node(change, said: str) -> None:
    facility, samples = Soak().build()
    samples["node_power_w"]["gpu06"] = change(samples["node_power_w"]["gpu06"])
    result = judge_soak(facility, samples, H100)
    node = one(result, "node", "gpu06")
    assert node.status == ERROR and said in node.reason, node.reason
    assert FAIL not in not_passing(result).values() and result.verdict.status == ERROR
    # What summed gpu06 cannot be told either, and says why.
    for kind, name in (("rack", "r2"), ("ups", "ups1"), ("loop", "cdu1"), ("feed", "r2 feed A")):
        finding = one(result, kind, name)
        assert finding.status == ERROR and "gpu06" in finding.reason, finding.reason
    assert one(result, "rack", "r1").status == PASS
    assert problems(result.measurements, SOAK_EVIDENCE) == []


def test_an_incomplete_sum_already_over_its_limit_still_fails() -> None:
    facility, samples = Soak(ups_capacity_w=60_000.0).build()
    samples["node_power_w"]["gpu06"] = None
    ups = one(judge_soak(facility, samples, H100), "ups", "ups1")
    assert ups.status == FAIL and "= at least" in ups.reason


def test_missing_gpu_power_leaves_the_node_undecided() -> None:
    facility, samples = Soak().build()
    del samples["gpu_power_w"]["gpu02"]
    result = judge_soak(facility, samples, H100)
    assert not_passing(result) == {("node", "gpu02"): ERROR}
    assert "non-GPU draw unknown: no GPU power readings" in one(result, "node", "gpu02").reason


@pytest.mark.parametrize(
    ("t", "said"),
    [
        (None, "no time base"),
        ([], "no time base"),
        (list(range(10)), "only 10 time points"),
        ([0.0, *range(1, N - 1), float(N - 3)], "not increasing at index 119"),
        ([math.nan, *range(1, N)], "time point 0 is not a finite number"),
    ],
)
def test_an_unusable_time_base_is_one_error(t, said: str) -> None:
    facility, samples = Soak().build()
    samples["t"] = t
    result = judge_soak(facility, samples, H100)
    assert [(f.kind, f.status) for f in result.findings] == [("soak", ERROR)]
    assert said in result.verdict.reason and result.verdict.status == ERROR


def test_no_samples_at_all_is_an_error() -> None:
    assert judge_soak({}, None).verdict.status == ERROR
    assert judge_soak(Soak().facility(), {"t": list(range(N))}, H100).verdict.status == ERROR
    nothing = judge_soak({}, {"t": list(range(N))})
    assert nothing.verdict.status == ERROR and "no node in the facility model or the samples" in nothing.verdict.reason


@pytest.mark.parametrize("bad", [math.nan, -1.0, 5000.0, None])
def test_bad_measured_phase_current_is_an_error(bad) -> None:
    facility, samples = Soak().build()
    series = samples["phase_current_a"]["pdu-r2-b"]["3"]
    series[:] = [bad] * N if bad is None else [*series[:60], bad, *series[61:]]
    result = judge_soak(facility, samples, H100)
    assert not_passing(result) == {("pdu_phase", "pdu-r2-b phase 3"): ERROR}
    assert "measured phase 3 current" in one(result, "pdu_phase", "pdu-r2-b phase 3").reason


def test_a_pdu_endpoint_without_readings_is_an_error() -> None:
    facility, samples = Soak().build()
    del samples["phase_current_a"]["pdu-r2-a"]
    result = judge_soak(facility, samples, H100)
    assert set(not_passing(result)) == {("pdu_phase", f"pdu-r2-a phase {k}") for k in (1, 2, 3)}
    assert (
        "has an endpoint but the soak holds no phase current readings"
        in one(result, "pdu_phase", "pdu-r2-a phase 1").reason
    )


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda loops: loops.pop("cdu1"), "no supply/return/flow readings"),
        (lambda loops: loops["cdu1"].pop("flow_lpm"), "no flow readings"),
        (lambda loops: loops["cdu1"]["return_c"].__setitem__(100, math.nan), "return temperature: reading 100 is nan"),
        (lambda loops: loops["cdu1"]["flow_lpm"].__setitem__(100, -3.0), "flow: reading 100 is -3 L/min"),
        (lambda loops: loops["cdu1"].update(supply_c=loops["cdu1"]["return_c"], return_c=[30.0] * N), "sensors"),
        (lambda loops: loops["cdu1"].update(flow_lpm=[400.0] * N), "load outside the model, or misreading"),
    ],
)
def test_bad_loop_readings_are_an_error(change, said: str) -> None:
    facility, samples = Soak().build()
    change(samples["loops"])
    result = judge_soak(facility, samples, H100)
    assert not_passing(result) == {("loop", "cdu1"): ERROR}
    assert said in one(result, "loop", "cdu1").reason


@pytest.mark.parametrize(
    ("change", "subjects", "said"),
    [
        (lambda f: f["racks"][0].pop("power_budget_w"), {("rack", "r1")}, "no rack power budget configured"),
        (lambda f: f["racks"][0].update(cooling_budget_w=0), {("rack", "r1")}, "no rack cooling budget configured"),
        (lambda f: f["ups"][0].update(capacity_w=None), {("ups", "ups1")}, "no UPS capacity configured"),
        (lambda f: f["loops"][0].update(fluid="glycol"), {("loop", "cdu1")}, "unknown coolant 'glycol'"),
        (lambda f: f["pdus"][4].update(breaker_a=[63.0, 63.0]),
         {("pdu_phase", f"pdu-r3-a phase {k}") for k in (1, 2, 3)} | {("feed", "r3 feed A")}, "breaker"),
        (lambda f: f["pdus"][4].update(breaker_a=[63.0, None, 63.0]),
         {("pdu_phase", "pdu-r3-a phase 2"), ("feed", "r3 feed A")}, "breaker rating"),
        (lambda f: f["nodes"].update(gpu13="r9"), {("node", "gpu13")}, "no node power readings"),
        (lambda f: f["feeds"].pop(0), {("node", "gpu01")} | {("pdu_phase", f"pdu-r1-{x} phase {k}")
         for x in "ab" for k in (1, 2, 3)}, "feed shares add up to 0.833333, not 1"),
        (lambda f: f["feeds"][0].update(phase=4), {("node", "gpu01")} | {("pdu_phase", f"pdu-r1-{x} phase {k}")
         for x in "ab" for k in (1, 2, 3)}, "its feed on PDU pdu-r1-a is malformed (phase 4, share 0.1666"),
        (lambda f: f["feeds"][0].update(pdu="pdu-x"), {("node", "gpu01")} | {("pdu_phase", f"pdu-r1-{x} phase {k}")
         for x in "ab" for k in (1, 2, 3)}, "fed from PDU 'pdu-x', which is not in the facility model"),
        (lambda f: f["pdus"][0].update(phases=2), {("pdu_phase", "pdu-r1-a"), ("feed", "r1 feed A")},
         "phases must be 1 or 3, got 2"),
    ],
)  # fmt: skip
def test_a_configuration_gap_is_an_error_for_its_subject(change, subjects: set, said: str) -> None:
    facility, samples = Soak(measured_pdus=()).build()
    change(facility)
    result = judge_soak(facility, samples, H100)
    assert not_passing(result) == dict.fromkeys(subjects, ERROR)
    assert any(said in f.reason for f in result.findings if f.status == ERROR), not_passing(result)


def test_a_node_outside_the_facility_model_is_an_error() -> None:
    facility, samples = Soak().build()
    del facility["nodes"]["gpu12"]
    result = judge_soak(facility, samples, H100)
    assert "not placed in any rack" in one(result, "node", "gpu12").reason
    assert one(result, "node", "gpu12").status == ERROR


# --- time alignment -------------------------------------------------------------------------------


def _pulse(n: int, start: int, end: int, low: float, high: float) -> list[float]:
    return [high if start <= i < end else low for i in range(n)]


def test_racks_peaking_at_different_times_are_summed_per_time_point() -> None:
    power = {f"a{i}": _pulse(60, 10, 20, 2000.0, 9000.0) for i in range(2)}
    power |= {f"b{i}": _pulse(60, 40, 50, 2000.0, 9000.0) for i in range(2)}
    racks = {h: h[0] for h in power}
    # The aligned peak is 9+9+2+2 = 22 kW; the sum of rack peaks would be 36 kW.
    facility, samples = flat_soak(power, racks, ups_w=1.2 * 22_000 + 1)
    result = judge_soak(facility, samples, H100)
    ups = one(result, "ups", "ups1")
    assert ups.status == PASS and value(ups, "ups_peak_load_w") == 22_000.0
    assert [value(one(result, "rack", r), "rack_peak_power_w") for r in "ab"] == [18_000.0, 18_000.0]
    facility["ups"][0]["capacity_w"] = 1.2 * 22_000 - 1
    assert one(judge_soak(facility, samples, H100), "ups", "ups1").status == FAIL


def test_property_a_rack_peak_is_the_peak_of_the_aligned_sum() -> None:
    for seed in range(25):
        rng = random.Random(seed)
        n, hosts = rng.randint(40, 90), [f"n{i}" for i in range(rng.randint(2, 6))]
        power = {h: [rng.uniform(500, 9000) for _ in range(n)] for h in hosts}
        facility, samples = flat_soak(power, dict.fromkeys(hosts, "r"), ups_w=1e9)
        rack = one(judge_soak(facility, samples, SoakThresholds()), "rack", "r")
        peak = value(rack, "rack_peak_power_w")
        assert peak == pytest.approx(max(sum(power[h][i] for h in hosts) for i in range(n)))
        assert max(max(s) for s in power.values()) <= peak <= sum(max(s) for s in power.values())
        charts = soak_charts(facility, samples)
        assert not isinstance(charts, str) and charts.rack_peaks_w["r"] == pytest.approx(peak)


def test_charts_hold_the_cluster_series_and_rack_peaks() -> None:
    facility, samples = Soak().build()
    samples["node_power_w"]["gpu04"] = None
    charts = soak_charts(facility, samples, H100)
    assert not isinstance(charts, str)
    assert len(charts.cluster.y) == N and charts.cluster.x[0] == 0.0
    expected = sum(samples["node_power_w"][h][99] for h in HOSTS if h != "gpu04")
    assert charts.cluster.y[99] == pytest.approx(expected)
    assert set(charts.racks) == {"r1", "r2", "r3"} and charts.rack_peak_t["r2"] == 99.0
    assert charts.left_out == {"gpu04": "no node power readings"}
    assert soak_charts(facility, {"t": []}) == "no time base (samples['t'] is missing or empty)"


# --- physics and thresholds -----------------------------------------------------------------------


def test_heat_capacity_and_imbalance_arithmetic() -> None:
    # 110 L/min of water warming by 10 K carries 1.833 L/s x 0.9957 kg/L x 4180 J/(kg K) x 10 K.
    assert heat_removed_w(110.0, 30.0, 40.0, FLUIDS["water"]) == pytest.approx(76_304, rel=1e-4)
    assert heat_removed_w(110.0, 30.0, 40.0, FLUIDS["pg25"]) < heat_removed_w(110.0, 30.0, 40.0, FLUIDS["water"])
    assert feed_capacity_w([(230.0, [63.0] * 3)], 0.8, 0.95) == pytest.approx(33_037.2)
    assert phase_deviations({"1": 10.0, "2": 20.0, "3": 30.0}) == {"1": -0.5, "2": 0.0, "3": 0.5}
    assert phase_deviations({"1": 0.0, "2": 0.0}) is None


def test_every_default_threshold_names_its_source() -> None:
    assert _uncommented_fields(SoakThresholds) == []
    assert PROFILE_THRESHOLDS["H100-SXM-8"]["node_max_w"] == 10_200.0
    assert PROFILE_THRESHOLDS["A100-SXM-8"]["node_max_w"] == 6_500.0


@pytest.mark.parametrize(
    "bad",
    [{"power_factor": 0}, {"breaker_continuous_frac": 1.2}, {"ups_margin": 0.9}, {"node_max_w": -1.0},
     {"min_samples": 1}, {"min_coverage": 1.5}, {"dlc_capture_min": 0.0}],
)  # fmt: skip
def test_it_refuses_impossible_thresholds(bad: dict) -> None:
    with pytest.raises(ParamsError):
        SoakThresholds(**bad)
