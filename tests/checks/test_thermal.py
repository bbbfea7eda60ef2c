"""dlc_temperature: sensor parsers on real BMC outputs, evaluation on hand-built sampling documents
(checks/probe/SCHEMA.md "Sampling mode"), and the check end to end on the simulated node (probe
sampling mode + fake NVML + simulated gpu_burn and ipmitool)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from checks.core.base import ERROR, FAIL, PASS, WARN, Command, CommandOutput, NodeContext, ParamsError, run_check
from checks.core.parsers import PARSERS
from checks.thermal.check import IDLE, LOAD, SENSORS, DlcTemperature
from testbed.sim import SimPaths, build_simulator, node_env, write_state
from worker.ssh import LocalTransport, NodeTarget

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
FAST = {"idle_s": 2, "load_s": 3}
NODE = NodeContext(hostname="gpu01")


def one(measurements, name: str, **labels: str):
    found = [m for m in measurements if m.name == name and all(m.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (name, labels, found)
    return found[0]


# --- parsers on real outputs ----------------------------------------------------------------------


def test_it_parses_ipmitool_sdr_compact() -> None:
    parsed = PARSERS["ipmitool_sdr"]((FIXTURES / "ipmitool" / "ipmitool_sdr_compact_server_telegraf.txt").read_text())
    ms = parsed.measurements
    ambient = one(ms, "temperature", sensor="Ambient Temp")
    assert (ambient.value, ambient.unit, ambient.labels["unit"]) == (20.0, "C", "C")
    assert one(ms, "sensor", sensor="Fan 1").text == "ok"
    assert one(ms, "sensor", sensor="DASD Backplane 3").text == "no reading"
    assert [m for m in ms if m.name == "temperature"] == [ambient]  # Watts/RPM/Volts rows are not temperatures


def test_it_parses_redfish_thermal_of_dell_and_hpe() -> None:
    dell = PARSERS["redfish_thermal"]((FIXTURES / "redfish" / "redfish_Thermal_v1_4_0_dell_idrac.json").read_text())
    cpu = one(dell.measurements, "temperature", sensor="CPU1 Temp")
    assert (cpu.value, cpu.labels["context"]) == (40.0, "CPU")
    hpe = PARSERS["redfish_thermal"](
        (FIXTURES / "redfish" / "redfish_ThermalMetrics_v1_3_1_hpe_ilo.json").read_text()
    ).measurements
    assert [(m.labels["sensor"], m.value) for m in hpe] == [("01-Inlet Ambient", 19.0), ("02-CPU 1 PkgTmp", 42.0)]
    assert one(hpe, "temperature", sensor="01-Inlet Ambient").labels["context"] == "Intake"


def test_it_reads_redfish_leak_detectors() -> None:
    doc = {
        "LeakDetectors": [{"Name": "Leak Detect", "DetectorState": "Critical"}, {"Name": "Tray", "DetectorState": "OK"}]
    }
    ms = PARSERS["redfish_thermal"](json.dumps(doc)).measurements
    assert [(m.labels["sensor"], m.text) for m in ms] == [("Leak Detect", "asserted"), ("Tray", "ok")]


# --- evaluation on hand-built sampling documents --------------------------------------------------


def sampling_doc(temps: list[list[float | None]], *, reasons: int = 0, child: bool, slowdown: Any = 87) -> dict:
    """temps[sample][gpu]; the load doc's last sample stands for the post-exit one."""
    n = len(temps[0])
    before = {
        "schema": 1,
        "gpus": [{"index": i, "temperature": {"slowdown": slowdown, "memory_max_operating": 95}} for i in range(n)],
    }
    samples = [
        {
            "t": float(k),
            "gpus": [
                {"index": i, "temp_gpu": t, "temp_memory": None if t is None else t + 6, "clock_event_reasons": reasons}
                for i, t in enumerate(row)
            ],
        }
        for k, row in enumerate(temps)
    ]
    return {
        "schema": 1,
        "mode": "sample",
        "interval_s": 1.0,
        "before": before,
        "after": before,
        "samples": samples,
        "child": {"argv": ["gpu_burn", "-tc", "3"], "exit_code": 0, "stdout": "", "stderr": "", "duration_s": 3.0}
        if child
        else None,
        "errors": [],
    }


def outputs(idle: dict, load: dict, sensors: str | None = None) -> list[CommandOutput]:
    outs = [
        CommandOutput(Command(argv=("python3", "-"), timeout=60, label=IDLE), json.dumps(idle), "", 0),
        CommandOutput(Command(argv=("python3", "-"), timeout=60, label=LOAD), json.dumps(load), "", 0),
    ]
    if sensors is not None:
        outs.append(CommandOutput(Command(argv=("ipmitool", "sdr"), timeout=60, label=SENSORS), sensors, "", 0))
    return outs


IDLE_OK = sampling_doc([[35, 36, 35, 36]] * 3, child=False)
LOAD_OK = sampling_doc([[60, 61, 62, 61], [68, 68, 69, 67], [68, 69, 69, 68], [40, 40, 40, 40]], child=True)


