"""Numbers for people: a measured value with its unit, and a threshold in the same form as the value
it judges. One place for pages and the certificate PDF. Pure Python, no Django.

The stored value stays as the check recorded it (B/s, C, W); only what people read is scaled:
bytes in decimal SI prefixes (1 GB = 10^9 B, as storage and network vendors quote them), GiB-style
units left binary as recorded, thousands separators, no e-notation. A missing value is "—" and a
NaN or infinity "invalid": never a made-up number."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from typing import Any

MISSING = "—"
INVALID = "invalid"
NOT_SET = "not set"  # a plan setting with no value: said in words, never a blank
# Decimal prefixes for units stored in bytes (B, B/s); SI, as fio and storage vendors quote.
BYTE_UNITS = {"B": "B", "B/s": "B/s"}
BYTE_PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
# Stored unit -> shown unit, where only the spelling differs.
SPELLING = {"C": "°C", "us": "µs", "GPUs": "GPUs"}
# Units whose values are whole counts: shown as integers with thousands separators.
COUNT_UNITS = frozenset({"", "GPUs", "rows", "pages", "lanes", "links", "errors", "samples", "ports", "nodes"})
WATTS_TO_KW = 10_000.0  # from 10 kW up a power reads better in kW (a rack, a PDU); a GPU stays in W
# Past this a number has too many digits to read; shown as a power of ten instead.
HUGE = 1e15
TINY = 1e-9  # below this (and not zero) the same
SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")
OPERATORS = {">=": "≥", "<=": "≤", "==": "=", "!=": "≠", ">": ">", "<": "<"}
# The number must end there: "== 550.54.15" (a version) is text, not 550.54 followed by ".15".
# Between two bounds judged together: " · ", or ", " before an operator and a number (not "in a,b").
_BOUNDS = re.compile(r"\s+·\s+|,\s+(?=(?:>=|<=|==|!=|>|<)\s*[-+.\d])")
_THRESHOLD = re.compile(r"^\s*(>=|<=|==|!=|>|<)\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)(?![\d.])\s*(.*)$")


def as_number(value: Any) -> float | None:
    """A float, or None for anything that is not a number (None, text, bools)."""
    if isinstance(value, bool) or value is None or value == "":
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _powers_of_ten(x: float) -> str:
    exponent = math.floor(math.log10(abs(x)))
    mantissa = x / 10**exponent
    return f"{mantissa:.2f} × 10{str(exponent).translate(SUPERSCRIPT)}"


def number(x: float, *, whole: bool = False) -> str:
    """A finite number without e-notation: whole values as integers, others to about 3 significant
    digits, thousands separated ("109,400", "6.2", "0.00123"). `whole` rounds to an integer."""
    if x == 0:
        return "0"
    if abs(x) >= HUGE or abs(x) < TINY:
        return _powers_of_ten(x)
    if whole or x.is_integer() or abs(x) >= 100:
        return f"{round(x):,}"
    if abs(x) >= 1:
        return f"{x:,.1f}"
    decimals = 2 - math.floor(math.log10(abs(x)))  # three significant digits, no trailing zeros
    return f"{x:.{decimals}f}".rstrip("0")


def _scaled(x: float, unit: str) -> tuple[float, str, bool]:
    """(value, unit) in the unit people read, and whether it was rescaled."""
    if unit in BYTE_UNITS:
        for factor, prefix in BYTE_PREFIXES:
            if abs(x) >= factor:
                return x / factor, prefix + BYTE_UNITS[unit], True
        return x, unit, False
    if unit == "W" and abs(x) >= WATTS_TO_KW:
        return x / 1000, "kW", True
    if unit == "s" and 0 < abs(x) < 1:
        return (x * 1000, "ms", True) if abs(x) >= 1e-3 else (x * 1e6, "µs", True)
    return x, SPELLING.get(unit, unit), False


def quantity(value: Any, unit: str = "") -> str:
    """A measured value with its unit for people: 6e9 B/s -> "6.0 GB/s", 109400.3 Gflop/s ->
    "109,400 Gflop/s", 81.5 C -> "81.5 °C", 3 GPUs -> "3 GPUs". "—" when there is no value,
    "invalid" for NaN or infinity. Text (a driver version) is returned as it is."""
    if isinstance(value, str) and as_number(value) is None:
        return value or MISSING
    x = as_number(value)
    if x is None:
        return MISSING
    if not math.isfinite(x):
        return INVALID
    shown, shown_unit, rescaled = _scaled(x, unit or "")
    if rescaled and 1 <= abs(shown) < 100:
        text = f"{shown:,.1f}"  # a scaled value keeps its tenth: "6.0 GB/s", not "6 GB/s"
    else:
        text = number(shown, whole=unit in COUNT_UNITS and x.is_integer())
    return f"{text} {shown_unit}" if shown_unit else text


def threshold(text: Any, unit: str = "") -> str:
    """A stored threshold ("<= 82", ">= 4 GB/s", ">= 6e+09") written like the values it judges:
    "≤ 82 °C", "≥ 4 GB/s", "≥ 6.0 GB/s". A threshold that names its own unit keeps it; one that
    is not an operator and a number ("== Completed", "in a,b") is shown as it is."""
    if not isinstance(text, str) or not text.strip():
        return MISSING
    parts = _BOUNDS.split(text)
    if len(parts) > 1:  # several bounds judged together (">= 30000 · >= 44978 (median - 10%)"): each
        return " · ".join(threshold(part, unit) for part in parts)
    match = _THRESHOLD.match(text)
    if match is None:
        return text
    op, raw, rest = match.groups()
    if rest.startswith("("):  # "(median - 10%)": how the bound was derived, after the value and its unit
        return f"{OPERATORS[op]} {quantity(float(raw), unit)} {rest}"
    if rest.startswith("%") or " " in rest:  # "% of the median node": a phrase, not a unit
        return f"{OPERATORS[op]} {quantity(float(raw))}{'' if rest.startswith('%') else ' '}{rest}"
    return f"{OPERATORS[op]} {quantity(float(raw), rest or unit)}"  # its own unit ("GB/s", "W") or the value's


# A plan parameter's unit, from the naming convention of the checks' Params and Thresholds fields
# (duration_s, max_bytes, max_power_w, max_temp_c, min_coverage_pct): the value is shown with it.
SETTING_SUFFIX_UNITS = {"_s": "s", "_bytes": "B", "_w": "W", "_c": "C", "_pct": "%"}


def _exact(x: float) -> str:
    """A setting is a contract: shown exactly (thousands separated), never rounded."""
    return f"{int(x):,}" if x.is_integer() else f"{x:,}"


def _exact_bytes(x: float) -> str:
    """A byte size exactly, in the largest unit it is a whole number of: 8589934592 -> "8 GiB"."""
    for power, binary, decimal in ((4, "TiB", "TB"), (3, "GiB", "GB"), (2, "MiB", "MB"), (1, "KiB", "kB")):
        if x and x % 1024**power == 0:
            return f"{_exact(x / 1024**power)} {binary}"
        if x and x % 1000**power == 0:
            return f"{_exact(x / 1000**power)} {decimal}"
    return f"{_exact(x)} B"


def setting(name: str, value: Any) -> str:
    """A plan parameter or threshold's value for people, exactly: "duration_s", 600 -> "600 s";
    "max_bytes", 8589934592 -> "8 GiB"; True -> "yes"; a list -> "a, b"; None, "" or an empty
    list -> "not set" (a blank would read as a value lost)."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ", ".join(setting("", v) for v in value) or NOT_SET
    if isinstance(value, dict):
        return ", ".join(f"{k} {setting(k, v)}" for k, v in value.items()) or NOT_SET
    x = as_number(value)
    if x is None:
        return NOT_SET if value is None or not str(value).strip() else str(value)
    if not math.isfinite(x):
        return INVALID
    unit = next((u for suffix, u in SETTING_SUFFIX_UNITS.items() if name.endswith(suffix)), "")
    if unit == "B":
        return _exact_bytes(x)
    return f"{_exact(x)} {SPELLING.get(unit, unit)}".rstrip()


