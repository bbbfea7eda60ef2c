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
    doc.node_power()                                   # [(t, watts-or-None), ...] (probe --node-power)
    doc.node_power_info                                # its source and why readings are missing
    doc.started_at                                     # when t = 0 was, epoch seconds (or None)

Anything that makes the document untrustworthy (not JSON, wrong schema/mode, malformed samples)
raises EvidenceError. A null reading stays None: no evidence, never zero. Both sampling schemas are
read (2: arrays per GPU, what the probe prints; 1: one object per sample, older probes and stored
outputs) into the same columns (checks/core/sampling_columns.py), and the document is read once per
command output however many times a check asks (parse, then series).
"""

from __future__ import annotations

import json
from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Any

from checks.core import evidence
from checks.core.base import CommandOutput, EvidenceError, Series
from checks.core.sampling_columns import (
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
_MEMO_KEY = "checks.core.sampling"

# Counters of the before/after probe documents that increases are computed from.
_PROBE_COUNTERS = (
    ("ecc_errors", "volatile", "uncorrected"),
    ("ecc_errors", "volatile", "corrected"),
    ("remapped_rows", "correctable"),
    ("remapped_rows", "uncorrectable"),
)
# The curves worth storing and drawing.
SERIES_FIELDS: tuple[str, ...] = ("temp_gpu", "temp_memory", "power_w", "sm_clock_mhz")
# The node power curve's Series name (one per node, gpu None).
NODE_POWER_SERIES = "node_power"

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
class NodePowerInfo:
    """What the probe says of its BMC readings (probe --node-power): the source ("dcmi", "sdr", or
    None when it never read one), how many readings it took, and why others are missing."""

    source: str | None
    readings: int | None
    errors: list[str]


@dataclass
class SamplingDoc:
    """A validated sampling document, its samples as columns (checks/core/sampling_columns.py)."""

    schema: int
    interval_s: float | None
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    times: list[float]  # every sample's time, ascending
    gpus: dict[int, GpuSamples]
    child: ChildRun | None
    errors: list[str] = field(default_factory=list)
    # The BMC's node power per sample (None: not sampled, an older probe or no --node-power).
    node_power_w: list[float | None] | None = None
    node_power_info: NodePowerInfo | None = None
    # When t = 0 was (epoch seconds, the node's clock); --start-at as asked, and how late it began.
    started_at: float | None = None
    start_at: float | None = None
    start_late_s: float | None = None

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
        """One Series per (GPU, field), x = seconds since sampling started, then the node power
        curve when the probe sampled it. A GPU's series share one list of times (read-only:
        43,200 points per curve in a 12 h burn-in at 1 Hz)."""
        out: list[Series] = []
        for gpu in self.gpu_indices():
            samples = self.gpus[gpu]
            for name in fields:
                out.append(
                    Series(name=name, unit=SAMPLE_FIELDS[name], x=samples.t, y=_floats(samples.values[name]), gpu=gpu)
                )
        node = self.node_power_series()
        return out if node is None else [*out, node]

    # --- node power (probe --node-power) ------------------------------------------------------

    @property
    def has_node_power(self) -> bool:
        """Whether the probe sampled node power (then node_power() has one entry per sample)."""
        return self.node_power_w is not None

    def node_power(self) -> list[tuple[float, float | None]]:
        """(t, watts) per sample, None where the BMC gave no fresh reading; [] when not sampled."""
        if self.node_power_w is None:
            return []
        return list(zip(self.times, self.node_power_w, strict=True))

    def node_power_series(self) -> Series | None:
        """The node power curve (name "node_power", W, no GPU), or None when not sampled."""
        if self.node_power_w is None:
            return None
        return Series(name=NODE_POWER_SERIES, unit="W", x=self.times, y=self.node_power_w)

    def gpu_power_sums(self) -> list[float | None]:
        """Per sample, the sum of every GPU's NVML power; None where any GPU has no reading."""
        columns = [self.gpus[g].values["power_w"] for g in self.gpu_indices()]
        if not columns:
            return [None] * len(self.times)
        return [None if None in row else float(sum(row)) for row in zip(*columns, strict=True)]

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
    started_at, start_at, start_late_s = (_epoch(raw, key) for key in ("started_at", "start_at", "start_late_s"))
    return SamplingDoc(
        schema=raw["schema"],
        interval_s=float(interval) if is_number(interval) else None,
        before=raw.get("before") if isinstance(raw.get("before"), dict) else None,
        after=raw.get("after") if isinstance(raw.get("after"), dict) else None,
        times=samples.t,
        gpus=samples.gpus,
        child=child,
        errors=[str(e) for e in errors],
        node_power_w=samples.node_power,
        node_power_info=_node_power_info(raw.get("node_power"), samples.node_power is not None),
        started_at=started_at,
        start_at=start_at,
        start_late_s=start_late_s,
    )


def _epoch(raw: dict[str, Any], key: str) -> float | None:
    """A start time (epoch seconds) or lateness (s): absent or null is None, anything else a
    finite non-negative number (a time base a group check aligns nodes on must not be garbage)."""
    value = raw.get(key)
    if value is None:
        return None
    if not is_number(value) or value < 0:
        raise EvidenceError(f"sampling '{key}' is {value!r:.40}, expected a non-negative number of seconds or null")
    return float(value)


def _node_power_info(raw: Any, sampled: bool) -> NodePowerInfo | None:
    """The probe's node power object: null when not sampled; an object whenever readings are."""
    if raw is None:
        if sampled:
            raise EvidenceError("sampling document has node power readings but no 'node_power' object")
        return None
    if not isinstance(raw, dict):
        raise EvidenceError(f"sampling 'node_power' is {type(raw).__name__}, expected an object or null")
    if not sampled:
        raise EvidenceError("sampling 'node_power' says it was sampled, but samples have no node_power_w")
    source = raw.get("source")
    if source not in ("dcmi", "sdr", None):
        raise EvidenceError(f"sampling node_power source {source!r:.40} is none of 'dcmi', 'sdr' or null")
    readings = raw.get("readings")
    errors = raw.get("errors") or []
    if not isinstance(errors, list):
        raise EvidenceError(f"sampling node_power 'errors' is {type(errors).__name__}, expected a list")
    count = int(readings) if is_number(readings) and readings >= 0 and readings == int(readings) else None
    return NodePowerInfo(source=source, readings=count, errors=[str(e) for e in errors])


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
