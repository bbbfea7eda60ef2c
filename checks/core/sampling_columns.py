"""The samples of a probe sampling document (checks/probe/SCHEMA.md, "Sampling mode") as columns.

Sampling schema 2 prints them as columns already: one array of times, and per GPU one array per
field. Schema 1 (older probes, stored raw outputs, fixtures) printed one object per sample; it is
turned into the same columns here, in time order. Both then meet the same evidence rules: a
reading is null (no evidence) or a finite number within its field's rule (SAMPLE_RULES), an array
as long as the times, times numeric and ascending. Anything else raises EvidenceError, which makes
the check `error`: a cut, malformed or impossible document never passes.

Speed: a 12 h burn-in at 1 Hz on 8 GPUs is 43,200 samples and 2.4 million readings. Checking each
one in Python took seconds, so a column is first checked whole at C speed (the set of its types,
its sum, which NaN and inf make non-finite, and its min and max against the rule); only a column
that fails that is walked reading by reading, to name the first bad sample as before.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, TypeGuard

from checks.core import evidence
from checks.core.base import EvidenceError
from checks.soak.physics import MAX_NODE_POWER_W

ROWS_SCHEMA = 1  # one object per sample
COLUMNS_SCHEMA = 2  # one array per GPU per field

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
# What each sample field can be (checks/core/evidence.py): one impossible reading makes the whole
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
# The BMC's node power (`node_power_w`, probe --node-power): a node running the probe draws tens of
# watts at the very least (the probe turns 0 W and less into null), at most the facility bound
# (checks/soak/physics.py MAX_NODE_POWER_W, 100 kW). The probe (checks/probe/probe.py) holds
# the same bounds; tests/probe/test_node_power.py keeps them equal.
NODE_POWER_RULE = evidence.Rule("a node's input power", low=1.0, high=MAX_NODE_POWER_W)
_NUMBER_TYPES = frozenset((int, float))
_NONE_TYPE = type(None)


@dataclass
class GpuSamples:
    """One GPU's samples: the times it was sampled at (ascending), and per SAMPLE_FIELDS name its
    readings in step with them (None = unreadable)."""

    t: list[float]
    values: dict[str, list[Any]]


@dataclass
class Samples:
    """Every sample's time (ascending) and each GPU's columns; the BMC's node power per sample when
    the probe sampled it (schema 2 only, --node-power), else None."""

    t: list[float]
    gpus: dict[int, GpuSamples]
    node_power: list[float | None] | None = None


def read_samples(raw: dict[str, Any]) -> Samples:
    """The samples of a sampling document whose schema is ROWS_SCHEMA or COLUMNS_SCHEMA."""
    samples = raw.get("samples")
    if raw.get("schema") == COLUMNS_SCHEMA:
        if not isinstance(samples, dict):
            raise EvidenceError("sampling document has no 'samples' object (schema 2: arrays per GPU)")
        return _read_columns(samples)
    if not isinstance(samples, list):
        raise EvidenceError("sampling document has no 'samples' list")
    return _read_rows(samples)


# ----------------------------------------------------------------------------- schema 2: columns


def _read_columns(samples: dict[str, Any]) -> Samples:
    raw_t = samples.get("t")
    if not isinstance(raw_t, list):
        raise EvidenceError("sampling document has no 't' array in its samples")
    times = _times(raw_t)
    gpus_raw = samples.get("gpus")
    if not isinstance(gpus_raw, list):
        raise EvidenceError("sampling document has no 'gpus' list in its samples")
    gpus: dict[int, GpuSamples] = {}
    for pos, entry in enumerate(gpus_raw):
        index = entry.get("index") if isinstance(entry, dict) else None
        if not _is_index(index):
            raise EvidenceError(f"samples: GPU entry #{pos} has no valid 'index' ({index!r})")
        if index in gpus:
            raise EvidenceError(f"samples: GPU {index} is listed twice")
        assert isinstance(entry, dict)
        values = {name: _column(entry.get(name), name, index, len(times)) for name in SAMPLE_FIELDS}
        gpus[index] = GpuSamples(t=times, values=values)
    return Samples(t=times, gpus=gpus, node_power=_node_power(samples.get("node_power_w"), len(times)))


def _node_power(column: Any, length: int) -> list[float | None] | None:
    """The node power column: absent (not sampled) is None; otherwise one reading per sample time,
    each null or a node's possible power (NODE_POWER_RULE)."""
    if column is None:
        return None
    if not isinstance(column, list):
        raise EvidenceError(f"samples: node_power_w is {type(column).__name__}, expected an array")
    if len(column) != length:
        raise EvidenceError(
            f"samples: node_power_w has {len(column)} readings for {length} sample times (cut or malformed output)"
        )
    if _column_ok(column, NODE_POWER_RULE):
        return [None if v is None else float(v) for v in column]
    for pos, value in enumerate(column):
        if value is not None and not is_number(value):
            raise EvidenceError(f"sample #{pos}: node_power_w is {value!r}, expected a number")
        if value is not None and (why := NODE_POWER_RULE.problem(value)):
            raise EvidenceError(f"{evidence.PREFIX}: sample #{pos} node_power_w = {value!r} W ({why})")
    return [None if v is None else float(v) for v in column]  # a sum too large for a float: all fine


