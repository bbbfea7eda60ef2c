"""Xid 144-149 (NVLink5) decoded with the "Xid 144-150 Decode" sheet of NVIDIA's Xid catalog: the
sub component, IntrInfo and error status in the driver's message give the recovery bucket. The
severity each bucket means is checks/gpu/xid.py's (catalogue_entry)."""

from __future__ import annotations

import re
from dataclasses import dataclass

# --- Xid 144-149: the catalog's "Xid 144-150 Decode" sheet ---------------------------------------
#
# Source: NVIDIA Xid catalog (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html and its
# spreadsheet), sheet "XID 144-150 Decode", read for WORKFLOW_NVLINK5_ERR. The driver prints
#   Xid (PCI:...): <xid>, <sub component> <Fatal|Nonfatal> XC<n> i<n> Link <n> (<intrInfo>
#   <errorStatus> <errorDebugData[0..4]>)
# and "<intrInfo>, <errorStatus> must be decoded and evaluated using 'XID 144-150 Decode' to derive
# the final resolution". Each sheet row gives the sub component (V1 name before R575 / V2 name from
# R575), an IntrInfo bitmask for V1 and for V2 ("-" = user decode, i.e. don't care), an error
# status and "Resolution Bucket (Data Center Recovery Action)". The sheet writes the masks with
# dashes collapsed (each em dash is "---"); spelled out, every mask is 32 bits: [31:26] don't care,
# [25:20] a 6-bit field (the NETIR link-down reason; 000000 elsewhere), then don't care down to
# the subcode bits, IntrInfo[9:0] for V1 and IntrInfo[6:0] for V2. RLW_RXPIPE statuses 1/2/4 are
# "promotable": bit 10 (V1) / bit 7 (V2) set selects "Action 2" (RESET_GPU).


RESET_GPU = "RESET_GPU"
XID_154_EVAL = "XID_154_EVAL"
IGNORE = "IGNORE"

_NVL5_MESSAGE = re.compile(
    r"^(?P<unit>[A-Za-z][A-Za-z0-9_]*)\s+(?P<fatal>Fatal|Nonfatal|Non-fatal)\s+XC\s*\d+\s+i\s*\d+\s+"
    r"Link\s+-?\d+\s+\((?P<regs>0x[0-9A-Fa-f]+(?:[\s,]+0x[0-9A-Fa-f]+)*)\s*\)",
    re.IGNORECASE,
)


def _mask(field: str, low: str) -> tuple[int, int]:
    """The sheet's 32-bit pattern "------<field>---...<low>" as (care bits, value)."""
    pattern = "-" * 6 + field + "-" * (20 - len(low)) + low
    care = int("".join("0" if c == "-" else "1" for c in pattern), 2)
    return care, int(pattern.replace("-", "0"), 2)


@dataclass(frozen=True)
class _Nvl5Row:
    xid: int
    names: tuple[str, ...]  # V1 / V2 sub component names as printed
    v1: tuple[int, int]
    v2: tuple[int, int]
    buckets: dict[int | None, str]  # error status -> bucket; None: the row lists no status


def _rows(xid: int, names: str, v1: str, v2: str, buckets: dict, field: str = "000000") -> _Nvl5Row:
    return _Nvl5Row(xid, tuple(names.split("/")), _mask(field, v1), _mask(field, v2), buckets)


_TLW = {0x1: IGNORE, 0x2: IGNORE, 0x4: RESET_GPU, 0x80000000: IGNORE}
# 149 NETIR_LINK_EVT/NETIR_LINK_DOWN: the bucket follows the link-down reason in IntrInfo[25:20].
_LINK_DOWN_IGNORE = {"100110", "101000"}
_LINK_DOWN_RESET = (
    "000000 000001 000010 000100 001010 001111 010000 010001 010010 010101 010110 "
    "100000 100001 100010 100011 100100 100101 101010 101011"
).split()

