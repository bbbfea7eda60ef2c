"""Shared reading of the probe's sampling document (checks/probe/SCHEMA.md, "Sampling mode").

Checks that judge telemetry over time (burn-in, DLC temperatures) load the document with
`load_sampling(outputs)` and then ask it for what they judge:

    doc = load_sampling(outputs)
    doc.gpu_indices()                                  # GPUs seen in any sample
    doc.values(3, "temp_gpu")                          # [(t, value-or-None), ...]
    doc.series()                                       # per GPU Series of SERIES_FIELDS, for storage
    doc.throttle_events(JUDGED_CLOCK_REASONS)          # contiguous runs of a reason, per GPU
    doc.steady_stats(3, "temp_gpu")                    # min/max/mean after the warm-up
    doc.ecc_increase(3, "ecc_volatile_uncorrected")    # new errors during the window

Anything that makes the document untrustworthy (not JSON, wrong schema/mode, malformed samples)
raises EvidenceError. A null reading stays None: no evidence, never zero.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from checks import evidence
from checks.base import CommandOutput, EvidenceError, Series

SAMPLING_SCHEMA = 1
SAMPLING_LABEL = "probe.py --sample"

# Per-sample GPU fields (SCHEMA.md), with units.
SAMPLE_FIELDS: dict[str, str] = {
    "temp_gpu": "C",
    "temp_memory": "C",
    "power_w": "W",
    "sm_clock_mhz": "MHz",
    "clock_event_reasons": "",
    "ecc_volatile_uncorrected": "",
    "ecc_volatile_corrected": "",
}
# What each sample field can be (checks/evidence.py): one impossible reading makes the whole
# document `error`, since a mean, a steady-state window or an increase would hide it.
SAMPLE_RULES: dict[str, evidence.Rule] = {
    # NVML reports temperatures as unsigned integers (nvmlDeviceGetTemperature: unsigned int *temp);
    # the upper bound is the evidence layer's for every temperature.
    "temp_gpu": evidence.Rule("an NVML temperature", low=0, high=evidence.UNIT_RULES["C"].high),
    "temp_memory": evidence.Rule("an NVML temperature", low=0, high=evidence.UNIT_RULES["C"].high),
    "power_w": evidence.UNIT_RULES["W"],
    "sm_clock_mhz": evidence.UNIT_RULES["MHz"],
    # Bit masks and error counters: non-negative integers.
    "clock_event_reasons": evidence.COUNT,
    "ecc_volatile_uncorrected": evidence.COUNT,
    "ecc_volatile_corrected": evidence.COUNT,
}
# Counters of the before/after probe documents that increases are computed from.
_PROBE_COUNTERS = (
    ("ecc_errors", "volatile", "uncorrected"),
    ("ecc_errors", "volatile", "corrected"),
    ("remapped_rows", "correctable"),
    ("remapped_rows", "uncorrectable"),
)
# The curves worth storing and drawing.
SERIES_FIELDS: tuple[str, ...] = ("temp_gpu", "temp_memory", "power_w", "sm_clock_mhz")

# nvmlClocksEventReason* bits (NVML API reference), names as in the probe schema.
CLOCK_EVENT_REASON_BITS: dict[str, int] = {
    "gpu_idle": 0x001,
    "applications_clocks_setting": 0x002,
    "sw_power_cap": 0x004,
    "hw_slowdown": 0x008,
    "sync_boost": 0x010,
    "sw_thermal_slowdown": 0x020,
    "hw_thermal_slowdown": 0x040,
    "hw_power_brake_slowdown": 0x080,
    "display_clock_setting": 0x100,
}
# Reasons that mean the GPU was held back by heat or by the board/PSU, not by its own power
# policy: NVML docs describe HW slowdown as "HW slowdown (reducing the core clocks by a factor of
# 2 or more) is engaged" (temperature, power brake or external assertion), and thermal slowdowns
# as the GPU or memory being too hot. sw_power_cap is left out on purpose: a GPU at full load is
# expected to sit at its power limit (NVML: "SW Power Scaling algorithm is reducing the clocks
# below requested clocks"), that is not a fault.
JUDGED_CLOCK_REASONS: tuple[str, ...] = (
    "hw_slowdown",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
)


@dataclass
class ChildRun:
    """The wrapped command (e.g. gpu_burn) as the probe ran it."""

    argv: list[str]
    exit_code: int | None
    stdout: str
    stderr: str
    duration_s: float | None


@dataclass
class WindowStats:
    """Statistics of one field over a time window; `count` readable samples of `total`."""

    count: int
    total: int
    min: float | None
    max: float | None
    mean: float | None
    start_t: float | None
    end_t: float | None


@dataclass
class ThrottleEvent:
    """A run of consecutive samples with `reason` active on `gpu`, from start_t to end_t (s)."""

    gpu: int
    reason: str
    start_t: float
    end_t: float
    samples: int

    def describe(self) -> str:
        span = f"at t={self.start_t:g}s" if self.samples == 1 else f"t={self.start_t:g}-{self.end_t:g}s"
        return f"{self.reason} {span} ({self.samples} sample{'s' if self.samples != 1 else ''})"


@dataclass
class SamplingDoc:
    """A validated sampling document."""

    raw: dict[str, Any]
    interval_s: float | None
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    # (t, {gpu index: {field: value-or-None}}) in time order.
    samples: list[tuple[float, dict[int, dict[str, Any]]]]
    child: ChildRun | None
    errors: list[str] = field(default_factory=list)

    # --- shape -----------------------------------------------------------------------------

    def gpu_indices(self) -> list[int]:
        return sorted({i for _, gpus in self.samples for i in gpus})

    def span_s(self) -> float:
        return self.samples[-1][0] - self.samples[0][0] if self.samples else 0.0

    # --- raw values ----------------------------------------------------------------------------

    def values(self, gpu: int, name: str) -> list[tuple[float, float | None]]:
        """(t, value) of one field of one GPU, in every sample that lists the GPU."""
        if name not in SAMPLE_FIELDS:
            raise KeyError(f"unknown sample field {name!r}; known: {', '.join(SAMPLE_FIELDS)}")
        return [(t, gpus[gpu].get(name)) for t, gpus in self.samples if gpu in gpus]

    def series(self, fields: tuple[str, ...] = SERIES_FIELDS) -> list[Series]:
        """One Series per (GPU, field), x = seconds since sampling started."""
        out: list[Series] = []
        for gpu in self.gpu_indices():
            for name in fields:
                points = self.values(gpu, name)
                out.append(
                    Series(
                        name=name,
                        unit=SAMPLE_FIELDS[name],
                        x=[t for t, _ in points],
                        y=[None if v is None else float(v) for _, v in points],
                        gpu=gpu,
                    )
                )
        return out

    # --- judgements' building blocks -----------------------------------------------------------

    def stats(self, gpu: int, name: str, *, since_t: float | None = None) -> WindowStats:
        points = [(t, v) for t, v in self.values(gpu, name) if since_t is None or t >= since_t]
        numbers = [float(v) for _, v in points if v is not None]
        return WindowStats(
            count=len(numbers),
            total=len(points),
            min=min(numbers) if numbers else None,
            max=max(numbers) if numbers else None,
            mean=sum(numbers) / len(numbers) if numbers else None,
            start_t=points[0][0] if points else None,
            end_t=points[-1][0] if points else None,
        )

    def steady_start(self, *, warmup_s: float | None = None) -> float:
        """Where the steady-state window starts: `warmup_s` after the first sample, by default a
        quarter of the sampled span capped at 10 minutes. A GPU under a constant load reaches
        thermal equilibrium within minutes (conservative default; tune per site, e.g. per cooling
        loop); short test runs use a quarter of their span."""
        if not self.samples:
            return 0.0
        first = self.samples[0][0]
        if warmup_s is None:
            warmup_s = min(600.0, self.span_s() / 4.0)
        return first + warmup_s

    def steady_stats(self, gpu: int, name: str, *, warmup_s: float | None = None) -> WindowStats:
        """Stats of `name` on `gpu` over the steady-state window (see steady_start)."""
        return self.stats(gpu, name, since_t=self.steady_start(warmup_s=warmup_s))

    def throttle_events(self, reasons: tuple[str, ...] = JUDGED_CLOCK_REASONS) -> list[ThrottleEvent]:
        """Runs of consecutive samples in which a reason bit was set, per GPU and reason.
        A null reading ends a run (it is unknown, not "no throttle")."""
        events: list[ThrottleEvent] = []
        for gpu in self.gpu_indices():
            for reason in reasons:
                bit = CLOCK_EVENT_REASON_BITS[reason]
                current: ThrottleEvent | None = None
                for t, mask in self.values(gpu, "clock_event_reasons"):
                    active = mask is not None and int(mask) & bit
                    if active and current is None:
                        current = ThrottleEvent(gpu=gpu, reason=reason, start_t=t, end_t=t, samples=1)
                        events.append(current)
                    elif active and current is not None:
                        current.end_t = t
                        current.samples += 1
                    else:
                        current = None
        return sorted(events, key=lambda e: (e.gpu, e.start_t, e.reason))

    def ecc_increase(self, gpu: int, name: str) -> int | None:
        """New errors of an ECC counter (`ecc_volatile_uncorrected`/`_corrected`) over the window:
        the probe documents before/after and every sample together. None when no reading at all."""
        readings = [int(v) for _, v in self.values(gpu, name) if v is not None]
        kind = "uncorrected" if name.endswith("uncorrected") else "corrected"
        for doc in (self.before, self.after):
            value = _count(probe_gpu(doc, gpu), "ecc_errors", "volatile", kind)
            if value is not None:
                readings.append(value)
        if not readings:
            return None
        first = _count(probe_gpu(self.before, gpu), "ecc_errors", "volatile", kind)
        start = first if first is not None else readings[0]
        # Volatile counters only grow until a driver reload; take the highest reading seen.
        return max(0, max(readings) - start)


def probe_gpu(doc: dict[str, Any] | None, index: int) -> dict[str, Any]:
    """GPU `index` of a full probe document (the sampling doc's `before`/`after`); {} if absent."""
    if not isinstance(doc, dict):
        return {}
    for gpu in doc.get("gpus") or []:
        if isinstance(gpu, dict) and gpu.get("index") == index:
            return gpu
    return {}


def _count(node: Any, *path: str) -> int | None:
    """An integer at `path` in nested dicts; None when absent, null or not an integer."""
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, int) and not isinstance(node, bool) else None