def _times(raw_t: list[Any]) -> list[float]:
    times: list[float] | None = None
    if set(map(type, raw_t)) <= _NUMBER_TYPES:
        try:
            times = list(map(float, raw_t))
        except OverflowError:  # an integer past the float range
            times = None
    if times is None or not _finite_sum(times):
        pos = next((k for k, t in enumerate(raw_t) if not is_number(t)), None)
        if pos is not None or times is None:
            raise EvidenceError(f"sample #{pos} has no numeric 't'")
    if times != sorted(times):
        pos = next(k for k in range(1, len(times)) if times[k] < times[k - 1])
        raise EvidenceError(f"sample #{pos} is out of time order (t={times[pos]:g} after {times[pos - 1]:g})")
    return times


def _column(column: Any, name: str, index: int, length: int) -> list[Any]:
    """One field's readings of one GPU: absent or null means unread in every sample."""
    if column is None:
        return [None] * length
    if not isinstance(column, list):
        raise EvidenceError(f"samples of GPU {index}: {name} is {type(column).__name__}, expected an array")
    if len(column) != length:
        raise EvidenceError(
            f"samples of GPU {index}: {name} has {len(column)} readings for {length} sample times"
            " (cut or malformed output)"
        )
    return checked(column, name, index)


# ----------------------------------------------------------------------------- schema 1: rows


def _read_rows(samples_raw: list[Any]) -> Samples:
    order: list[tuple[float, int]] = []
    for pos, sample in enumerate(samples_raw):
        t = sample.get("t") if isinstance(sample, dict) else None
        if not is_number(t):
            raise EvidenceError(f"sample #{pos} has no numeric 't'")
        if not isinstance(sample.get("gpus"), list):
            raise EvidenceError(f"sample #{pos} has no 'gpus' list")
        order.append((float(t), pos))
    order.sort()  # by time; samples at the same time stay in document order
    columns: dict[int, tuple[GpuSamples, list[int]]] = {}
    for t, pos in order:
        _transpose(samples_raw[pos]["gpus"], t, pos, columns)
    gpus: dict[int, GpuSamples] = {}
    for index, (gpu, positions) in sorted(columns.items()):
        gpu.values = {name: checked(values, name, index, positions) for name, values in gpu.values.items()}
        gpus[index] = gpu
    return Samples(t=[t for t, _ in order], gpus=gpus)


def _transpose(entries: list[Any], t: float, pos: int, columns: dict[int, tuple[GpuSamples, list[int]]]) -> None:
    """Append sample #pos's GPU entries to their GPUs' columns (and its position, for messages)."""
    seen: set[int] = set()
    for entry in entries:
        index = entry.get("index") if isinstance(entry, dict) else None
        if not _is_index(index):
            raise EvidenceError(f"sample #{pos} has a GPU entry without a valid 'index'")
        if index in seen:
            raise EvidenceError(f"sample #{pos} lists GPU {index} twice")
        seen.add(index)
        found = columns.get(index)
        if found is None:
            found = columns[index] = (GpuSamples(t=[], values={name: [] for name in SAMPLE_FIELDS}), [])
        gpu, positions = found
        gpu.t.append(t)
        positions.append(pos)
        for name, values in gpu.values.items():
            values.append(entry.get(name))


# ----------------------------------------------------------------------------- evidence rules


def checked(column: list[Any], name: str, index: int, positions: list[int] | None = None) -> list[Any]:
    """`column` when every reading is None or a finite number within the field's rule; otherwise
    EvidenceError naming the first bad one (`positions`: each reading's sample number, when it is
    not the reading's place in the column)."""
    rule = SAMPLE_RULES[name]
    if _column_ok(column, rule):
        return column
    for k, value in enumerate(column):
        pos = k if positions is None else positions[k]
        if value is not None and not is_number(value):
            raise EvidenceError(f"sample #{pos} GPU {index}: {name} is {value!r}, expected a number")
        if value is not None and (why := rule.problem(value)):
            raise EvidenceError(f"{evidence.PREFIX}: sample #{pos} GPU {index} {name} = {value!r} ({why})")
    return column  # the whole-column check was cautious (a sum too large for a float): all fine


def _column_ok(column: list[Any], rule: evidence.Rule) -> bool:
    """True when the whole column obeys `rule`, judged at C speed; False means "look closer"."""
    kinds = set(map(type, column))
    has_none = _NONE_TYPE in kinds
    kinds.discard(_NONE_TYPE)
    if not kinds:
        return True
    if not kinds <= _NUMBER_TYPES:
        return False  # a string, a bool, a list...
    numbers = [v for v in column if v is not None] if has_none else column
    if float in kinds and not _finite_sum(numbers):
        return False
    if rule.integer and float in kinds:
        return False  # 3.0 is a count, 3.5 is not: decided reading by reading
    return not (rule.problem(min(numbers)) or rule.problem(max(numbers)))


def _finite_sum(numbers: list[Any]) -> bool:
    """False when a NaN or an infinity is among the numbers (or their sum overflows)."""
    try:
        return math.isfinite(sum(numbers))
    except OverflowError:
        return False


def _is_index(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def is_number(value: Any) -> TypeGuard[int | float]:
    """A finite int or float (never a bool); an integer past the float range is not one."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False
