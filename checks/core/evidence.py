"""Impossible evidence: the one validation layer between a parser and a verdict.

A parser turns text into numbers; nothing in that step says the numbers can exist. A busbw of
`inf` passes every floor, a NaN compares false with every limit (so `value > limit` never fails),
and a count of -1 hides one of +1 in a sum. `run_check` (checks/core/base.py) therefore validates every
measurement a parser returns, for every check, before `evaluate` sees it:

- a value is None (missing: judged by the check) or a finite real number, never NaN, inf, a bool
  or a string;
- a measurement with a rule must obey it: counts are non-negative integers, flags are 0 or 1,
  bandwidths, rates, temperatures, clocks and power lie within physical bounds.

Rules come from the measurement's unit (`UNIT_RULES`: every "C" is a temperature, every "GB/s" a
bandwidth) and, where a check knows more, from its `Check.evidence` declarations by measurement
name (nccl's `wrong` is a count; gpu_burn's `iterations` may be -1, its mark of a dead worker).
A name's rule wins over its unit's.

Anything that breaks a rule makes the check `error` (could not tell) with a reason naming the
measurement, the GPU or labels that place it, and the value: "impossible evidence: GPU 3
ecc_volatile_uncorrected = -1 (a count must be a non-negative integer)". A bound is deliberately
far beyond the best hardware there is (each with its source below): it catches corrupt or forged
output, never a fast machine; how fast is fast enough is the thresholds' business.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol


class Measurement(Protocol):
    """What these rules read of a checks.core.base.Measurement (a protocol: base imports this module)."""

    name: str
    value: float | None
    unit: str
    gpu: int | None
    labels: dict[str, str]


PREFIX = "impossible evidence"


@dataclass(frozen=True)
class Rule:
    """What a value must be: `what` names it in reasons ("a count"), bounds are inclusive."""

    what: str
    low: float | None = None
    high: float | None = None
    integer: bool = False

    def problem(self, value: float) -> str | None:
        """Why `value` (finite) breaks the rule, or None."""
        if self.integer and value != int(value):
            return f"{self.what} must be {self._range_words()}"
        if self.high == MAX_COUNT and value > self.high:
            return f"{self.what} must fit a 64-bit counter (at most 2^64 - 1)"
        if (self.low is not None and value < self.low) or (self.high is not None and value > self.high):
            return f"{self.what} must be {self._range_words()}"
        return None

    def _range_words(self) -> str:
        kind = "an integer" if self.integer else "a number"
        if self.low == 0 and (self.high is None or self.high == MAX_COUNT):
            return "a non-negative integer" if self.integer else "non-negative"
        if self.low is not None and self.high is not None:
            return f"{kind} in {_num(self.low)}..{_num(self.high)}"
        if self.low is not None:
            return f"{kind} >= {_num(self.low)}"
        if self.high is not None:
            return f"{kind} <= {_num(self.high)}"
        return kind


# No counter the tools expose is wider than 64 bits unsigned (NVML's ECC counters are unsigned
# long long; kernel and fio counters are u64): a count above 2^64 - 1 was never read from one.
MAX_COUNT = float(2**64 - 1)
COUNT = Rule("a count", low=0, high=MAX_COUNT, integer=True)
FLAG = Rule("a flag", low=0, high=1, integer=True)
# An exit status or errno as a process reports it: 0..255 for exit codes, errno values are small
# positive integers (Linux errno-base.h / errno.h stop below 200).
EXIT_STATUS = Rule("an exit status", low=0, high=255, integer=True)
ERRNO = Rule("an error code", low=0, integer=True)

MIB = 1024 * 1024
# 1 PB/s: a hundred times the fastest parallel filesystem on record (ORNL Frontier's Orion, about
# 10 TB/s, IO500 lists), so no node and no aggregate of nodes reaches it.
MAX_STORAGE_BYTES_S = 1e15

UNIT_RULES: dict[str, Rule] = {
    # -40 C is the bottom of the industrial operating range (JEDEC JESD22-A104 / -40..85 C
    # industrial grade): nothing in a running data center reads colder. 150 C is the usual
    # absolute-maximum silicon junction temperature in datasheets; GPUs shut themselves down well
    # below it (nvidia-smi "GPU Shutdown Temp" 92-94 C in tests/fixtures/nvidia-smi).
    "C": Rule("a temperature", low=-40.0, high=150.0),
    # 20 TB/s: 2.5x the fastest GPU data path there is (B200 HBM3e at 8 TB/s, NVLink 5 at
    # 1.8 TB/s per GPU: NVIDIA Blackwell datasheet). nccl-tests busbw/algbw and nvidia-smi NVLink
    # speeds are in GB/s (10^9 bytes/s).
    "GB/s": Rule("a bandwidth", low=0.0, high=20_000.0),
    # 3,200 Gb/s: 4x the fastest InfiniBand port shipping (XDR, 800 Gb/s per port, NVIDIA
    # Quantum-X800). ibstat prints "Rate" in Gb/s.
    "Gb/s": Rule("a link rate", low=0.0, high=3_200.0),
    "B/s": Rule("a throughput", low=0.0, high=MAX_STORAGE_BYTES_S),
    "MiB/s": Rule("a throughput", low=0.0, high=MAX_STORAGE_BYTES_S / MIB),
    # The throughput bound in the smallest I/O there is (a 512-byte sector): ~2e12 IOPS.
    "IOPS": Rule("an I/O rate", low=0.0, high=MAX_STORAGE_BYTES_S / 512),
    # 10 PFLOP/s per GPU: 4.5x the B200's sparse TF32 tensor peak (2.25 PFLOP/s, NVIDIA DGX B200
    # datasheet: 18 PFLOPS TF32 for 8 GPUs), the fastest mode gpu_burn's -tc can reach.
    "Gflop/s": Rule("a compute rate", low=0.0, high=1e7),
    # 1 MW: several times a whole NVL72 rack (~120-132 kW, NVIDIA GB200 NVL72 spec); one GPU
    # draws at most ~1.4 kW (GB300).
    "W": Rule("a power", low=0.0, high=1e6),
    # 10 GHz: five times the fastest GPU clock (H100 SXM boost 1,980 MHz, NVIDIA H100 datasheet).
    "MHz": Rule("a clock", low=0.0, high=10_000.0),
    # 1e9 s is 31 years: longer than any hardware runs a test or answers a request.
    "ns": Rule("a latency", low=0.0, high=1e18),  # 1e9 s in ns
    "s": Rule("a duration", low=0.0, high=1e9),  # 31 years (above)
    "B": Rule("a size in bytes", low=0, high=MAX_COUNT, integer=True),
    # A GPU count per node: 72 GPUs share one NVLink domain in the largest system (GB200 NVL72);
    # a node lists far fewer. 4,096 leaves room for any aggregate a check reports.
    "GPUs": Rule("a GPU count", low=0, high=4096, integer=True),
    "rows": COUNT,
    "pages": COUNT,
    "lanes": COUNT,
    "links": COUNT,
}

# Units of measured physical quantities (not counts, sizes or durations): a pass on any of these
# must rest on a threshold (checks/core/base.py turns a pass that judged nothing into `warn`).
QUANTITY_UNITS = frozenset({"C", "GB/s", "Gb/s", "B/s", "MiB/s", "IOPS", "Gflop/s", "W", "MHz", "ns"})


def _num(value: float) -> str:
    return f"{value:g}"


def describe(m: Measurement) -> str:
    """'GPU 3 ecc_volatile_uncorrected' / 'port_rate (ca=mlx5_0, port=1)': what and where."""
    where = [f"GPU {m.gpu}"] if m.gpu is not None else []
    labels = [f"{k}={v}" for k, v in sorted(m.labels.items()) if k not in ("missing", "note") and v][:3]
    text = " ".join([*where, m.name])
    return f"{text} ({', '.join(labels)})" if labels else text


def value_text(value: object, unit: str = "") -> str:
    if isinstance(value, float):
        shown = "nan" if math.isnan(value) else _num(value)
    else:
        shown = repr(value)
    return f"{shown} {unit}".rstrip()


def rule_for(m: Measurement, rules: Mapping[str, Rule] | None = None) -> Rule | None:
    if rules and m.name in rules:
        return rules[m.name]
    return UNIT_RULES.get(m.unit)


def check_value(m: Measurement, rules: Mapping[str, Rule] | None = None) -> str | None:
    """Why one measurement is impossible ("busbw_peak = inf GB/s (must be finite)"), or None."""
    value = m.value
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{describe(m)} = {value_text(value)} (not a number)"
    if not math.isfinite(value):
        return f"{describe(m)} = {value_text(float(value), m.unit)} (must be finite)"
    rule = rule_for(m, rules)
    why = rule.problem(float(value)) if rule is not None else None
    if why:
        return f"{describe(m)} = {value_text(float(value), m.unit)} ({why})"
    return None


def problems(measurements: Iterable[Measurement], rules: Mapping[str, Rule] | None = None) -> list[str]:
    """Every impossible value among `measurements`, one line each (empty: all possible)."""
    found = []
    for m in measurements:
        why = check_value(m, rules)
        if why:
            found.append(why)
    return found


def reason(found: list[str], limit: int = 5) -> str:
    """One `error` reason for a list of `problems`."""
    text = f"{PREFIX}: " + "; ".join(found[:limit])
    if len(found) > limit:
        text += f"; and {len(found) - limit} more"
    return text


def number_problem(name: str, value: float, rule: Rule | None = None, *, where: str = "", unit: str = "") -> str | None:
    """The same test for a number a parser holds before it becomes a Measurement (a table cell,
    one row of many): 'busbw = nan GB/s at 1 GiB (must be finite)'."""
    place = f" {where}" if where else ""
    if not math.isfinite(value):
        return f"{name} = {value_text(float(value), unit)}{place} (must be finite)"
    why = rule.problem(value) if rule is not None else None
    return f"{name} = {value_text(float(value), unit)}{place} ({why})" if why else None