def parse_sampling(text: str) -> SamplingDoc:
    """Validate a sampling document's text; EvidenceError names what is wrong."""
    raw = _sampling_object(text)
    errors = raw.get("errors") or []
    if not isinstance(errors, list):
        raise EvidenceError(f"sampling 'errors' is {type(errors).__name__}, expected a list")
    samples_raw = raw.get("samples")
    if not isinstance(samples_raw, list):
        raise EvidenceError("sampling document has no 'samples' list")
    samples = [_sample(pos, sample) for pos, sample in enumerate(samples_raw)]
    samples.sort(key=lambda s: s[0])
    child = _child_run(raw.get("child"))
    for when in ("before", "after"):
        _check_probe_counters(raw.get(when), when)
    interval = raw.get("interval_s")
    return SamplingDoc(
        raw=raw,
        interval_s=float(interval) if _is_number(interval) else None,
        before=raw.get("before") if isinstance(raw.get("before"), dict) else None,
        after=raw.get("after") if isinstance(raw.get("after"), dict) else None,
        samples=samples,
        child=child,
        errors=[str(e) for e in errors],
    )


def _sampling_object(text: str) -> dict[str, Any]:
    """The document's JSON object, once its schema and mode say it is a sampling document."""
    text = text.strip()
    if not text:
        raise EvidenceError("sampling probe printed nothing on stdout")
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise EvidenceError(
            f"sampling probe output is not JSON ({exc.msg} at line {exc.lineno}): {text[:80]!r}"
        ) from None
    if not isinstance(raw, dict):
        raise EvidenceError(f"sampling probe output is JSON but not an object: {type(raw).__name__}")
    if raw.get("schema") != SAMPLING_SCHEMA or raw.get("mode") != "sample":
        raise EvidenceError(
            f"not a sampling document (schema {raw.get('schema')!r}, mode {raw.get('mode')!r});"
            f" expected schema {SAMPLING_SCHEMA}, mode 'sample' (probe and portal out of step?)"
        )
    return raw


