"""dlc_temperature: GPU and HBM temperatures idle and under load, sibling spread, thermal
throttling, and (optionally) the BMC's coolant/leak sensors of a direct-liquid-cooled node.

Commands (in order, each labelled):
    "probe idle": `python3 - --sample I --duration IDLE_S` (probe on stdin): idle telemetry;
    "probe load": `python3 - --sample I -- gpu_burn -tc LOAD_S`: telemetry while gpu_burn runs;
    "sensors" (only when `sensor_source` is set): `ipmitool sdr` or `curl -sfk URL` (Redfish
        Thermal / ThermalMetrics; BMC credentials come from the node's ~/.netrc via
        --netrc-optional, never from argv).

Judged (no evidence, no pass):
- idle and steady-state-under-load GPU temperature vs the NVML slowdown threshold the probe read,
  minus `min_margin_c`; HBM temperature vs the NVML memory max-operating threshold, minus
  `min_memory_margin_c`. A GPU whose threshold is unknown is `error`;
- sibling delta: a GPU much hotter under load than the median of its siblings (same load, same
  coolant loop) points at its cold plate / flow, even when it is below the slowdown margin;
- thermal throttling during the load (NVML clock-event reasons sw/hw thermal slowdown) -> fail;
- coolant: outlet - inlet delta-T, inlet maximum, and the leak sensor (asserted -> fail). Sensor
  names come from the cluster (NodeContext.settings["sensors"] = {"inlet", "outlet", "leak"}),
  params as the fallback; a configured sensor missing from the output is `error`.
Missing samples (no sampling output, too few samples, a GPU absent from the samples) -> error.

The sensor outputs are read by checks/thermal/bmc_sensors.py (parsers `ipmitool_sdr`, `redfish_thermal`).
The judging steps of evaluate() are in checks/thermal/judge.py.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, ClassVar

from checks.core.base import (
    ERROR,
    Check,
    Command,
    CommandOutput,
    EvidenceError,
    Measurement,
    NodeContext,
    ParamsError,
    Series,
    Verdict,
    register,
)
from checks.core.evidence import COUNT, Rule
from checks.core.presentation import (
    COLD_PLATE,
    KeyMetric,
    OutlierMetric,
    PhaseBars,
    Presentation,
    PromMetric,
    Remedy,
    TrendRule,
    highest,
)
from checks.core.sampling import SamplingDoc, load_sampling, probe_gpu
from checks.thermal.bmc_sensors import parse_ipmitool_sdr, parse_redfish_thermal
from checks.thermal.judge import (
    DlcThresholds,
    coolant_findings,
    margin_findings,
    no_samples_reason,
    pass_reason,
    sample_findings,
    sibling_findings,
    throttle_findings,
)

IDLE, LOAD, SENSORS = "probe idle", "probe load", "sensors"
# The idle command's label when no load phase was asked for (load_s=0): parse then knows a missing
# load output is by design, not lost evidence.
IDLE_ONLY = "probe idle-only"
PHASES = {IDLE: "idle", LOAD: "load"}
# Clock-event reasons that mean "too hot" (sampling.py names the NVML bits). hw_slowdown alone
# may be thermal or a power brake: recorded and warned, not failed, here.
THERMAL_REASONS = ("sw_thermal_slowdown", "hw_thermal_slowdown")


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


# --- the check -----------------------------------------------------------------------------------


@dataclass
class DlcParams:
    idle_s: int = 10  # idle sampling window
    # Load long enough for the cold plate and coolant loop to settle; the steady state is the last
    # half of the run. 120 s is a conservative default; tune per site (fast test run: 3 s).
    # 0 = idle temperatures only (quick sweeps on a cluster in service: no load is started).
    load_s: int = 120
    sample_interval_s: float = 1.0
    # "" (none), "ipmitool" (`ipmitool sdr`) or "redfish" (curl of redfish_url from the node).
    sensor_source: str = ""
    redfish_url: str = ""  # e.g. https://BMC/redfish/v1/Chassis/1/Thermal
    timeout_s: int = 60  # per command, on top of its own sampling time

    def __post_init__(self) -> None:
        for name in ("idle_s", "timeout_s"):
            if getattr(self, name) < 1:
                raise ParamsError(f"param {name!r}: must be >= 1")
        if self.load_s < 0:
            raise ParamsError("param 'load_s': must be >= 0 (0 = idle only)")
        if self.sample_interval_s <= 0:
            raise ParamsError("param 'sample_interval_s': must be > 0")
        if self.sensor_source not in ("", "ipmitool", "redfish"):
            raise ParamsError(f"param 'sensor_source': '', 'ipmitool' or 'redfish', got {self.sensor_source!r}")
        if self.sensor_source == "redfish" and not re.match(r"^https?://[^\s]+$", self.redfish_url):
            raise ParamsError("param 'redfish_url': an http(s) URL is required with sensor_source='redfish'")


def sensor_names(thresholds: DlcThresholds, node: NodeContext) -> dict[str, str]:
    configured = node.settings.get("sensors") if isinstance(node.settings, dict) else None
    configured = configured if isinstance(configured, dict) else {}
    fallback = {"inlet": thresholds.inlet_sensor, "outlet": thresholds.outlet_sensor, "leak": thresholds.leak_sensor}
    return {role: str(configured.get(role) or fallback[role]) for role in fallback}


# How the certificate names these measurements (checks/core/presentation.py measurement_labels).
DLC_LABELS = (
    ("temp_gpu_steady", "GPU temperature, steady"),
    ("temp_memory_steady", "Memory (HBM) temperature, steady"),
    ("coolant_delta_t", "Coolant ΔT (outlet − inlet)"),
    ("temperature", "Coolant temperature (BMC sensor)"),
    ("sensor", "Leak sensor state"),
    ("thermal_throttle_samples", "Samples with thermal throttling"),
)


@register
class DlcTemperature(Check):
    key: ClassVar[str] = "dlc_temperature"
    name: ClassVar[str] = "DLC temperature"
    description: ClassVar[str] = (
        "Idle and under-load temperatures vs the slowdown threshold, sibling delta, coolant sensors."
    )
    # 5 s of load: the simulated GPUs ramp to steady load in 1.5 s (testbed/sim/fake_nvml.c), and the
    # check judges the last part of the load samples; 3 s left too few steady samples when the
    # machine was busy (a hot GPU judged on its ramp passed). The simulated BMC answers ipmitool.
    simulator_params: ClassVar[dict[str, Any]] = {"idle_s": 2, "load_s": 5, "sensor_source": "ipmitool"}
    Params: ClassVar[type] = DlcParams

    def declared_s(self, params: Any) -> float:
        # The idle and load sampling windows (the overhead covers the sensor reads and the load's start-up).
        return float(params.idle_s + params.load_s)

    Thresholds: ClassVar[type] = DlcThresholds
    presentation: ClassVar[Presentation] = Presentation(
        measurement_labels=DLC_LABELS,
        chart="dlc",
        phase_bars=PhaseBars(
            "temp_gpu_steady", "slowdown_temp", margin="min_margin_c", sibling="max_sibling_delta_c"
        ),
        remedies=(Remedy("thermal", COLD_PLATE),),
        rank=30,
        key_metrics=(
            KeyMetric(
                "temp_gpu", "GPU steady temperature under load", "temp_gpu_steady", "°C",
                better="lower", per_gpu=True, gpu_agg="max", labels=(("phase", "load"),), fleet_default=True,
            ),
            KeyMetric(
                "temp_memory", "Memory steady temperature under load", "temp_memory_steady", "°C",
                better="lower", per_gpu=True, gpu_agg="max", labels=(("phase", "load"),),
            ),
        ),
        trends=(
            TrendRule("temp_gpu_steady", +1, 3.0, False, "GPU temperature rising", "C"),
            TrendRule("temp_memory_steady", +1, 3.0, False, "HBM temperature rising", "C"),
        ),
        prometheus=(
            PromMetric("temp_gpu_steady", "kiln_gpu_temp_celsius", "Steady GPU temperature, C", "phase", None),
            PromMetric(
                "temp_memory_steady", "kiln_gpu_memory_temp_celsius", "Steady HBM temperature, C", "phase", None
            ),
        ),
        # temp_gpu_steady per GPU, phase "load" = steady state under load.
        outliers=(
            OutlierMetric(
                "temp_load", "hottest GPU under load", ("temp_gpu_steady",), "C", False,
                highest("temp_gpu_steady", phase="load"),
            ),
        ),
    )  # fmt: skip
    # Sample tallies are counts; a discrete BMC sensor's raw reading is its state bits, at most two
    # bytes (IPMI 2.0 Get Sensor Reading, discrete state bytes 3-4): 0x0000..0xffff.
    evidence: ClassVar[dict[str, Rule]] = {
        **dict.fromkeys(("samples", "gpu_samples", "thermal_throttle_samples", "hw_slowdown_samples"), COUNT),
        "sensor": Rule("a discrete sensor reading", low=0, high=0xFFFF, integer=True),
    }

    def commands(self, params: Any, node: NodeContext) -> list[Command]:
        from checks.probe import probe_source  # lazy: reading the script is I/O, not needed to parse

        p: DlcParams = params
        source = probe_source()
        interval = f"{p.sample_interval_s:g}"
        cmds = [
            Command(
                argv=("python3", "-", "--sample", interval, "--duration", str(p.idle_s)),
                stdin=source,
                timeout=float(p.idle_s + p.timeout_s),
                label=IDLE if p.load_s > 0 else IDLE_ONLY,
                read_only=True,  # samples NVML while the GPUs idle; starts nothing
            ),
        ]
        if p.load_s > 0:
            cmds.append(
                Command(
                    argv=("python3", "-", "--sample", interval, "--", "gpu_burn", "-tc", str(p.load_s)),
                    stdin=source,
                    timeout=float(p.load_s + p.timeout_s),
                    label=LOAD,
                )
            )
        if p.sensor_source == "ipmitool":
            cmds.append(Command(argv=("ipmitool", "sdr"), timeout=float(p.timeout_s), label=SENSORS, read_only=True))
        elif p.sensor_source == "redfish":
            argv = ("curl", "-sfk", "--netrc-optional", "--max-time", str(p.timeout_s), p.redfish_url)
            # An HTTP GET of the BMC's thermal resource.
            cmds.append(Command(argv=argv, timeout=float(p.timeout_s + 5), label=SENSORS + " redfish", read_only=True))
        return cmds

    def describe_failure(self, output: CommandOutput) -> str:
        # The sampler exits with the child's code and keeps the child's stderr in its JSON.
        try:
            doc = json.loads(output.stdout)
        except (ValueError, RecursionError):
            doc = None
        if isinstance(doc, dict):
            child = doc.get("child")
            if isinstance(child, dict) and child.get("exit_code"):
                lines = [ln for ln in str(child.get("stderr") or child.get("stdout") or "").splitlines() if ln.strip()]
                tail = lines[-1].strip()[:200] if lines else "no output"
                return f"load command {' '.join(child.get('argv') or [])} exited {child['exit_code']}: {tail}"
            if isinstance(doc.get("errors"), list) and doc["errors"]:
                return "probe could not sample the GPUs: " + "; ".join(str(e) for e in doc["errors"][:3])
        return super().describe_failure(output)

    # -- parse --------------------------------------------------------------------------------

    def parse(self, outputs: list[CommandOutput]) -> list[Measurement]:
        by_label = {o.command.label: o for o in outputs}
        out: list[Measurement] = []
        idle_only = IDLE_ONLY in by_label  # load_s=0: no load was asked for
        if idle_only:
            by_label[IDLE] = by_label.pop(IDLE_ONLY)
            out.append(Measurement(name="phases", text="idle"))
        for label, phase in PHASES.items():
            if label not in by_label:
                if idle_only and phase == "load":
                    continue
                raise EvidenceError(f"no {phase} sampling output")
            doc = self._sampling(by_label[label], phase)
            out.append(Measurement(name="samples", value=float(doc.sample_count), labels={"phase": phase}))
            for error in doc.errors:
                out.append(Measurement(name="probe_error", text=error, labels={"phase": phase}))
            for i in doc.gpu_indices():
                out += self._gpu_phase(doc, i, phase)
        for label, o in by_label.items():
            if not label.startswith(SENSORS):
                continue
            redfish = "redfish" in label
            parsed = parse_redfish_thermal(o.stdout) if redfish else parse_ipmitool_sdr(o.stdout)
            for m in parsed.measurements:
                m.labels.setdefault("source", "redfish" if redfish else "ipmitool")
            # Marks that sensors were read, even when the output held none of ours.
            out.append(Measurement(name="sensor_output", text=label))
            out += parsed.measurements
        return out

    @staticmethod
    def _sampling(output: CommandOutput, phase: str) -> SamplingDoc:
        try:
            return load_sampling([output])
        except EvidenceError as exc:
            raise EvidenceError(f"{phase} sampling: {exc}") from None

    def _gpu_phase(self, doc: SamplingDoc, i: int, phase: str) -> list[Measurement]:
        lab = {"phase": phase}
        out: list[Measurement] = []
        for field in ("temp_gpu", "temp_memory"):
            # Idle: the whole window. Load: the last half of the run, so the ramp from idle (cold
            # plate and loop settling) never dilutes the steady state, in short test runs too.
            steady = doc.stats(i, field).mean if phase == "idle" else _load_steady(doc, i, field)
            whole = doc.stats(i, field)
            out += [
                Measurement(name=f"{field}_steady", value=steady, unit="C", gpu=i, labels=dict(lab)),
                Measurement(name=f"{field}_max", value=whole.max, unit="C", gpu=i, labels=dict(lab)),
            ]
        readable = doc.stats(i, "temp_gpu").count
        out.append(Measurement(name="gpu_samples", value=float(readable), gpu=i, labels=dict(lab)))
        thermal = sum(e.samples for e in doc.throttle_events(THERMAL_REASONS) if e.gpu == i)
        out.append(Measurement(name="thermal_throttle_samples", value=float(thermal), gpu=i, labels=dict(lab)))
        hw = sum(e.samples for e in doc.throttle_events(("hw_slowdown",)) if e.gpu == i)
        out.append(Measurement(name="hw_slowdown_samples", value=float(hw), gpu=i, labels=dict(lab)))
        if phase == "idle":
            temps = probe_gpu(doc.before, i).get("temperature")
            temps = temps if isinstance(temps, dict) else {}
            for name, key in (("slowdown_temp", "slowdown"), ("memory_max_operating_temp", "memory_max_operating")):
                value = _number(temps.get(key))
                m = Measurement(name=name, value=value, unit="C", gpu=i)
                if value is None:
                    m.labels["missing"] = "not reported by the probe"
                out.append(m)
        return out

    # -- evaluate -----------------------------------------------------------------------------

    def evaluate(self, measurements: list[Measurement], thresholds: Any, node: NodeContext) -> Verdict:
        t: DlcThresholds = thresholds
        idx = {(m.name, m.gpu, m.labels.get("phase", "")): m for m in measurements}
        gpus = sorted({m.gpu for m in measurements if m.gpu is not None and m.name == "temp_gpu_steady"})
        if not gpus:
            return Verdict(ERROR, no_samples_reason(measurements))
        load_gpus = sorted(i for i in gpus if ("temp_gpu_steady", i, "load") in idx)
        idle_only = any(m.name == "phases" and m.text == "idle" for m in measurements)
        phases = ("idle",) if idle_only else ("idle", "load")
        findings = sample_findings(idx, t, gpus, phases)
        for i in gpus:
            findings += margin_findings(idx, t, i)
        findings += sibling_findings(idx, t, load_gpus)
        findings += throttle_findings(idx, t, load_gpus)
        if any(m.name == "sensor_output" for m in measurements):
            findings += coolant_findings(measurements, t, sensor_names(t, node))
        return Verdict.from_findings(findings, pass_reason=pass_reason(idx, gpus, load_gpus, idle_only))

    def series(self, outputs: list[CommandOutput]) -> list[Series]:
        out: list[Series] = []
        for o in outputs:
            phase = PHASES.get(o.command.label)
            if phase is None:
                continue
            try:
                doc = load_sampling([o])
            except EvidenceError:
                continue
            for s in doc.series(("temp_gpu", "temp_memory")):
                s.labels["phase"] = phase
                out.append(s)
        return out


def _load_steady(doc: SamplingDoc, gpu: int, field: str) -> float | None:
    """Mean of `field` over the second half of the load. The sampler takes its last sample when it
    sees the child gone (probe.py wakes early on exit), so that one is left out: the load is over."""
    points = doc.values(gpu, field)
    if doc.child is not None and len(points) > 2:
        points = points[:-1]
    if not points:
        return None
    start = points[0][0] + (points[-1][0] - points[0][0]) / 2.0
    numbers = [float(v) for t, v in points if t >= start and v is not None]
    return sum(numbers) / len(numbers) if numbers else None
