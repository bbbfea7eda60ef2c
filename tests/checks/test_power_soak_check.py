"""The power_soak check end to end in pure Python: every node's probe document and the facility
sampler's readings (as the executor hands them over) -> samples on one grid -> the judge. The planted
faults of tests/checks/soak_builder.py each fail exactly their subject here too."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from checks import get_check
from checks.core.base import ERROR, FAIL, PASS, Command, CommandOutput, GroupContext, NodeContext, ParamsError
from checks.core.fanout import FACILITY_LABEL, facility_document, run_fan_out_check
from checks.core.sampling import SAMPLING_SCHEMA
from checks.soak.check import PowerSoak, PowerSoakParams
from checks.soak.data import SoakThresholds
from checks.soak.samples import grid, on_grid, read_loop, read_pdu
from tests.checks.soak_builder import HOSTS, N, Soak

REPO_FIXTURES = "tests/fixtures"
FIELDS = ("temp_gpu", "temp_memory", "sm_clock_mhz", "clock_event_reasons", "ecc_volatile_uncorrected",
          "ecc_volatile_corrected")  # fmt: skip
HEALTHY = {"temp_gpu": 60, "temp_memory": 66, "sm_clock_mhz": 1980, "clock_event_reasons": 4,
           "ecc_volatile_uncorrected": 0, "ecc_volatile_corrected": 0}  # fmt: skip


def probe_output(
    host: str, node_w: list[float | None], gpu_w: list[float], *, jitter: float = 0.02, **gpu0: Any
) -> list[CommandOutput]:
    """One node's sampling document: 8 GPUs sharing gpu_w, the BMC's node power, t a little late."""
    t = [round(k + jitter * ((k * 7) % 3), 3) for k in range(len(gpu_w))]
    gpus = []
    for i in range(8):
        entry: dict[str, Any] = {"index": i, **{f: [HEALTHY[f]] * len(t) for f in FIELDS}}
        entry["power_w"] = [round(g / 8, 3) for g in gpu_w]
        entry.update(gpu0 if i == 0 else {})
        gpus.append(entry)
    doc = {"schema": SAMPLING_SCHEMA, "mode": "sample", "interval_s": 1.0, "before": None, "after": None,
           "samples": {"t": t, "gpus": gpus, "node_power_w": node_w}, "node_power": {"source": "dcmi", "errors": []},
           "started_at": 1_800_000_000.0, "child": None, "errors": []}  # fmt: skip
    command = Command(argv=("python3", "-"), timeout=600, stdin="#probe", label=f"probe.py --sample on {host}")
    return [CommandOutput(command=command, stdout=json.dumps(doc), stderr="", exit_code=0)]


def facility_output(samples: dict[str, Any], model: dict[str, Any]) -> CommandOutput:
    endpoints = [
        {"kind": "pdu", "name": pdu, "t": [float(k) for k in range(N)], "readings": phases, "errors": [], "requests": N}
        for pdu, phases in samples["phase_current_a"].items()
    ]
    endpoints += [
        {
            "kind": "loop",
            "name": loop,
            "t": [k + 0.1 for k in range(N)],
            "readings": values,
            "errors": [],
            "requests": N,
        }
        for loop, values in samples["loops"].items()
    ]
    command = Command(argv=("redfish", "GET"), timeout=0, label=FACILITY_LABEL)
    return CommandOutput(command=command, stdout=facility_document(endpoints, model), stderr="", exit_code=0)


def judge(soak: Soak, *, per_node: dict[str, list[CommandOutput]] | None = None, facility: bool = True):
    model, samples = soak.build()
    outputs = per_node or {h: probe_output(h, samples["node_power_w"][h], samples["gpu_power_w"][h]) for h in HOSTS}
    nodes = tuple(NodeContext(hostname=h) for h in HOSTS)
    group = GroupContext(nodes=nodes, launcher=nodes[0], start_at=1_800_000_000.0, facility=model)
    params = PowerSoakParams(duration_s=N)
    fac = [facility_output(samples, model)] if facility else []
    return run_fan_out_check(PowerSoak(), params, SoakThresholds(node_max_w=10_200.0), outputs, fac, group)


def failing(verdict) -> set[str]:
    return {f.reason.split(":")[0] for f in verdict.findings if f.status == FAIL}


def test_it_passes_a_healthy_cluster() -> None:
    measurements, verdict, series = judge(Soak())
    assert verdict.status == PASS, verdict.reason
    assert all(v.status == PASS for v in verdict.node_verdicts.values())
    assert {s.name for s in series} == {"cluster_power_w", "rack_power_w"}
    assert any(m.name == "ups_peak_load_w" for m in measurements)


def test_it_fails_exactly_each_planted_fault() -> None:
    cases = {
        "node gpu05": Soak(over_drawing="gpu05"),
        "PDU pdu-r2-a phase 2": Soak(mis_cabled="pdu-r2-a"),
        "loop cdu1": Soak(low_flow=True),
        "UPS ups1": Soak(ups_capacity_w=60_000.0),
    }
    for subject, soak in cases.items():
        _, verdict, _ = judge(soak)
        assert verdict.status == FAIL, (subject, verdict.reason)
        assert failing(verdict) == {subject}, (subject, verdict.reason)
    _, verdict, _ = judge(Soak(over_drawing="gpu05"))
    assert verdict.node_verdicts["gpu05"].status == FAIL
    assert {h for h, v in verdict.node_verdicts.items() if v.status != PASS} == {"gpu05"}


def test_it_names_an_unreachable_node_and_errors_its_rack() -> None:
    model, samples = Soak().build()
    outputs = {h: probe_output(h, samples["node_power_w"][h], samples["gpu_power_w"][h]) for h in HOSTS}
    command = outputs["gpu07"][0].command
    outputs["gpu07"] = [
        CommandOutput(command=command, stdout="", stderr="unreachable: No route to host", exit_code=None)
    ]
    _, verdict, _ = judge(Soak(), per_node=outputs)
    assert verdict.status == ERROR
    assert verdict.node_verdicts["gpu07"].reason == "node gpu07: unreachable: No route to host"
    assert any(f.status == ERROR and f.reason.startswith("rack r2") for f in verdict.findings)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -5.0, 1e9])
def test_it_never_passes_impossible_node_power(bad: float) -> None:
    model, samples = Soak().build()
    outputs = {h: probe_output(h, samples["node_power_w"][h], samples["gpu_power_w"][h]) for h in HOSTS}
    node_w = list(samples["node_power_w"]["gpu03"])
    node_w[50] = bad
    text = outputs["gpu03"][0].stdout.replace("NaN", "NaN")  # keep the others' documents as they are
    doc = json.loads(text)
    doc["samples"]["node_power_w"] = node_w
    outputs["gpu03"] = [
        CommandOutput(command=outputs["gpu03"][0].command, stdout=json.dumps(doc), stderr="", exit_code=0)
    ]
    _, verdict, _ = judge(Soak(), per_node=outputs)
    assert verdict.status == ERROR, verdict.reason
    assert verdict.node_verdicts["gpu03"].status == ERROR


def test_it_fails_a_node_whose_gpu_throttled_by_heat() -> None:
    model, samples = Soak().build()
    outputs = {h: probe_output(h, samples["node_power_w"][h], samples["gpu_power_w"][h]) for h in HOSTS}
    reasons = [4] * N
    reasons[90:95] = [0x40] * 5  # hw_thermal_slowdown for 5 s under load
    outputs["gpu09"] = probe_output("gpu09", samples["node_power_w"]["gpu09"], samples["gpu_power_w"]["gpu09"],
                                    clock_event_reasons=reasons)  # fmt: skip
    _, verdict, _ = judge(Soak(), per_node=outputs)
    assert verdict.status == FAIL
    assert verdict.node_verdicts["gpu09"].status == FAIL
    assert "hw_thermal_slowdown" in verdict.node_verdicts["gpu09"].reason


def test_it_errors_on_garbage_facility_readings() -> None:
    model, samples = Soak().build()
    outputs = {h: probe_output(h, samples["node_power_w"][h], samples["gpu_power_w"][h]) for h in HOSTS}
    nodes = tuple(NodeContext(hostname=h) for h in HOSTS)
    group = GroupContext(nodes=nodes, launcher=nodes[0], start_at=0.0, facility=model)
    command = Command(argv=("redfish", "GET"), timeout=0, label=FACILITY_LABEL)
    for text in (
        "not json",
        json.dumps({"schema": 1, "endpoints": [{"kind": "pdu", "name": "p", "t": [0, 1], "readings": {"1": [1.0]}}]}),
    ):
        bad = CommandOutput(command=command, stdout=text, stderr="", exit_code=0)
        _, verdict, _ = run_fan_out_check(
            PowerSoak(), PowerSoakParams(duration_s=N), SoakThresholds(), outputs, [bad], group
        )
        assert verdict.status == ERROR, verdict.reason


def test_it_puts_readings_on_the_nearest_grid_point_only() -> None:
    assert grid(5, 1.0) == [0.0, 1.0, 2.0, 3.0, 4.0]
    values = on_grid([(0.02, 1.0), (0.9, 2.0), (1.1, 3.0), (2.6, 4.0), (3.55, 5.0), (float("nan"), 6.0)], 5, 1.0)
    # 0.9 and 1.1 both round to point 1: the first wins, point 2 stays empty (never a neighbour's value)
    assert values == [1.0, 2.0, None, 4.0, 5.0]


def test_it_builds_node_commands_that_start_together() -> None:
    check = get_check("power_soak")
    assert isinstance(check, PowerSoak)
    nodes = tuple(NodeContext(hostname=f"n{i}") for i in range(4))
    group = GroupContext(nodes=nodes, launcher=nodes[0], start_at=1_800_000_123.5)
    params = check.make_params({"duration_s": 60, "gpu_burn_path": "/opt/gpu burn; rm -rf /"})
    [command] = check.node_commands(params, group, nodes[2])
    assert command.argv[:2] == ("python3", "-")
    assert "--node-power" in command.argv and command.argv[command.argv.index("--start-at") + 1] == "1800000123.500"
    assert command.argv[-3:] == ("/opt/gpu burn; rm -rf /", "-tc", "60")  # one argv element, never a shell word
    assert command.timeout == pytest.approx(5 + 0.25 * 4 + 60 + 120)
    with pytest.raises(ParamsError):
        check.make_params({"gpu_burn_path": "-h"})
    [alone] = check.node_commands(params, GroupContext(nodes=nodes, launcher=nodes[0]), nodes[0])
    assert "--start-at" not in alone.argv  # no common start: the node starts at once


def test_the_redfish_readers_read_the_dmtf_mockups() -> None:
    from pathlib import Path

    pdu = Path(REPO_FIXTURES, "redfish-pdu")
    mains = [p for p in sorted(pdu.glob("*.json")) if "Mains" in p.name or "mains" in p.name.lower()]
    assert mains, "a Mains circuit fixture"
    phases = read_pdu([mains[0].read_text()])
    assert set(phases) >= {"1"} and all(v is None or (math.isfinite(v) and v >= 0) for v in phases.values())
    cdu = Path(REPO_FIXTURES, "redfish-cdu")
    connectors = [p for p in sorted(cdu.glob("*.json")) if "onnector" in p.name]
    readings = [read_loop([p.read_text()]) for p in connectors]
    assert any(all(v is not None for v in r.values()) for r in readings), readings


def test_its_time_budget_grows_with_the_nodes_it_must_start() -> None:
    check = PowerSoak()
    params = PowerSoakParams(duration_s=1800)
    [small] = check.stand_in_commands(params, 2)
    [large] = check.stand_in_commands(params, 1000)
    assert large.timeout - small.timeout == pytest.approx(0.25 * 998)
    assert small.timeout >= 1800 + 120


HOSTILE = {
    "empty": "",
    "garbage": bytes(range(256)).decode("latin-1") * 16,
    "nul": "\x00" * 1000,
    "nested arrays": "[" * 100_000 + "]" * 100_000,
    "nested objects": '{"a":' * 50_000 + "1" + "}" * 50_000,
}


@pytest.mark.parametrize("name", [*HOSTILE, "truncated", "nan", "negative"])
def test_it_never_passes_one_node_hostile_output(name: str) -> None:
    """The generic fuzz (test_check_fuzz.py) leaves fan-out checks out: one node's hostile output here."""
    model, samples = Soak().build()
    outputs = {h: probe_output(h, samples["node_power_w"][h], samples["gpu_power_w"][h]) for h in HOSTS}
    good = outputs["gpu06"][0]
    text = HOSTILE.get(name, good.stdout)
    if name == "truncated":
        text = good.stdout[: len(good.stdout) // 2]
    elif name in ("nan", "negative"):
        text = good.stdout.replace(
            '"node_power_w": [', '"node_power_w": [' + ("NaN, " if name == "nan" else "-7.0, "), 1
        )
        text = text.replace(", " + str(samples["node_power_w"]["gpu06"][-1]) + "]", "]", 1)
    outputs["gpu06"] = [CommandOutput(command=good.command, stdout=text, stderr="", exit_code=0)]
    _, verdict, _ = judge(Soak(), per_node=outputs)
    assert verdict.status == ERROR, (name, verdict.reason)
    assert verdict.node_verdicts["gpu06"].status == ERROR, verdict.node_verdicts["gpu06"].reason


def test_it_refuses_more_nodes_than_one_soak_can_start() -> None:
    with pytest.raises(ParamsError, match="soak fewer nodes at once"):
        PowerSoak().start_delay_s(PowerSoakParams(), 5000)
