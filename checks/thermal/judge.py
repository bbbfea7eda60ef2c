"""dlc_temperature's judging steps (checks/thermal/check.py's evaluate): sample counts, margins to the
NVML thresholds, sibling spread, thermal throttling, coolant sensors and the pass reason.

`idx` is evaluate's index of the measurements: (name, gpu, phase) -> Measurement.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from checks.core.base import ERROR, FAIL, WARN, Finding, Measurement, ParamsError


# The thresholds live beside the steps that judge them: thermal.py imports both, nothing imports back.
@dataclass
class DlcThresholds:
    # Degrees C to keep between the GPU core and NVML's slowdown threshold (H100 SXM: 87 C, read
    # by the probe per GPU) at idle and in the steady state under load. NVIDIA publishes no margin;
    # 10 C is a conservative default; tune per site.
    min_margin_c: float | None = 10.0
    # Degrees C between HBM and NVML's memory max-operating threshold (H100: 95 C, read by the
    # probe). Conservative default; tune per site.
    min_memory_margin_c: float | None = 5.0
    # A GPU this much hotter than its siblings' median under the same load: cold plate / flow
    # problem (DLC GPUs on one loop normally sit within a few C). Conservative default; tune.
    max_sibling_delta_c: float | None = 8.0
    # Any sw/hw thermal slowdown sample during the load fails.
    allow_thermal_throttle: bool = False
    # Coolant outlet - inlet under load. DLC loops are typically designed for a ~10 C rise;
    # 15 C is a conservative default; tune to the CDU design.
    max_coolant_delta_t_c: float | None = 15.0
    # ASHRAE TC 9.9 liquid cooling classes: W45 allows facility supply water up to 45 C (W+ above);
    # a secondary loop inlet above that is out of any standard class. Tune to the site's class.
    max_coolant_inlet_c: float | None = 45.0
    # Fewer samples per phase is no evidence.
    min_samples: int = 2
    # Which BMC sensors the coolant rules judge, when the cluster's settings["sensors"] does not
    # name them (names are vendor specific). Here, not in Params, because evaluate() judges with
    # thresholds only; a sensor output is judged whenever the plan asked for one.
    inlet_sensor: str = "Coolant Inlet"
    outlet_sensor: str = "Coolant Outlet"
    leak_sensor: str = "Leak Detect"

    def __post_init__(self) -> None:
        if self.min_samples < 1:
            raise ParamsError("threshold 'min_samples': must be >= 1")
        for name in (
            "min_margin_c",
            "min_memory_margin_c",
            "max_sibling_delta_c",
            "max_coolant_delta_t_c",
            "max_coolant_inlet_c",
        ):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ParamsError(f"threshold {name!r}: must be >= 0 or None")


def no_samples_reason(measurements: list[Measurement]) -> str:
    errors = [m.text for m in measurements if m.name == "probe_error"]
    why = f" ({'; '.join(errors[:2])})" if errors else ""
    return f"no GPU temperature samples{why}"


def sample_findings(idx: dict, t: DlcThresholds, gpus: list[int], phases: tuple[str, ...]) -> list[Finding]:
    """Too few samples in a phase, or a GPU absent from one: no evidence."""
    findings: list[Finding] = []
    for phase in phases:
        count = idx.get(("samples", None, phase))
        if count is None or (count.value or 0) < t.min_samples:
            n = int(count.value or 0) if count else 0
            findings.append(Finding(ERROR, f"only {n} {phase} samples (need {t.min_samples})"))
    for i in gpus:
        for phase in phases:
            if (("temp_gpu_steady", i, phase)) not in idx:
                findings.append(Finding(ERROR, f"GPU {i}: no {phase} samples"))
    return findings


def throttle_findings(idx: dict, t: DlcThresholds, load_gpus: list[int]) -> list[Finding]:
    """Thermal slowdown under load fails (unless allowed); a HW slowdown alone only warns."""
    findings: list[Finding] = []
    for i in load_gpus:
        throttle = idx.get(("thermal_throttle_samples", i, "load"))
        if throttle and throttle.value and not t.allow_thermal_throttle:
            throttle.threshold, throttle.ok = "== 0", False
            findings.append(Finding(FAIL, f"GPU {i}: thermal slowdown in {int(throttle.value)} samples under load"))
        elif throttle:
            throttle.threshold, throttle.ok = "== 0", not throttle.value
        hw = idx.get(("hw_slowdown_samples", i, "load"))
        if hw and hw.value and not (throttle and throttle.value):
            what = "HW slowdown (thermal or power brake)"
            findings.append(Finding(WARN, f"GPU {i}: {what} in {int(hw.value)} samples under load"))
    return findings


def _hottest(idx: dict, gpus: list[int], phase: str) -> float:
    return max(
        (idx[("temp_gpu_steady", i, phase)].value or 0.0 for i in gpus if ("temp_gpu_steady", i, phase) in idx),
        default=0.0,
    )


def pass_reason(idx: dict, gpus: list[int], load_gpus: list[int], idle_only: bool) -> str:
    if idle_only:
        return f"{len(gpus)} GPUs idle (no load run): hottest {_hottest(idx, gpus, 'idle'):.0f} C, margins kept"
    return f"{len(gpus)} GPUs: hottest {_hottest(idx, load_gpus, 'load'):.0f} C under load, no thermal slowdown"


def margin_findings(idx: dict, t: DlcThresholds, i: int) -> list[Finding]:
    findings: list[Finding] = []
    for kind, limit_name, margin, label in (
        ("gpu", "slowdown_temp", t.min_margin_c, "slowdown"),
        ("memory", "memory_max_operating_temp", t.min_memory_margin_c, "memory max operating"),
    ):
        if margin is None:
            continue
        limit = idx.get((limit_name, i, ""))
        if limit is None or limit.value is None:
            findings.append(Finding(ERROR, f"GPU {i}: {label} threshold unknown; cannot judge the margin"))
            continue
        ceiling = limit.value - margin
        for phase in ("idle", "load"):
            m = idx.get((f"temp_{kind}_steady", i, phase))
            if m is None:
                continue
            if m.value is None:
                what = "GPU" if kind == "gpu" else "memory"
                findings.append(Finding(ERROR, f"GPU {i}: no {what} temperature readings ({phase})"))
                continue
            m.threshold, m.ok = f"<= {ceiling:g}", m.value <= ceiling
            if not m.ok:
                what = "" if kind == "gpu" else "memory "
                when = "under load" if phase == "load" else "at idle"
                findings.append(
                    Finding(
                        FAIL,
                        f"GPU {i}: {what}{m.value:.0f} C {when}, within {limit.value - m.value:.0f} C of its "
                        f"{label} threshold ({limit.value:.0f} C; margin {margin:g} C required)",
                    )
                )
    return findings


def sibling_findings(idx: dict, t: DlcThresholds, gpus: list[int]) -> list[Finding]:
    if t.max_sibling_delta_c is None or len(gpus) < 2:
        return []
    temps = {i: idx[("temp_gpu_steady", i, "load")].value for i in gpus}
    findings: list[Finding] = []
    for i, value in temps.items():
        others = [v for j, v in temps.items() if j != i and v is not None]
        if value is None or not others:
            continue
        median = statistics.median(others)
        delta = value - median
        if delta > t.max_sibling_delta_c:
            findings.append(
                Finding(
                    FAIL,
                    f"GPU {i}: {value:.0f} C under load, {delta:.0f} C above its siblings' median "
                    f"({median:.0f} C): check cold plate / coolant flow",
                )
            )
    return findings


def coolant_findings(measurements: list[Measurement], t: DlcThresholds, names: dict[str, str]) -> list[Finding]:
    temps = {m.labels.get("sensor"): m for m in measurements if m.name == "temperature"}
    states = {m.labels.get("sensor"): m for m in measurements if m.name == "sensor"}
    findings: list[Finding] = []
    inlet, outlet = temps.get(names["inlet"]), temps.get(names["outlet"])
    for role, m in (("inlet", inlet), ("outlet", outlet)):
        if m is None:
            findings.append(Finding(ERROR, f"coolant {role} sensor {names[role]!r} not in the sensor output"))
    if inlet is not None and t.max_coolant_inlet_c is not None and inlet.value is not None:
        inlet.threshold, inlet.ok = f"<= {t.max_coolant_inlet_c:g}", inlet.value <= t.max_coolant_inlet_c
        if not inlet.ok:
            findings.append(Finding(FAIL, f"coolant inlet {inlet.value:.0f} C above {t.max_coolant_inlet_c:g} C"))
    if inlet is not None and outlet is not None and inlet.value is not None and outlet.value is not None:
        delta = outlet.value - inlet.value
        dm = Measurement(name="coolant_delta_t", value=delta, unit="C")
        if t.max_coolant_delta_t_c is not None:
            dm.threshold, dm.ok = f"<= {t.max_coolant_delta_t_c:g}", delta <= t.max_coolant_delta_t_c
            if not dm.ok:
                findings.append(
                    Finding(
                        FAIL,
                        f"coolant delta-T {delta:.0f} C (inlet {inlet.value:.0f} C, outlet {outlet.value:.0f} C) "
                        f"above {t.max_coolant_delta_t_c:g} C: low coolant flow?",
                    )
                )
        measurements.append(dm)
    leak = states.get(names["leak"])
    if leak is None:
        findings.append(Finding(ERROR, f"leak sensor {names['leak']!r} not in the sensor output"))
    elif leak.text == "asserted":
        leak.threshold, leak.ok = "== ok", False
        findings.append(Finding(FAIL, f"leak sensor {names['leak']!r} asserted"))
    elif leak.text != "ok":
        findings.append(Finding(ERROR, f"leak sensor {names['leak']!r}: {leak.text}"))
    else:
        leak.threshold, leak.ok = "== ok", True
    return findings
