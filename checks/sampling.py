"""Shared reading of the probe's sampling document (checks/probe/SCHEMA.md, "Sampling mode").

Checks that judge telemetry over time (burn-in, DLC temperatures) load the document with
`load_sampling(outputs)` and then ask it for what they judge:

    doc = load_sampling(outputs)
    doc.sample_count                                   # samples taken
    doc.gpu_indices()                                  # GPUs seen in any sample
    doc.values(3, "temp_gpu")                          # [(t, value-or-None), ...]
    doc.series()                                       # per GPU Series of SERIES_FIELDS, for storage
    doc.throttle_events(JUDGED_CLOCK_REASONS)          # contiguous runs of a reason, per GPU
    doc.steady_stats(3, "temp_gpu")                    # min/max/mean after the warm-up
    doc.ecc_increase(3, "ecc_volatile_uncorrected")    # new errors during the window

Anything that makes the document untrustworthy (not JSON, wrong schema/mode, malformed samples)
raises EvidenceError. A null reading stays None: no evidence, never zero. Both sampling schemas are
read (2: arrays per GPU, what the probe prints; 1: one object per sample, older probes and stored
outputs) into the same columns (checks/sampling_columns.py), and the document is read once per
command output however many times a check asks (parse, then series).
"""

from __future__ import annotations

import json
from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Any

from checks import evidence
from checks.base import CommandOutput, EvidenceError, Series
from checks.sampling_columns import (
    COLUMNS_SCHEMA,
    ROWS_SCHEMA,
    SAMPLE_FIELDS,
    GpuSamples,
    is_number,
    read_samples,
)

# What the probe prints now; ROWS_SCHEMA (one object per sample) is still read.
SAMPLING_SCHEMA = COLUMNS_SCHEMA
SAMPLING_SCHEMAS = (ROWS_SCHEMA, COLUMNS_SCHEMA)
SAMPLING_LABEL = "probe.py --sample"
_MEMO_KEY = "checks.sampling"

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
    """A validated sampling document, its samples as columns (checks/sampling_columns.py)."""

    schema: int
    interval_s: float | None
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    times: list[float]  # every sample's time, ascending
    gpus: dict[int, GpuSamples]
    child: ChildRun | None
    errors: list[str] = field(default_factory=list)

    # --- shape -----------------------------------------------------------------------------

    @property
    def sample_count(self) -> int:
        return len(self.times)

    def gpu_indices(self) -> list[int]:
        return sorted(self.gpus)

    def span_s(self) -> float:
        return self.times[-1] - self.times[0] if self.times else 0.0

    # --- raw values ----------------------------------------------------------------------------

    def values(self, gpu: int, name: str) -> list[tuple[float, float | None]]:
        """(t, value) of one field of one GPU, in every sample that lists the GPU."""
        if name not in SAMPLE_FIELDS:
            raise KeyError(f"unknown sample field {name!r}; known: {', '.join(SAMPLE_FIELDS)}")
        samples = self.gpus.get(gpu)
        return list(zip(samples.t, samples.values[name], strict=True)) if samples else []

    def series(self, fields: tuple[str, ...] = SERIES_FIELDS) -> list[Series]:
        """One Series per (GPU, field), x = seconds since sampling started. A GPU's series share
        one list of times (read-only: 43,200 points per curve in a 12 h burn-in at 1 Hz)."""
        out: list[Series] = []
        for gpu in self.gpu_indices():
            samples = self.gpus[gpu]
            for name in fields:
                out.append(
                    Series(name=name, unit=SAMPLE_FIELDS[name], x=samples.t, y=_floats(samples.values[name]), gpu=gpu)
                )
        return out

    # --- judgements' building blocks -----------------------------------------------------------

    def stats(self, gpu: int, name: str, *, since_t: float | None = None) -> WindowStats:
        samples = self.gpus.get(gpu)
        if samples is None:
            return WindowStats(count=0, total=0, min=None, max=None, mean=None, start_t=None, end_t=None)
        start = 0 if since_t is None else bisect_left(samples.t, since_t)  # t is ascending
        column = samples.values[name]
        numbers = [v for v in (column[start:] if start else column) if v is not None]
        total = len(column) - start
        return WindowStats(
            count=len(numbers),
            total=total,
            min=float(min(numbers)) if numbers else None,
            max=float(max(numbers)) if numbers else None,
            mean=sum(numbers) / len(numbers) if numbers else None,
            start_t=samples.t[start] if total > 0 else None,
            end_t=samples.t[-1] if total > 0 else None,
        )

    def steady_start(self, *, warmup_s: float | None = None) -> float:
        """Where the steady-state window starts: `warmup_s` after the first sample, by default a
        quarter of the sampled span capped at 10 minutes. A GPU under a constant load reaches
        thermal equilibrium within minutes (conservative default; tune per site, e.g. per cooling
        loop); short test runs use a quarter of their span."""
        if not self.times:
            return 0.0
        if warmup_s is None:
            warmup_s = min(600.0, self.span_s() / 4.0)
        return self.times[0] + warmup_s

    def steady_stats(self, gpu: int, name: str, *, warmup_s: float | None = None) -> WindowStats:
        """Stats of `name` on `gpu` over the steady-state window (see steady_start)."""
        return self.stats(gpu, name, since_t=self.steady_start(warmup_s=warmup_s))

    def throttle_events(self, reasons: tuple[str, ...] = JUDGED_CLOCK_REASONS) -> list[ThrottleEvent]:
        """Runs of consecutive samples in which a reason bit was set, per GPU and reason.
        A null reading ends a run (it is unknown, not "no throttle")."""
        events: list[ThrottleEvent] = []
        for gpu in self.gpu_indices():
            samples = self.gpus[gpu]
            masks = samples.values["clock_event_reasons"]
            seen = 0
            for mask in set(masks):  # the few distinct masks: skips the reasons never set
                seen |= 0 if mask is None else int(mask)
            for reason in reasons:
                bit = CLOCK_EVENT_REASON_BITS[reason]
                if seen & bit:
                    events += _runs(gpu, reason, bit, samples.t, masks)
        return sorted(events, key=lambda e: (e.gpu, e.start_t, e.reason))

    def ecc_increase(self, gpu: int, name: str) -> int | None:
        """New errors of an ECC counter (`ecc_volatile_uncorrected`/`_corrected`) over the window:
        the probe documents before/after and every sample together. None when no reading at all."""
        samples = self.gpus.get(gpu)
        readings = [int(v) for v in samples.values[name] if v is not None] if samples else []
        kind = "uncorrected" if name.endswith("uncorrected") else "corrected"
        first = _count(probe_gpu(self.before, gpu), "ecc_errors", "volatile", kind)
        last = _count(probe_gpu(self.after, gpu), "ecc_errors", "volatile", kind)
        probes = [v for v in (first, last) if v is not None]
        if not readings and not probes:
            return None
        # Volatile counters only grow until a driver reload; take the highest reading seen.
        start = first if first is not None else (readings or probes)[0]
        return max(0, max(readings + probes) - start)