def _sample(pos: int, sample: Any) -> tuple[float, dict[int, dict[str, Any]]]:
    """Sample #pos: its time and {gpu index: {field: value-or-None}}."""
    t = sample.get("t") if isinstance(sample, dict) else None
    if not _is_number(t):
        raise EvidenceError(f"sample #{pos} has no numeric 't'")
    gpus_raw = sample.get("gpus")
    if not isinstance(gpus_raw, list):
        raise EvidenceError(f"sample #{pos} has no 'gpus' list")
    gpus: dict[int, dict[str, Any]] = {}
    for entry in gpus_raw:
        index = entry.get("index") if isinstance(entry, dict) else None
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise EvidenceError(f"sample #{pos} has a GPU entry without a valid 'index'")
        gpus[index] = _gpu_values(pos, index, entry)
    return float(t), gpus


def _gpu_values(pos: int, index: int, entry: dict[str, Any]) -> dict[str, Any]:
    """One GPU's SAMPLE_FIELDS in sample #pos: numbers within their rules, or None."""
    values: dict[str, Any] = {}
    for name in SAMPLE_FIELDS:
        value = entry.get(name)
        if value is not None and not _is_number(value):
            raise EvidenceError(f"sample #{pos} GPU {index}: {name} is {value!r}, expected a number")
        rule = SAMPLE_RULES.get(name)
        if value is not None and rule is not None and (why := rule.problem(value)):
            raise EvidenceError(f"{evidence.PREFIX}: sample #{pos} GPU {index} {name} = {value!r} ({why})")
        values[name] = value
    return values