def judge(outs: list[CommandOutput], thresholds: dict | None = None, node: NodeContext = NODE):
    return run_check(DlcTemperature, FAST, thresholds, outs, node)


def test_it_passes_healthy_docs() -> None:
    ms, verdict = judge(outputs(IDLE_OK, LOAD_OK))
    assert (verdict.status, verdict.reason) == (PASS, "4 GPUs: hottest 69 C under load, no thermal slowdown")
    # GPU 1: mean of the last half (68, 69), the post-exit sample (40) left out.
    steady = [m for m in ms if m.name == "temp_gpu_steady" and m.gpu == 1 and m.labels["phase"] == "load"]
    assert [(m.value, m.threshold, m.ok) for m in steady] == [(68.5, "<= 77", True)]


def test_it_names_the_gpu_hotter_than_its_siblings() -> None:
    load = sampling_doc([[60, 61, 62, 61, 62, 60], [68, 68, 69, 80, 67, 68], [68, 68, 68, 80, 68, 68]], child=True)
    idle = sampling_doc([[35] * 6] * 3, child=False)
    _, verdict = judge(outputs(idle, load), {"min_margin_c": None})
    assert verdict.status == FAIL
    assert verdict.reason == (
        "GPU 3: 80 C under load, 12 C above its siblings' median (68 C): check cold plate / coolant flow"
    )


def test_it_fails_thermal_slowdown_during_the_load() -> None:
    load = sampling_doc(
        [[60, 61, 62, 61], [68, 68, 69, 67], [68, 69, 69, 68], [40, 40, 40, 40]], reasons=0x20, child=True
    )
    _, verdict = judge(outputs(IDLE_OK, load))
    assert verdict.status == FAIL
    assert "GPU 0: thermal slowdown in 4 samples under load" in verdict.reason


def test_it_warns_on_hw_slowdown_alone() -> None:
    load = sampling_doc(
        [[60, 61, 62, 61], [68, 68, 69, 67], [68, 69, 69, 68], [40, 40, 40, 40]], reasons=0x08, child=True
    )
    _, verdict = judge(outputs(IDLE_OK, load))
    assert verdict.status == WARN


def test_it_fails_a_gpu_too_close_to_slowdown() -> None:
    load = sampling_doc([[70, 70], [79, 70], [79, 70], [40, 40]], child=True)
    idle = sampling_doc([[35, 35]] * 3, child=False)
    _, verdict = judge(outputs(idle, load), {"max_sibling_delta_c": None})
    assert (verdict.status, verdict.reason) == (
        FAIL,
        "GPU 0: 79 C under load, within 8 C of its slowdown threshold (87 C; margin 10 C required)",
    )


def test_it_errors_without_the_slowdown_threshold() -> None:
    idle = sampling_doc([[35, 36, 35, 36]] * 3, child=False, slowdown=None)
    _, verdict = judge(outputs(idle, LOAD_OK))
    assert verdict.status == ERROR
    assert "GPU 0: slowdown threshold unknown; cannot judge the margin" in verdict.reason


def test_it_errors_on_missing_samples() -> None:
    empty = sampling_doc([[35, 36]], child=True)
    empty["samples"] = []
    _, verdict = judge(outputs(IDLE_OK, empty))
    assert verdict.status == ERROR
    assert "only 0 load samples (need 2)" in verdict.reason
    _, verdict = judge(outputs(IDLE_OK, LOAD_OK)[:1])
    assert (verdict.status, verdict.reason) == (ERROR, "no load sampling output")


def test_it_errors_on_a_probe_without_sampling_mode() -> None:
    plain = {"schema": 1, "source": "nvml", "gpus": []}
    _, verdict = judge(outputs(plain, LOAD_OK))
    assert verdict.status == ERROR
    assert verdict.reason.startswith("idle sampling: not a sampling document")


SDR = (
    "Coolant Inlet    | 31 degrees C      | ok\n"
    "Coolant Outlet   | 40 degrees C      | ok\n"
    "Leak Detect      | 0x00              | ok\n"
)


def test_it_judges_coolant_sensors_named_by_the_cluster() -> None:
    sdr = (
        "Loop A In        | 31 degrees C      | ok\n"
        "Loop A Out       | 52 degrees C      | ok\n"
        "Drip Tray        | 0x00              | ok\n"
    )
    node = NodeContext(
        hostname="gpu01", settings={"sensors": {"inlet": "Loop A In", "outlet": "Loop A Out", "leak": "Drip Tray"}}
    )
    ms, verdict = judge(outputs(IDLE_OK, LOAD_OK, sdr), node=node)
    assert (verdict.status, verdict.reason) == (
        FAIL,
        "coolant delta-T 21 C (inlet 31 C, outlet 52 C) above 15 C: low coolant flow?",
    )
    assert one(ms, "coolant_delta_t").ok is False
    _, verdict = judge(outputs(IDLE_OK, LOAD_OK, SDR))
    assert verdict.status == PASS


