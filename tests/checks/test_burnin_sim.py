"""burn_in end to end on a simulated node: the probe in sampling mode wrapping the simulated
gpu_burn, through the real LocalTransport, judged by run_check."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from checks import run_check
from checks.burnin.check import BurnIn
from checks.core.base import ERROR, FAIL, PASS, NodeContext
from checks.core.profiles import resolve_params, resolve_thresholds
from testbed.sim import SimPaths, build_simulator, node_env, write_state
from worker.ssh import LocalTransport, NodeTarget

# Real-time readings judged on a deadline: beside other such tests, never at once (tests/conftest.py).
pytestmark = pytest.mark.exclusive("cpu")

pytest.importorskip("pynvml")

FAST = {"duration_s": 3, "sample_interval_s": 0.5}
NODE = NodeContext(hostname="gpu01", expected_gpus=8)


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> SimPaths:
    return build_simulator(tmp_path_factory.mktemp("sim"))


def burn(sim: SimPaths, tmp_path: Path, params: dict | None = None, **faults: str | int):
    state = tmp_path / "gpu01.state"
    write_state(state, node="gpu01", **faults)
    transport = LocalTransport(NodeTarget(hostname="gpu01", transport="local", local_env=node_env(sim, state)))
    check = BurnIn()
    merged = resolve_params("burn_in", "H100-SXM-8", FAST, params)
    thresholds = resolve_thresholds("burn_in", "H100-SXM-8")
    outputs = [transport.run(c) for c in check.commands(check.make_params(merged), NODE)]
    measurements, verdict = run_check(check, merged, thresholds, outputs, NODE)
    return measurements, verdict, check.series(outputs), outputs


def test_it_passes_a_healthy_node_with_telemetry_series(sim: SimPaths, tmp_path: Path) -> None:
    measurements, verdict, series, _ = burn(sim, tmp_path)
    assert verdict.status == PASS, verdict.reason
    # The burn's length as gpu_burn reported it: 3 s asked, 5 s once on a loaded CI machine.
    assert re.match(r"8 GPUs burned for [3-9]s \(fp32\): ", verdict.reason), verdict.reason
    assert "Xid: see the ECC/Xid check" in verdict.reason
    assert {(s.name, s.gpu) for s in series} == {
        (name, gpu) for name in ("temp_gpu", "temp_memory", "power_w", "sm_clock_mhz") for gpu in range(8)
    }
    temp = next(s for s in series if s.name == "temp_gpu" and s.gpu == 0)
    assert len(temp.x) >= 5 and temp.x == sorted(temp.x)
    assert max(v for v in temp.y if v is not None) >= 60  # rose under load
    gflops = next(m for m in measurements if m.name == "gflops" and m.gpu == 3)
    assert gflops.ok is True and 45000 < gflops.value < 55000


def test_it_fails_compute_errors_naming_the_gpu(sim: SimPaths, tmp_path: Path) -> None:
    _, verdict, _, _ = burn(sim, tmp_path, burn_errors_gpu=4)
    assert verdict.status == FAIL
    assert "GPU 4: " in verdict.reason and "compute errors (gpu_burn FAULTY)" in verdict.reason
    assert "GPU 3" not in verdict.reason


def test_it_fails_zero_gflops_even_though_gpu_burn_printed_ok(sim: SimPaths, tmp_path: Path) -> None:
    measurements, verdict, _, outputs = burn(sim, tmp_path, burn_zero_gflops=1)
    assert "GPU 0: OK" in json.loads(outputs[0].stdout)["child"]["stdout"]
    assert verdict.status == FAIL
    assert "GPU 0: 0 Gflop/s (gpu_burn printed OK but made no progress)" in verdict.reason


def test_it_fails_a_thermal_throttle_naming_gpu_reason_and_time(sim: SimPaths, tmp_path: Path) -> None:
    measurements, verdict, _, _ = burn(sim, tmp_path, throttle_gpu=5)
    assert verdict.status == FAIL
    throttle = [f.reason for f in verdict.findings if "clock slowdown" in f.reason]
    assert len(throttle) == 1 and throttle[0].startswith("GPU 5: clock slowdown during the burn: ")
    assert "hw_thermal_slowdown t=" in throttle[0] and "sw_thermal_slowdown" in throttle[0]
    # gpu_burn's rate on the throttled GPU is also far below its siblings.
    assert any(f.reason.startswith("GPU 5: 35,") and "below the node's median" in f.reason for f in verdict.findings)


def test_it_errors_when_gpu_burn_is_missing(sim: SimPaths, tmp_path: Path) -> None:
    _, verdict, _, _ = burn(sim, tmp_path, {"gpu_burn_path": "no_such_gpu_burn"})
    assert verdict.status == ERROR
    assert "exited 127" in verdict.reason and "no_such_gpu_burn" in verdict.reason


def test_it_errors_when_a_gpu_was_not_burned(sim: SimPaths, tmp_path: Path) -> None:
    # The driver (probe before the burn) counts 9 GPUs, gpu_burn tested 8: GPU 8 was never burned.
    _, _, _, outputs = burn(sim, tmp_path)
    doc = json.loads(outputs[0].stdout)
    doc["before"]["gpu_count"] = 9
    out = outputs[0].__class__(outputs[0].command, json.dumps(doc), "", 0)
    _, verdict = run_check(BurnIn, FAST, None, [out], NODE)
    assert (verdict.status, verdict.reason) == (ERROR, "GPU 8: not in gpu_burn's output (it was not tested)")


def test_it_errors_with_no_samples_and_no_gpu_burn_output(sim: SimPaths, tmp_path: Path) -> None:
    _, _, _, outputs = burn(sim, tmp_path)
    doc = json.loads(outputs[0].stdout)
    doc["samples"] = {"t": [], "gpus": []}  # what the probe prints when NVML reads nothing
    doc["errors"] = ["sample: nvmlInit failed: NVMLError_Unknown"]
    out = outputs[0].__class__(outputs[0].command, json.dumps(doc), "", 0)
    _, verdict = run_check(BurnIn, FAST, None, [out], NODE)
    assert (verdict.status, verdict.reason) == (
        ERROR,
        "no telemetry samples during the burn (sample: nvmlInit failed: NVMLError_Unknown)",
    )
    doc["child"]["stdout"] = ""
    out = outputs[0].__class__(outputs[0].command, json.dumps(doc), "", 0)
    _, verdict = run_check(BurnIn, FAST, None, [out], NODE)
    assert (verdict.status, verdict.reason) == (ERROR, "gpu_burn printed nothing on stdout (exit code 0)")


# Node power is a median over the steady window: 3 s of burn left that window a sample or two on a
# loaded machine, some still in the simulated ramp (1,065 W above the GPUs instead of 1,500 once, in
# a CI run). 8 s holds several steady samples.
NODE_POWER = {"node_power": True, "duration_s": 8}


def test_it_reads_node_power_following_the_load_and_an_over_drawing_node(sim: SimPaths, tmp_path: Path) -> None:
    healthy, verdict, series, _ = burn(sim, tmp_path, NODE_POWER)
    assert verdict.status == PASS, verdict.reason
    assert "; node power peak 6.8" in verdict.reason and "(max 10.20 kW)" in verdict.reason
    assert ("node_power", None) in {(s.name, s.gpu) for s in series}
    found = {m.name: m.value for m in healthy if m.gpu is None}
    gpus = found["gpu_power_steady_sum_w"]
    assert gpus is not None and 5000 < gpus < 5500  # 8 simulated GPUs at 650-685 W
    # The simulated platform draws 1,500 W under load beside its GPUs (testbed/sim/power.py).
    assert found["node_power_over_gpu_w"] == pytest.approx(1500, abs=150)
    faulty, verdict, _, _ = burn(sim, tmp_path, NODE_POWER, power_over_pct=30)
    over = {m.name: m.value for m in faulty if m.gpu is None}["node_power_over_gpu_w"]
    assert over is not None and over - 1500 == pytest.approx(0.3 * gpus, rel=0.1)  # 30% of its GPUs on top
