"""Packed storage of a Series' values: a list of numbers (None = no reading) as compact bytes.

A 12 h burn-in sampled at 1 Hz on 8 GPUs is 32 curves of 43,200 points. As jsonb lists that was
20 MB per result. Packed, the values are exact (every value reads back equal, with its type: an
int stays an int, 70.25 stays 70.25, so a series' points digest (models.points_digest) is unchanged
by storage) and take a few percent of that:

- "D" (decimal): every value is an int, or every value is a float with at most 9 decimals (all
  telemetry: NVML reports whole degrees, MHz and milliwatts; sample times are rounded to the
  millisecond). Each is stored as the integer `round(v * 10**scale)`, as first differences in the
  narrowest little-endian integer array that holds them, zlib-compressed. A temperature that moves
  by a degree now and then costs a few bits per point.
- "F" (float64): floats that no decimal scale reproduces exactly, as little-endian doubles, zlib.
- "J" (JSON): anything else (mixed ints and floats, bools, -0.0, integers past 64 bits), as the
  compact JSON text, zlib: never lossy, only larger.

Positions of None are stored apart (a zlib'd byte per value, 0 or 1) for "D" and "F". A value is
only ever packed as "D" or "F" after decoding it again gave back the very same list.

Layout (little-endian): version u8 (1), codec char, flags u8 (1: ints, 2: has None), scale u8,
typecode char (of the "D" differences), count u32, null-map length u32, null map, body.
Pure standard library, no Django: the migration that converted the jsonb lists uses it too.
"""

from __future__ import annotations

import json
import math
import operator
import struct
import sys
import zlib
from array import array
from collections.abc import Sequence
from itertools import accumulate, repeat
from typing import Any

VERSION = 1
_HEADER = struct.Struct("<BcBBcII")
_INTS, _NULLS = 1, 2
# The finest decimal step tried: 1e-9 covers every reading the probe prints (milliseconds,
# milliwatts) and nanosecond-rounded times, with room under int64 for values up to ~9e9.
MAX_SCALE = 9
# Narrowest first: signed 8, 16, 32, 64-bit integers (array typecodes whose size is fixed on
# every CPython platform: "b" 1, "h" 2, "i" 4, "q" 8 bytes).
_TYPECODES = (("b", 2**7), ("h", 2**15), ("i", 2**31), ("q", 2**63))
_LEVEL = 6  # zlib's default: 43,200 points compress in about a millisecond


def pack(values: Sequence[Any]) -> bytes:
    """`values` (numbers and None) as bytes that `unpack` turns back into an equal list."""
    values = list(values)
    nulls = bytes(v is None for v in values) if None in values else b""
    numbers = [v for v in values if v is not None] if nulls else values
    for attempt in (_decimal, _doubles):
        packed = attempt(numbers, nulls, len(values))
        if packed is not None and unpack(packed) == values:
            return packed
    text = json.dumps(values, separators=(",", ":"), allow_nan=True).encode()
    return _HEADER.pack(VERSION, b"J", 0, 0, b"b", len(values), 0) + zlib.compress(text, _LEVEL)


def unpack(blob: bytes | memoryview | None) -> list[Any]:
    """The list that `pack` was given (an empty list for an empty or missing blob)."""
    if not blob:
        return []
    data = bytes(blob)
    version, codec, flags, scale, typecode, count, null_size = _HEADER.unpack_from(data)
    if version != VERSION:
        raise ValueError(f"packed series version {version}, this Kiln reads {VERSION}")
    rest = memoryview(data)[_HEADER.size :]
    if codec == b"J":
        return list(json.loads(zlib.decompress(rest)))
    body = zlib.decompress(rest[null_size:])
    if codec == b"D":
        numbers: list[Any] = _from_decimal(body, typecode.decode(), scale, ints=bool(flags & _INTS))
    elif codec == b"F":
        numbers = _native(array("d", body)).tolist()
    else:
        raise ValueError(f"unknown packed series codec {codec!r}")
    if not flags & _NULLS:
        return numbers
    nulls = zlib.decompress(rest[:null_size])
    if len(nulls) != count:
        raise ValueError(f"packed series: {len(nulls)} null flags for {count} values")
    found = iter(numbers)
    return [None if null else next(found) for null in nulls]