def _child_run(child_raw: Any) -> ChildRun | None:
    """The wrapped command's record (null when the probe ran none)."""
    if child_raw is None:
        return None
    if not isinstance(child_raw, dict):
        raise EvidenceError(f"sampling 'child' is {type(child_raw).__name__}, expected an object or null")
    code = child_raw.get("exit_code")
    duration = child_raw.get("duration_s")
    return ChildRun(
        argv=[str(a) for a in child_raw.get("argv") or []],
        exit_code=code if isinstance(code, int) and not isinstance(code, bool) else None,
        stdout=str(child_raw.get("stdout") or ""),
        stderr=str(child_raw.get("stderr") or ""),
        duration_s=float(duration) if _is_number(duration) else None,
    )


def load_sampling(outputs: list[CommandOutput]) -> SamplingDoc:
    """The sampling document among a check's outputs (the one labelled SAMPLING_LABEL, or the only one)."""
    labelled = [o for o in outputs if o.command.label == SAMPLING_LABEL]
    if len(labelled) == 1:
        out = labelled[0]
    elif len(outputs) == 1:
        out = outputs[0]
    else:
        raise EvidenceError(f"expected one sampling probe output, got {len(outputs)}")
    if not out.stdout.strip():
        lines = [line.strip() for line in out.stderr.splitlines() if line.strip()]
        hint = f" (stderr: {lines[-1][:200]})" if lines else ""
        raise EvidenceError("sampling probe printed nothing on stdout" + hint)
    return parse_sampling(out.stdout)


def _check_probe_counters(doc: Any, when: str) -> None:
    """The before/after probe's ECC and row-remap counters feed increases (max(0, after - before)):
    a negative or fractional one would read as no increase, so it is impossible evidence."""
    gpus = doc.get("gpus") if isinstance(doc, dict) else None
    seen: set[int] = set()
    for pos, gpu in enumerate(gpus if isinstance(gpus, list) else []):
        index = gpu.get("index") if isinstance(gpu, dict) else None
        if not isinstance(index, int) or isinstance(index, bool) or index < 0 or index in seen:
            raise EvidenceError(f"the '{when}' probe: GPU entry #{pos} has no valid, unique 'index' ({index!r})")
        seen.add(index)
        for path in _PROBE_COUNTERS:
            node: Any = gpu
            for key in path:
                node = node.get(key) if isinstance(node, dict) else None
            if node is None or isinstance(node, bool):
                continue
            why = evidence.COUNT.problem(node) if _is_number(node) else "not a finite number"
            if why:
                where = f"GPU {gpu.get('index')} {'.'.join(path)}"
                raise EvidenceError(f"{evidence.PREFIX}: the '{when}' probe, {where} = {node!r} ({why})")


def _is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
