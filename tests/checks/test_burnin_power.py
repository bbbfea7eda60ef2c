"""burn_in's node power (checks/burnin/power.py): the BMC's readings beside NVML, summed up and
judged against the profile's node maximum; asked for and missing is never a pass."""

from __future__ import annotations

import json
from typing import Any

import pytest

from checks import get_check, run_check
from checks.burnin.check import BurnInThresholds
from checks.core.base import ERROR, FAIL, PASS, Command, CommandOutput, NodeContext, ParamsError
from checks.core.profiles import resolve_thresholds
from checks.core.sampling import SAMPLING_LABEL
from tests.checks.test_burnin_evidence import A100, columnar, fixture, sampling_doc

GPU_SUM = 8 * 350.0  # sampling_doc's telemetry: 8 GPUs at 350 W
HEALTHY = [None, 4000.0, 4100.0, 4300.0, 4100.0]  # t = 0..4 s; steady window t >= 1 s: median 4,100 W


def doc(node_power: list[Any] | None, errors: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    """A sampling document of the real A100 gpu_burn run, with node power when `node_power` is a list."""
    out = columnar(sampling_doc(fixture(A100), 8))
    if node_power is not None:
        out["samples"]["node_power_w"] = node_power
        out["node_power"] = {"source": "dcmi", "readings": sum(v is not None for v in node_power),
                             "errors": errors or []}  # fmt: skip
    out.update(extra)
    return out


def judge(document: dict[str, Any], thresholds: dict[str, Any] | None = None):
    cmd = Command(argv=("python3", "-", "--sample", "1", "--node-power", "--", "gpu_burn"), timeout=300,
                  label=SAMPLING_LABEL)  # fmt: skip
    outputs = [CommandOutput(command=cmd, stdout=json.dumps(document), stderr="", exit_code=0)]
    limits = {**resolve_thresholds("burn_in", "A100-SXM-8"), **(thresholds or {})}
    measurements, verdict = run_check(get_check("burn_in"), None, limits, outputs, NodeContext(hostname="gpu001"))
    return {m.name: m for m in measurements if m.gpu is None}, verdict


def test_it_summarises_and_passes_node_power_under_the_profile_maximum() -> None:
    found, verdict = judge(doc(HEALTHY))
    assert verdict.status == PASS, verdict.reason
    assert verdict.reason.endswith(
        "; node power peak 4.30 kW, steady 4.10 kW (max 6.50 kW) (Xid: see the ECC/Xid check)"
    )
    values = {name: found[name].value for name in ("node_power_peak_w", "node_power_steady_w",
                                                   "gpu_power_steady_sum_w", "node_power_over_gpu_w",
                                                   "node_power_readings", "node_power_coverage")}  # fmt: skip
    assert values == {"node_power_peak_w": 4300.0, "node_power_steady_w": 4100.0, "gpu_power_steady_sum_w": GPU_SUM,
                      "node_power_over_gpu_w": 4100.0 - GPU_SUM, "node_power_readings": 4.0,
                      "node_power_coverage": 1.0}  # fmt: skip
    assert found["node_power_source"].text == "dcmi"
    assert (found["node_power_peak_w"].threshold, found["node_power_peak_w"].ok) == ("<= 6500", True)


def test_it_fails_a_node_above_its_maximum() -> None:
    found, verdict = judge(doc([None, 7000.0, 7100.0, 7200.0, 7100.0]))
    assert verdict.status == FAIL
    assert "node power peak 7,200 W > 6,500 W (the node's maximum)" in verdict.reason
    assert "node power steady 7,100 W > 6,500 W" in verdict.reason
    assert found["node_power_peak_w"].ok is False


def test_it_errors_when_node_power_was_asked_for_and_never_came() -> None:
    _, verdict = judge(doc([None] * 5, errors=["dcmi: ipmitool cannot run: [Errno 2] No such file or directory"]))
    assert (verdict.status, verdict.reason) == (
        ERROR,
        "node power: no BMC reading during the burn (dcmi: ipmitool cannot run: [Errno 2] No such file or directory)",
    )


def test_it_errors_when_too_few_readings_cover_the_steady_window() -> None:
    found, verdict = judge(doc([None, 4000.0, None, None, 4100.0], errors=["dcmi: ipmitool gave no answer in 15 s"]))
    assert verdict.status == ERROR
    assert verdict.reason == (
        "node power: readings in 50% of the steady window's samples (need 90%) (dcmi: ipmitool gave no answer in 15 s)"
    )
    assert (found["node_power_coverage"].value, found["node_power_coverage"].ok) == (0.5, False)


def test_it_errors_when_the_node_draws_less_than_its_gpus() -> None:
    _, verdict = judge(doc([None, 2000.0, 2000.0, 2000.0, 2000.0]))
    assert verdict.status == ERROR
    assert "node power 2,000 W is below its GPUs' own 2,800 W (NVML)" in verdict.reason


def test_it_judges_the_draw_beside_the_gpus_against_a_site_figure() -> None:
    _, verdict = judge(doc(HEALTHY), {"max_node_over_gpu_w": 1000.0})
    assert (verdict.status, verdict.reason) == (
        FAIL,
        "node draws 1,300 W beside its GPUs' 2,800 W (site maximum 1,000 W)",
    )
    _, verdict = judge(doc(HEALTHY), {"max_node_over_gpu_w": 1500.0})
    assert verdict.status == PASS


def test_it_records_without_judging_when_the_profile_has_no_maximum() -> None:
    found, verdict = judge(doc(HEALTHY), {"node_max_w": None})
    assert verdict.status == PASS and "; node power peak 4.30 kW, steady 4.10 kW (Xid" in verdict.reason
    assert found["node_power_peak_w"].ok is None


def test_it_leaves_node_power_alone_when_it_was_not_asked_for() -> None:
    found, verdict = judge(doc(None))
    assert verdict.status == PASS and "node power" not in verdict.reason
    assert not [name for name in found if name.startswith("node_power")]


@pytest.mark.parametrize("bad", [float("nan"), -1.0, 0.0, 1e6, "6 kW"])
def test_it_errors_on_an_impossible_node_power_reading(bad: Any) -> None:
    _, verdict = judge(doc([None, 4000.0, bad, 4300.0, 4100.0]))
    assert verdict.status == ERROR and "node_power_w" in verdict.reason


def test_it_errors_on_a_cut_node_power_column() -> None:
    _, verdict = judge(doc([None, 4000.0, 4100.0]))
    assert (verdict.status, verdict.reason) == (
        ERROR,
        "samples: node_power_w has 3 readings for 5 sample times (cut or malformed output)",
    )


def test_it_asks_the_probe_for_node_power_only_when_told() -> None:
    check = get_check("burn_in")
    node = NodeContext(hostname="gpu001")
    [off] = check.commands(check.make_params(None), node)
    [on] = check.commands(check.make_params({"node_power": True}), node)
    assert "--node-power" not in off.argv
    assert on.argv[:6] == ("python3", "-", "--sample", "1", "--node-power", "--")


def test_it_takes_the_node_maximum_from_the_profiles() -> None:
    assert resolve_thresholds("burn_in", "H100-SXM-8")["node_max_w"] == 10_200.0
    assert resolve_thresholds("burn_in", "H200-SXM-8")["node_max_w"] == 10_200.0
    assert resolve_thresholds("burn_in", "A100-SXM-8")["node_max_w"] == 6_500.0
    assert BurnInThresholds().node_max_w is None  # generic: recorded, not judged
    for bad in ({"node_max_w": 0}, {"node_max_w": 2e5}, {"node_power_min_coverage": 0}, {"max_node_over_gpu_w": -1}):
        with pytest.raises(ParamsError):
            BurnInThresholds(**bad)


def test_it_stores_the_node_power_curve_with_the_burn_in() -> None:
    cmd = Command(argv=("python3", "-"), timeout=300, label=SAMPLING_LABEL)
    series = get_check("burn_in").series([CommandOutput(cmd, json.dumps(doc(HEALTHY)), "", 0)])
    [node] = [s for s in series if s.name == "node_power"]
    assert (node.unit, node.gpu, node.x, node.y) == ("W", None, [0.0, 1.0, 2.0, 3.0, 4.0], HEALTHY)