# Abbreviations in measurement and setting names, spelled as people write them. Words, not names:
# a name this does not cover still reads ("coolant_delta_t" -> "Coolant delta T").
WORDS = {
    "gpu": "GPU", "gpus": "GPUs", "cpu": "CPU", "ecc": "ECC", "pcie": "PCIe", "nvlink": "NVLink",
    "nvlinks": "NVLinks", "nic": "NIC", "nics": "NICs", "ib": "InfiniBand", "bw": "bandwidth",
    "busbw": "bus bandwidth", "algbw": "algorithm bandwidth", "temp": "temperature", "xid": "Xid",
    "sxid": "SXid", "os": "OS", "ofed": "OFED", "nccl": "NCCL", "cuda": "CUDA", "vbios": "VBIOS",
    "bios": "BIOS", "bmc": "BMC", "psu": "PSU", "pdu": "PDU", "ups": "UPS", "dlc": "DLC", "id": "ID",
    "uuid": "UUID", "fp16": "FP16", "fp32": "FP32", "fp64": "FP64", "tc": "tensor core", "gflops": "Gflop/s",
    "tflops": "Tflop/s", "iops": "IOPS", "md": "metadata", "rdma": "RDMA", "hca": "HCA", "t": "T",
    "pct": "%", "mtu": "MTU", "sm": "SM", "dcgm": "DCGM",
}  # fmt: skip


def name_label(name: str, declared: str = "") -> str:
    """How people read a measurement or setting name: the label its check declares, else the name
    in words ("ecc_volatile_uncorrected" -> "ECC volatile uncorrected")."""
    if declared:
        return declared
    words = [WORDS.get(word.lower(), word) for word in re.split(r"[_\s]+", name.strip()) if word]
    if not words:
        return MISSING
    first = words[0]
    words[0] = first[:1].upper() + first[1:] if first.islower() else first
    return " ".join(words)


def unit_shown(unit: str) -> str:
    """How a unit is spelled for people ("C" -> "°C"); scaled units are chosen per value."""
    return SPELLING.get(unit, unit)


def iso_utc(when: Any) -> str:
    """An ISO 8601 timestamp (text or datetime) in UTC to the second: "2026-12-03T15:44:27Z"; "—"
    for none; text that is not a timestamp is returned as it is."""
    if when is None or when == "":
        return MISSING
    try:
        moment = when if isinstance(when, datetime) else datetime.fromisoformat(str(when))
    except ValueError:
        return str(when)
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