def test_it_errors_when_a_configured_sensor_is_absent() -> None:
    _, verdict = judge(outputs(IDLE_OK, LOAD_OK, SDR.replace("Leak Detect", "Something")))
    assert (verdict.status, verdict.reason) == (ERROR, "leak sensor 'Leak Detect' not in the sensor output")


def test_it_builds_the_sensor_commands() -> None:
    params = DlcTemperature.make_params(
        {"sensor_source": "redfish", "redfish_url": "https://bmc1/redfish/v1/Chassis/1/Thermal"}
    )
    cmds = DlcTemperature().commands(params, NODE)
    assert [c.label for c in cmds] == [IDLE, LOAD, "sensors redfish"]
    assert cmds[1].argv[-4:] == ("--", "gpu_burn", "-tc", "120")
    assert cmds[2].argv[0] == "curl" and "--netrc-optional" in cmds[2].argv
    with pytest.raises(ParamsError):
        DlcTemperature.make_params({"sensor_source": "redfish"})


# --- end to end on the simulated node --------------------------------------------------------------


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> SimPaths:
    pytest.importorskip("pynvml")
    return build_simulator(tmp_path_factory.mktemp("sim"))


def run_sim(sim: SimPaths, tmp_path: Path, **faults):
    state = tmp_path / "gpu01" / "state"
    write_state(state, node="gpu01", **faults)
    node = LocalTransport(NodeTarget(hostname="gpu01", transport="local", local_env=node_env(sim, state)))
    params = DlcTemperature.make_params({**FAST, "sensor_source": "ipmitool"})
    check = DlcTemperature()
    outs = [node.run(c) for c in check.commands(params, NODE)]
    ms, verdict = run_check(check, params, None, outs, NODE)
    return ms, verdict, check.series(outs)


def test_it_passes_a_healthy_simulated_node(sim: SimPaths, tmp_path: Path) -> None:
    ms, verdict, series = run_sim(sim, tmp_path)
    assert verdict.status == PASS, verdict.reason
    slowdown = [m for m in ms if m.name == "slowdown_temp" and m.gpu == 0]
    assert [m.value for m in slowdown] == [87.0]  # read by the probe from NVML, not assumed
    assert {(s.name, s.labels["phase"]) for s in series} == {
        ("temp_gpu", "idle"),
        ("temp_gpu", "load"),
        ("temp_memory", "idle"),
        ("temp_memory", "load"),
    }
    assert len(series) == 32


def test_it_fails_the_hot_gpu_on_the_simulator(sim: SimPaths, tmp_path: Path) -> None:
    _, verdict, _ = run_sim(sim, tmp_path, hot_gpu=3)
    assert verdict.status == FAIL
    assert "GPU 3: 80 C under load, 11 C above its siblings' median (69 C): check cold plate / coolant flow" in (
        verdict.reason
    )


def test_it_fails_a_throttling_gpu_on_the_simulator(sim: SimPaths, tmp_path: Path) -> None:
    _, verdict, _ = run_sim(sim, tmp_path, throttle_gpu=5)
    assert verdict.status == FAIL
    assert "GPU 5: thermal slowdown in" in verdict.reason


def test_it_fails_a_leak_on_the_simulator(sim: SimPaths, tmp_path: Path) -> None:
    _, verdict, _ = run_sim(sim, tmp_path, leak=1)
    assert (verdict.status, verdict.reason) == (FAIL, "leak sensor 'Leak Detect' asserted")


def test_it_judges_idle_temperatures_alone_when_no_load_is_asked(tmp_path) -> None:
    """load_s=0 (quick sweeps): only the idle probe runs; no gpu_burn; the margins still judged."""
    from checks.core.base import NodeContext, get_check, run_check
    from testbed.sim import build_simulator, node_env, write_state
    from worker.ssh import LocalTransport, NodeTarget

    paths = build_simulator(tmp_path / "sim")
    state = tmp_path / "nodes" / "n1" / "state"
    state.parent.mkdir(parents=True)
    write_state(state, node="n1")
    check = get_check("dlc_temperature")
    params = check.make_params({"idle_s": 2, "load_s": 0})
    commands = check.commands(params, NodeContext(hostname="n1"))
    assert [c.label for c in commands] == [commands[0].label] and "gpu_burn" not in commands[0].argv
    transport = LocalTransport(NodeTarget(hostname="n1", transport="local", local_env=node_env(paths, state)))
    outputs = [transport.run(c) for c in commands]
    _, verdict = run_check(check, params, {}, outputs, NodeContext(hostname="n1"))
    assert verdict.status == "pass", verdict.reason
    assert "idle" in verdict.reason

    write_state(state, node="n1", temp_gpu=2, temp_value=84)  # 3 C from the 87 C slowdown at idle
    outputs = [transport.run(c) for c in commands]
    _, verdict = run_check(check, params, {}, outputs, NodeContext(hostname="n1"))
    assert verdict.status == "fail" and "GPU 2" in verdict.reason, verdict.reason