def _floats(values: list[Any]) -> list[float | None]:
    """The readings as floats (None kept). One float object per distinct reading: a curve of whole
    degrees holds a handful of values, not 43,200 new floats (float(x) of a float is x itself)."""
    as_float = {v: None if v is None else float(v) for v in set(values)}
    return list(map(as_float.__getitem__, values))


def _runs(gpu: int, reason: str, bit: int, times: list[float], masks: list[Any]) -> list[ThrottleEvent]:
    """The runs of consecutive samples whose mask has `bit` set."""
    events: list[ThrottleEvent] = []
    current: ThrottleEvent | None = None
    for t, mask in zip(times, masks, strict=True):
        if mask is not None and int(mask) & bit:
            if current is None:
                current = ThrottleEvent(gpu=gpu, reason=reason, start_t=t, end_t=t, samples=1)
                events.append(current)
            else:
                current.end_t = t
                current.samples += 1
        else:
            current = None
    return events


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
    samples = read_samples(raw)
    child = _child_run(raw.get("child"))
    for when in ("before", "after"):
        _check_probe_counters(raw.get(when), when)
    interval = raw.get("interval_s")
    return SamplingDoc(
        schema=raw["schema"],
        interval_s=float(interval) if is_number(interval) else None,
        before=raw.get("before") if isinstance(raw.get("before"), dict) else None,
        after=raw.get("after") if isinstance(raw.get("after"), dict) else None,
        times=samples.t,
        gpus=samples.gpus,
        child=child,
        errors=[str(e) for e in errors],
    )


def _sampling_object(text: str) -> dict[str, Any]:
    """The document's JSON object, once its schema and mode say it is a sampling document."""
    if not text or text.isspace():  # (no strip(): it would copy a 10 MB document)
        raise EvidenceError("sampling probe printed nothing on stdout")
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise EvidenceError(
            f"sampling probe output is not JSON ({exc.msg} at line {exc.lineno}): {text.lstrip()[:80]!r}"
        ) from None
    if not isinstance(raw, dict):
        raise EvidenceError(f"sampling probe output is JSON but not an object: {type(raw).__name__}")
    schema = raw.get("schema")
    if isinstance(schema, bool) or schema not in SAMPLING_SCHEMAS or raw.get("mode") != "sample":
        raise EvidenceError(
            f"not a sampling document (schema {schema!r}, mode {raw.get('mode')!r});"
            f" expected schema {' or '.join(map(str, SAMPLING_SCHEMAS))}, mode 'sample'"
            " (probe and portal out of step?)"
        )
    return raw


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
        duration_s=float(duration) if is_number(duration) else None,
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
    if not out.stdout or out.stdout.isspace():
        lines = [line.strip() for line in out.stderr.splitlines() if line.strip()]
        hint = f" (stderr: {lines[-1][:200]})" if lines else ""
        raise EvidenceError("sampling probe printed nothing on stdout" + hint)
    # Read once per output: a check's parse and its series both ask (CommandOutput.memo), keyed
    # on the very text read as well.
    text, read = out.memo.get(_MEMO_KEY, (None, None))
    if text is not out.stdout or read is None:
        try:
            read = parse_sampling(out.stdout)
        except EvidenceError as exc:
            read = exc
        out.memo[_MEMO_KEY] = (out.stdout, read)
    if isinstance(read, EvidenceError):
        raise EvidenceError(str(read))
    return read


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
            why = evidence.COUNT.problem(node) if is_number(node) else "not a finite number"
            if why:
                where = f"GPU {gpu.get('index')} {'.'.join(path)}"
                raise EvidenceError(f"{evidence.PREFIX}: the '{when}' probe, {where} = {node!r} ({why})")