NVL5_DECODE: tuple[_Nvl5Row, ...] = (
    _rows(
        144,
        "SAW_MVB",
        "0000100001",
        "0000001",
        {0x1: IGNORE, 0x2: RESET_GPU, 0x4: IGNORE, 0x8: IGNORE, 0x10: RESET_GPU, 0x20: IGNORE},
    ),
    _rows(145, "RLW_CTRL", "0001100010", "0000011", {0x80000000: IGNORE}),
    _rows(
        145,
        "RLW_REMAP",
        "0010000010",
        "0000100",
        {
            **dict.fromkeys((0x1, 0x2, 0x4, 0x8, 0x10, 0x20), XID_154_EVAL),
            0x40: RESET_GPU,
            0x80: RESET_GPU,
            0x100: IGNORE,
            0x200: IGNORE,
            0x80000000: IGNORE,
        },
    ),
    _rows(145, "RLW_RSPCOL", "0010100010", "0000101", {0x1: IGNORE, 0x2: RESET_GPU, 0x80000000: IGNORE}),
    _rows(145, "RLW_RXPIPE", "00011000010", "00000110", {0x1: IGNORE, 0x2: IGNORE, 0x4: IGNORE}),
    _rows(145, "RLW_RXPIPE", "10011000010", "10000110", {0x1: RESET_GPU, 0x2: RESET_GPU, 0x4: RESET_GPU}),
    _rows(145, "RLW_RXPIPE", "0011000010", "0000110", {0x8: IGNORE, 0x80000000: IGNORE}),
    _rows(
        145,
        "RLW_SRC_TRACK",
        "0011100010",
        "0000111",
        {
            0x1: RESET_GPU,
            0x2: IGNORE,
            0x4: XID_154_EVAL,
            0x8: XID_154_EVAL,
            0x10: RESET_GPU,
            0x20: RESET_GPU,
            0x80000000: IGNORE,
        },
    ),
    _rows(
        145,
        "RLW_TAGSTATE",
        "0100000010",
        "0001000",
        {0x1: IGNORE, 0x2: RESET_GPU, 0x10000: IGNORE, 0x20000: RESET_GPU, 0x100000: RESET_GPU, 0x80000000: IGNORE},
    ),
    _rows(146, "TLW_CTRL", "0100100011", "0001001", _TLW),
    _rows(146, "TLW_RX/TLW_RX_PIPE0", "0101000011", "0001010", _TLW),
    _rows(146, "TLW_RX/TLW_RX_PIPE1", "0101000011", "0001011", _TLW),
    _rows(146, "TLW_TX/TLW_TX_PIPE0", "0101100011", "0001100", _TLW),
    _rows(146, "TLW_TX/TLW_TX_PIPE1", "0101100011", "0001101", _TLW),
    _rows(147, "TREX", "0110000100", "0001110", {0x1: IGNORE, 0x80000000: IGNORE}),
    _rows(148, "NVLPW_CTRL/NVLPW", "0000000101", "0001111", {0x80000000: IGNORE}),
    _rows(149, "NETIR/NETIR_INT", "0000000110", "0011000", {None: RESET_GPU}),
    *(
        _rows(149, "NETIR_LINK_EVT/NETIR_LINK_DOWN", "0111000110", "0010001", {None: bucket}, field)
        for bucket, fields in ((RESET_GPU, _LINK_DOWN_RESET), (IGNORE, sorted(_LINK_DOWN_IGNORE)))
        for field in fields
    ),
    _rows(149, "NETIR_BER_EVENT", "1000100110", "0010011", dict.fromkeys((0x0, 0x1, 0x2, 0x3), IGNORE)),
    _rows(
        149,
        "NETIR_MFDE_EVENT",
        "1001000110",
        "0010100",
        {0x1: RESET_GPU, 0x3: IGNORE, 0x4: RESET_GPU, 0x5: RESET_GPU, 0x7: RESET_GPU},
    ),
)


@dataclass(frozen=True)
class Nvl5Decode:
    unit: str
    fatal: bool  # the driver's own Fatal/Nonfatal word
    status: int | None
    bucket: str  # RESET_GPU | XID_154_EVAL | IGNORE


def nvlink5_decode(code: int, message: str) -> Nvl5Decode | None:
    """Xid 144-149 decoded with the catalog's sheet; None when the message does not decode."""
    match = _NVL5_MESSAGE.match(message.strip())
    if not match:
        return None
    unit = match["unit"].upper()
    fatal = match["fatal"].lower() == "fatal"
    regs = [int(r, 16) for r in re.split(r"[\s,]+", match["regs"].strip())]
    intr = regs[0]
    status = regs[1] if len(regs) > 1 else None
    buckets = set()
    for row in NVL5_DECODE:
        if row.xid != code or unit not in row.names:
            continue
        if not any(intr & care == value for care, value in (row.v1, row.v2)):
            continue
        bucket = row.buckets.get(None) or (row.buckets.get(status) if status is not None else None)
        if bucket:
            buckets.add(bucket)
    if not buckets:
        return None
    # Rows that disagree (should not happen): the worst one.
    bucket = next(b for b in (RESET_GPU, XID_154_EVAL, IGNORE) if b in buckets)
    return Nvl5Decode(unit, fatal, status, bucket)