def _decimal(numbers: list[Any], nulls: bytes, count: int) -> bytes | None:
    """Numbers as scaled integers' first differences, when one scale reproduces every one."""
    kinds = set(map(type, numbers))
    if kinds <= {int}:
        scale, ints, flags = 0, numbers, _INTS
    elif kinds == {float}:
        found = _scaled(numbers)
        if found is None:
            return None
        scale, ints = found
        flags = 0
    else:
        return None
    diffs = ints[:1] + list(map(operator.sub, ints[1:], ints[:-1]))
    low, high = (min(diffs), max(diffs)) if diffs else (0, 0)
    typecode = next((code for code, bound in _TYPECODES if -bound <= low and high < bound), "")
    if not typecode:
        return None  # a difference past 64 bits
    body = _native(array(typecode, diffs)).tobytes()
    return _assemble(b"D", flags, scale, typecode, count, nulls, body)


def _scaled(numbers: list[float]) -> tuple[int, list[int]] | None:
    """The smallest decimal scale whose integers give back every float exactly, and those integers."""
    if not all(map(math.isfinite, numbers)) or _has_negative_zero(numbers):
        return None
    scale = 0
    head = numbers[:64]  # most lists show their scale in their first values: then one full pass
    while scale <= MAX_SCALE:
        if _ints(head, scale) is not None:
            ints = _ints(numbers, scale)
            if ints is not None:
                return scale, ints
        scale += 1
    return None


def _ints(numbers: list[float], scale: int) -> list[int] | None:
    step = 10**scale
    try:
        ints = [round(v * step) for v in numbers]
    except OverflowError:
        return None
    back = list(map(operator.truediv, ints, repeat(step))) if scale else list(map(float, ints))
    return ints if back == numbers else None


def _has_negative_zero(numbers: list[float]) -> bool:
    return 0.0 in numbers and any(v == 0.0 and math.copysign(1.0, v) < 0 for v in numbers)


def _from_decimal(body: bytes, typecode: str, scale: int, *, ints: bool) -> list[Any]:
    values = list(accumulate(_native(array(typecode, body)).tolist()))
    if ints:
        return values
    if not scale:
        return list(map(float, values))
    return list(map(operator.truediv, values, repeat(10**scale)))


def _doubles(numbers: list[Any], nulls: bytes, count: int) -> bytes | None:
    if set(map(type, numbers)) - {float} or _has_negative_zero(numbers):
        return None
    body = _native(array("d", numbers)).tobytes()
    return _assemble(b"F", 0, 0, "b", count, nulls, body)


def _assemble(codec: bytes, flags: int, scale: int, typecode: str, count: int, nulls: bytes, body: bytes) -> bytes:
    null_map = zlib.compress(nulls, _LEVEL) if nulls else b""
    if nulls:
        flags |= _NULLS
    header = _HEADER.pack(VERSION, codec, flags, scale, typecode.encode(), count, len(null_map))
    return header + null_map + zlib.compress(body, _LEVEL)


def _native(numbers: array[Any]) -> array[Any]:
    """Little-endian on disk whatever the CPU: swap in place on a big-endian one."""
    if sys.byteorder == "big":
        numbers.byteswap()
    return numbers


_PAIR = struct.Struct("<I")


def pack_pair(x: Sequence[Any], y: Sequence[Any]) -> bytes:
    """Two lists in one blob (a series' downsampled view): the length of x's part, x, y."""
    packed_x = pack(x)
    return _PAIR.pack(len(packed_x)) + packed_x + pack(y)


def unpack_pair(blob: bytes | memoryview | None) -> tuple[list[Any], list[Any]]:
    if not blob:
        return [], []
    data = bytes(blob)
    (size,) = _PAIR.unpack_from(data)
    start = _PAIR.size
    return unpack(data[start : start + size]), unpack(data[start + size :])
