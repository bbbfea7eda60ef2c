"""gpu_power_limit: each GPU's enforced power limit against its rated board power, on probe JSON
and on the simulator (NVML path and nvidia-smi path)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from checks import get_check, presentation_of, run_check
from checks.core.base import ERROR, FAIL, PASS, WARN, NodeContext, ParamsError
from checks.core.profiles import resolve_thresholds
from tests.checks.probe_docs import gpu_doc, output, probe_doc

NODE = NodeContext(hostname="gpu001")


def judge(doc: dict, profile: str | None = "H100-SXM-8", **overrides):
    thresholds = resolve_thresholds("gpu_power_limit", profile, overrides)
    return run_check(get_check("gpu_power_limit"), None, thresholds, output(doc), NODE)


def test_it_passes_gpus_at_their_rated_limit() -> None:
    measurements, verdict = judge(probe_doc())
    assert (verdict.status, verdict.reason) == (PASS, "8 GPUs, power limit 700 W")
    limits = [m for m in measurements if m.name == "power_limit_w"]
    assert [(m.gpu, m.value, m.threshold, m.ok) for m in limits][:2] == [
        (0, 700.0, ">= 700", True),
        (1, 700.0, ">= 700", True),
    ]
    assert {m.value for m in measurements if m.name == "power_draw_w"} == {70.5}


def test_it_fails_a_capped_gpu_and_names_it() -> None:
    doc = probe_doc(gpus=[gpu_doc(i, power__limit_w=450.0 if i == 3 else 700.0) for i in range(8)])
    measurements, verdict = judge(doc)
    assert (verdict.status, verdict.reason) == (FAIL, "GPU 3: power limit 450 W, rated 700 W")
    assert next(m for m in measurements if m.name == "power_limit_w" and m.gpu == 3).ok is False


def test_it_errors_on_a_missing_limit_never_passes() -> None:
    gpus = [gpu_doc(i) for i in range(8)]
    gpus[5]["power"]["limit_w"] = None
    gpus[5]["errors"]["power.limit_w"] = "Not Supported"
    _, verdict = judge(probe_doc(gpus=gpus))
    assert (verdict.status, verdict.reason) == (ERROR, "GPU 5: power limit unavailable (Not Supported)")


@pytest.mark.parametrize("limit", [0.0, -5.0, 50000.0])
def test_it_errors_on_an_impossible_limit(limit: float) -> None:
    doc = probe_doc(gpus=[gpu_doc(i, power__limit_w=limit if i == 0 else 700.0) for i in range(8)])
    measurements, verdict = judge(doc)
    assert verdict.status == ERROR
    assert verdict.reason.startswith("impossible evidence")
    assert measurements == []


def test_it_warns_not_judged_without_a_floor() -> None:
    _, verdict = judge(probe_doc(), profile=None)
    assert verdict.status == WARN
    assert verdict.reason.startswith("not judged")


def test_it_errors_when_the_driver_counts_a_gpu_the_probe_did_not_list() -> None:
    _, verdict = judge(probe_doc(n=8, gpus=[gpu_doc(i) for i in range(7)]))
    assert (verdict.status, verdict.reason) == (ERROR, "GPUs [7]: counted by the driver, no power data")


def test_it_rejects_an_impossible_floor() -> None:
    with pytest.raises(ParamsError, match="min_power_limit_w"):
        get_check("gpu_power_limit").make_thresholds({"min_power_limit_w": 0})


def test_it_declares_how_the_portal_shows_it() -> None:
    shown = presentation_of("gpu_power_limit")
    assert [m.name for m in shown.key_metrics] == ["power_limit_w"]
    assert [p.metric for p in shown.prometheus] == ["kiln_gpu_power_limit_watts"]
    # The outlier reader takes the node's lowest GPU.
    rows = [{"name": "power_limit_w", "value": v, "labels": {}} for v in (700.0, 450.0, 700.0)]
    assert shown.outliers[0].read(rows) == 450.0
    assert shown.certificate_charts[0].names == ("power_limit_w",)


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory):
    from testbed.sim import build_simulator

    return build_simulator(tmp_path_factory.mktemp("sim"))


def run_sim(sim, tmp_path: Path, **faults):
    from testbed.sim import node_env, write_state
    from worker.ssh import LocalTransport, NodeTarget

    state = tmp_path / "gpu01" / "state"
    write_state(state, node="gpu01", **faults)
    transport = LocalTransport(NodeTarget(hostname="gpu01", transport="local", local_env=node_env(sim, state)))
    check = get_check("gpu_power_limit")
    node = NodeContext(hostname="gpu01", since=time.time())
    outputs = [transport.run(c) for c in check.commands(check.make_params(None), node)]
    return run_check(check, None, resolve_thresholds("gpu_power_limit", "H100-SXM-8"), outputs, node)


def test_it_passes_the_simulated_healthy_node(sim, tmp_path: Path) -> None:
    pytest.importorskip("pynvml")
    measurements, verdict = run_sim(sim, tmp_path)
    assert verdict.status == PASS, verdict.reason
    assert len([m for m in measurements if m.name == "power_limit_w" and m.value == 700.0]) == 8


@pytest.mark.parametrize("nvml_absent", ["0", "1"])  # the NVML path and the nvidia-smi XML path
def test_it_fails_the_simulated_power_capped_gpu(sim, tmp_path: Path, nvml_absent: str) -> None:
    pytest.importorskip("pynvml")
    _, verdict = run_sim(sim, tmp_path, power_cap_gpu=6, power_cap_w=400, nvml_absent=nvml_absent)
    assert (verdict.status, verdict.reason) == (FAIL, "GPU 6: power limit 400 W, rated 700 W")
