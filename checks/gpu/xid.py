"""Xid / SXid events in the kernel log: the parser, the severity catalogue, and the kernel log reader.

The NVIDIA driver reports GPU faults as `NVRM: Xid (PCI:0000:9b:00): 119, pid=..., <message>`
and the NVSwitch driver as `nvidia-nvswitch2: SXid (PCI:0000:85:00.0): 12028, Non-fatal, ...`.
Kernel log lines come in several timestamp styles, all understood here:

- `[2397166.983093] ...`                        plain `dmesg` (seconds since boot; raw in `time`)
- `[Sun Feb 23 16:24:18 2025] ...`              `dmesg -T` (node-local time, no zone)
- `2025-01-21T04:41:44,283302+00:00 ...`        `dmesg --time-format iso` (optionally with
                                                `--decode`'s `kern  :warn  : ` prefix)
- `2026-11-30T15:00:00+0000 host kernel: ...`   `journalctl -o short-iso` (+ `-precise`)

One `xid` Measurement per GPU event and one `sxid` Measurement per NVSwitch event (its follow-up
`Severity ...` / `Data {...}` lines folded into it, labels `device` "nvswitch1", `link` "48" and
`detail`): value = the code; `gpu` = the GPU index when the caller maps the PCI address (probe
`pci_bus_id`), else None (always None for an SXid); `text` = the driver's message; labels:
`kind` (xid|sxid), `pci` (normalised `dddd:bb:dd`, function dropped), `severity`
(critical|warn|info, from `XID_CATALOGUE` / `SXID_CATALOGUE`), `meaning`, `time` (ISO 8601 when
the line says when, else the raw stamp) and `time_format` (iso|ctime|monotonic|syslog).

Severity follows NVIDIA's "Xid Errors" documentation (the Ampere+ Xid catalog's "Resolution
Bucket (Immediate Action)" column) and the GPU debug guidelines: an event whose immediate action
is a GPU reset, node reboot or hardware service is `critical` (the check fails); an event whose
action is "restart the application" (usually the workload's own fault) is `warn`; events NVIDIA
says to ignore or that only follow another Xid are `info`. An Xid missing from the catalogue is
`warn`: unknown is never silently fine. Two codes take their severity from the message: Xid 154
"(None)" is `info`, and the NVLink5 Xids 144-149 follow the catalog's "Xid 144-150 Decode" of
their IntrInfo / error status (`nvlink5_decode`; critical whenever the message does not decode).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from checks.core.base import Command, CommandOutput, EvidenceError, Measurement
from checks.core.parsers import Parsed, register_parser
from checks.gpu.xid_nvlink5 import IGNORE, RESET_GPU, XID_154_EVAL, nvlink5_decode

CRITICAL = "critical"
WARN = "warn"
INFO = "info"

# Sources named by the catalogue entries.
XID_DOC = "NVIDIA Xid Errors doc, Xid catalog (docs.nvidia.com/deploy/xid-errors)"
DEBUG_GUIDE = "NVIDIA GPU Debug Guidelines (docs.nvidia.com/deploy/gpu-debug-guidelines)"
MEMORY_DOC = "NVIDIA GPU Memory Error Management / Dynamic Page Retirement docs"
NVSWITCH_DOC = "NVIDIA Fabric Manager user guide (DU-09883-001), NVSwitch SXid errors"


@dataclass(frozen=True)
class XidInfo:
    meaning: str
    severity: str
    action: str
    source: str = XID_DOC


XID_CATALOGUE: dict[int, XidInfo] = {
    8: XidInfo("GPU stopped processing (channel idle timeout)", WARN, "restart the application", XID_DOC),
    13: XidInfo("Graphics engine exception", WARN, "restart the application; usually an application bug", XID_DOC),
    31: XidInfo("GPU memory page fault (MMU fault)", WARN, "restart the application; usually an application bug"),
    32: XidInfo("Invalid or corrupted push buffer stream", WARN, "restart the application"),
    # Catalog action IGNORE: a software-induced application fault; the GPU stays healthy.
    43: XidInfo("GPU stopped processing (reset channel verification)", INFO, "none; the application's own fault"),
    # WORKFLOW_XID_45: with another Xid, follow that one (IGNORE); alone, restart Fabric Manager.
    # Ctrl-C, SIGKILL and GPU resets log it too, so it is only recorded; the other Xid is judged.
    45: XidInfo(
        "Preemptive cleanup after a previous error or a killed process",
        INFO,
        "none when it follows another Xid; alone, restart Fabric Manager",
    ),
    46: XidInfo("GPU stopped processing", CRITICAL, "reset the GPU; service if it recurs"),
    48: XidInfo("Double-bit ECC error (DBE)", CRITICAL, "reset the GPU (Xid 48 workflow)", MEMORY_DOC),
    # CHECK_MECHANICALS: check the device's seating and connections.
    54: XidInfo("Auxiliary power is not connected to the GPU board", CRITICAL, "check seating and power connectors"),
    # Listed as unused on A100/H100/B100/GB200 (action CONTACT_SUPPORT).
    56: XidInfo("Display engine error", WARN, "contact support; unused on A100 and newer"),
    61: XidInfo("Internal micro-controller breakpoint/warning (PMU)", CRITICAL, "reset the GPU", DEBUG_GUIDE),
    62: XidInfo("Internal micro-controller halt (PMU)", CRITICAL, "reset the GPU", DEBUG_GUIDE),
    # 63: a row remap / page retirement recorded. The catalog's action is IGNORE (for a running
    # fleet); on an acceptance run of new hardware a remap is worth a look before handover, so
    # `warn`, not `info`. The probe's remap-pending flag fails until the GPU is reset.
    63: XidInfo("ECC page retirement or row remapping recorded", WARN, "reset the GPU to activate it", XID_DOC),
    64: XidInfo("ECC page retirement or row remapping failed", CRITICAL, "reset the GPU; RMA candidate", MEMORY_DOC),
    68: XidInfo("Video processor (NVDEC) exception", WARN, "restart the application"),
    69: XidInfo("Graphics engine class error", WARN, "restart the application"),
    74: XidInfo("NVLink error", CRITICAL, "reset the GPU; check NVLink / NVSwitch", DEBUG_GUIDE),
    79: XidInfo("GPU has fallen off the bus", CRITICAL, "reboot the node; check PCIe seating and power", DEBUG_GUIDE),
    # 92: catalog action IGNORE (for a running fleet); a high corrected-error rate on new hardware
    # is a warning at acceptance. The counters and remapping themselves are judged from the probe.
    92: XidInfo("High single-bit ECC error rate", WARN, "watch ECC counters and remapping", XID_DOC),
    94: XidInfo("Contained ECC error", WARN, "restart the application; reset the GPU when convenient", XID_DOC),
    95: XidInfo("Uncontained ECC error", CRITICAL, "reset the GPU", MEMORY_DOC),
    109: XidInfo("Context switch timeout", CRITICAL, "reset the GPU", XID_DOC),
    110: XidInfo("Security fault", CRITICAL, "reset the GPU; cold reset the system if it persists", XID_DOC),
    119: XidInfo("GSP RPC timeout", CRITICAL, "reset the GPU", DEBUG_GUIDE),
    120: XidInfo("GSP error", CRITICAL, "reset the GPU", DEBUG_GUIDE),
    # Catalog action IGNORE: corrected errors on the C2C link to a Grace CPU, no operational impact.
    121: XidInfo("C2C link corrected error", INFO, "none; a GPU reset at a service window retrains the link", XID_DOC),
    # 122/123 are listed as unused on A100/H100/B100/GB200 (action CONTACT_SUPPORT).
    122: XidInfo("SPI PMU RPC read failure", WARN, "contact support; unused on A100 and newer"),
    123: XidInfo("SPI PMU RPC write failure", CRITICAL, "contact support; unused on A100 and newer"),
    136: XidInfo("NVLink link training failed", CRITICAL, "reset the GPU; investigate link signal integrity", XID_DOC),
    # Catalog action IGNORE (investigation: XID_137_FLOW): usually an application's illegal NVLink
    # peer-to-peer access.
    137: XidInfo("NVLink privilege error (remote MMU fault)", INFO, "none; usually an application bug", XID_DOC),
    139: XidInfo("Optical flow accelerator (OFA1) error", WARN, "restart the application", XID_DOC),
    140: XidInfo("Unrecovered ECC error", CRITICAL, "reset the GPU", MEMORY_DOC),
    143: XidInfo("GPU initialization failure", CRITICAL, "reset the GPU; service if it recurs"),
    # Blackwell NVLink5 events (WORKFLOW_NVLINK5_ERR): the recovery depends on the message's
    # IntrInfo and error status, decoded with the catalog's "Xid 144-150 Decode" sheet (see
    # `nvlink5_decode`). These entries hold for a message that does not decode: critical, since
    # unknown must never pass. 150 (MSE) is RESET_GPU for every status the sheet lists.
    144: XidInfo("NVLink SAW error", CRITICAL, "decode per the catalog's Xid 144-150 table; reset the GPU", XID_DOC),
    145: XidInfo("NVLink RLW error", CRITICAL, "decode per the catalog's Xid 144-150 table; reset the GPU", XID_DOC),
    146: XidInfo("NVLink TLW error", CRITICAL, "decode per the catalog's Xid 144-150 table; reset the GPU", XID_DOC),
    # 147/148: every row the sheet lists for them is IGNORE, so an undecodable one is a warning
    # (look at it), not a reset; the catalog never asks for one.
    147: XidInfo("NVLink TREX error", WARN, "decode per the catalog's Xid 144-150 table (every row: IGNORE)", XID_DOC),
    148: XidInfo(
        "NVLink NVLPW_CTRL error", WARN, "decode per the catalog's Xid 144-150 table (every row: IGNORE)", XID_DOC
    ),
    149: XidInfo("NVLink NETIR error", CRITICAL, "decode per the catalog's Xid 144-150 table; reset the GPU", XID_DOC),
    150: XidInfo("NVLink MSE error", CRITICAL, "reset the GPU", XID_DOC),
    # 154 states the recovery the driver now requires; "(None)" clears it (see catalogue_entry).
    154: XidInfo("GPU recovery action changed", CRITICAL, "perform the named recovery (reset / reboot)"),
    155: XidInfo("NVLink software-defined error (link down)", CRITICAL, "reset the GPU", XID_DOC),
    156: XidInfo("Resource retirement event", CRITICAL, "reset the GPU", XID_DOC),
    158: XidInfo("GPU fatal timeout", CRITICAL, "reset the GPU", XID_DOC),
}

# SXid codes: the Fabric Manager user guide (DU-09883-001_v1.3, "Non-Fatal NVSwitch SXid Errors" and
# "Fatal NVSwitch SXid Errors") as leptonai/gpud transcribes it (components/accelerator/nvidia/sxid/
# sxid.go at 09b59a5b). Its corrected single-bit ECC codes have "no guest VM impact" (the NVSwitch
# corrects them): on new hardware, a warning worth a look, like Xid 92. Its fatal codes ask to restart
# the system and, when the SXid returns, to inspect and repair the NVSwitch: critical.
_SBE = "NVSwitch single-bit ECC error (corrected by the switch)"
_SBE_ACTION = "none for the workload; watch for recurrence on new hardware"
_SBE_CODES = (11012, 11021, 11022, 11023, 12021, 12023, 15008, 15011, 19049, 19055, 19057, 19059, 19062, 19065,
              19068, 19071, 24001)  # fmt: skip
_FATAL_ACTION = "reboot the node to reset the NVSwitch; inspect and repair it if the SXid returns"
SXID_CATALOGUE: dict[int, XidInfo] = {
    11004: XidInfo("NVSwitch ingress invalid ACL", CRITICAL, "reset the NVSwitch tray / node", NVSWITCH_DOC),
    **{code: XidInfo(_SBE, WARN, _SBE_ACTION, NVSWITCH_DOC) for code in _SBE_CODES},
    12028: XidInfo("NVSwitch egress non-posted PRIV error", WARN, "watch for recurrence", NVSWITCH_DOC),
    15001: XidInfo("NVSwitch route buffer over/underflow", CRITICAL, _FATAL_ACTION, NVSWITCH_DOC),
    15006: XidInfo("NVSwitch route transdone over/underflow", CRITICAL, _FATAL_ACTION, NVSWITCH_DOC),
    15009: XidInfo("NVSwitch route GLT double-bit ECC error", CRITICAL, _FATAL_ACTION, NVSWITCH_DOC),
    15010: XidInfo("NVSwitch route parity error", CRITICAL, _FATAL_ACTION, NVSWITCH_DOC),
    15012: XidInfo("NVSwitch route incoming double-bit ECC error", CRITICAL, _FATAL_ACTION, NVSWITCH_DOC),
    15013: XidInfo("NVSwitch route credit parity error", CRITICAL, _FATAL_ACTION, NVSWITCH_DOC),
    19047: XidInfo("NVSwitch NCISOC header double-bit ECC error", CRITICAL, _FATAL_ACTION, NVSWITCH_DOC),
    19048: XidInfo("NVSwitch NCISOC data double-bit ECC error", CRITICAL, _FATAL_ACTION, NVSWITCH_DOC),
    19054: XidInfo("NVSwitch HDR RAM double-bit ECC error", CRITICAL, _FATAL_ACTION, NVSWITCH_DOC),
    19056: XidInfo("NVSwitch DAT0 RAM double-bit ECC error", CRITICAL, _FATAL_ACTION, NVSWITCH_DOC),
    19058: XidInfo("NVSwitch DAT1 RAM double-bit ECC error", CRITICAL, _FATAL_ACTION, NVSWITCH_DOC),
    19060: XidInfo("NVSwitch CREQ RAM header double-bit ECC error", CRITICAL, _FATAL_ACTION, NVSWITCH_DOC),
    19061: XidInfo("NVSwitch CREQ RAM data double-bit ECC error", CRITICAL, _FATAL_ACTION, NVSWITCH_DOC),
    19063: XidInfo("NVSwitch response RAM header double-bit ECC error", CRITICAL, _FATAL_ACTION, NVSWITCH_DOC),
    19064: XidInfo("NVSwitch response RAM data double-bit ECC error", CRITICAL, _FATAL_ACTION, NVSWITCH_DOC),
    20034: XidInfo("NVSwitch LTSSM fault (NVLink link down)", CRITICAL, "check the NVLink / trunk link", NVSWITCH_DOC),
    22013: XidInfo("NVSwitch minion link DLREQ fault", CRITICAL, "reset the NVSwitch tray / node", NVSWITCH_DOC),
}

_XID = re.compile(
    r"\b(?P<kind>S?Xid) \((?:PCI:)?(?P<pci>[0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+(?:\.[0-7])?)\): "
    r"(?P<code>\d+),?\s*(?P<message>.*)$"
)
_DECODE = re.compile(r"^[a-z]+\s*:[a-z]+\s*:\s+")  # dmesg --decode: "kern  :warn  : "
_ISO = re.compile(r"^(?P<stamp>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:[,.]\d+)?(?:Z|[+-]\d{2}:?\d{2})?)\s")
_CTIME = re.compile(r"^\[(?P<stamp>[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2} \d{4})\]\s?")
_MONOTONIC = re.compile(r"^\[\s*(?P<stamp>\d+\.\d+)\]\s?")
_SYSLOG = re.compile(r"^(?P<stamp>[A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2})\s+\S+\s")
# journalctl's own lines: an empty result, boot separators, the reboot marker.
_JOURNAL_META = re.compile(r"^-- (No entries|Boot |Logs begin|Journal begins|Reboot) ")
_RECOVERY_NONE = re.compile(r"to 0x0 \(None\)", re.IGNORECASE)
# The NVSwitch driver reports one SXid in several lines (open-gpu-kernel-modules nvswitch
# NVSWITCH_PRINT_SXID, "nvidia-%s: SXid (PCI:%04x:%02x:%02x.%x): %05d, " + text): a head line
# "<code>, Fatal|Non-fatal, Link N <what>", then for the same event "<code>, Severity N Engine
# instance N Sub-engine instance N" and "<code>, Data {...}". Only the head is an event.
_SXID_DEVICE = re.compile(r"nvidia-(?P<device>nvswitch\d+):?\s+SXid\b")
_SXID_CONTINUATION = re.compile(r"^(Severity \d+\b|Data \{)")
_SXID_LINK = re.compile(r"\bLink (?P<link>\d+)\b")
_SXID_ENGINE = re.compile(r"\bEngine instance (?P<link>\d+)\b")
_SXID_FATAL = re.compile(r"^(Fatal|Non-fatal)\b", re.IGNORECASE)  # the driver's own word on the head line


# Xid 144-149 (decoded in checks/gpu/xid_nvlink5.py):
# buckets -> severity: RESET_GPU -> critical; XID_154_EVAL ("If an XID 154 is seen along with this
# error, take that action. If no XID 154 present, RESTART_APP") -> warn (the 154 line is judged on
# its own); IGNORE ("No Action required") -> info. A downgrade also needs the driver's own word
# "Nonfatal": the sheet's two IGNORE rows the driver prints as Fatal (NETIR link-down reasons
# 100110, 101000) put the GPU in "drain and reset" per the sheet's Severity notes, so they stay
# critical. A message that does not decode (no registers, a name/IntrInfo that matches no row, a
# status the sheet does not list) keeps the catalogue's critical. Xid 150 is not decoded: every
# row of the sheet for it is RESET_GPU.
_BUCKET_SEVERITY = {RESET_GPU: CRITICAL, XID_154_EVAL: WARN, IGNORE: INFO}


@dataclass(frozen=True)
class XidEvent:
    kind: str  # "xid" | "sxid"
    code: int
    pci: str
    message: str
    time: str  # ISO 8601 when known, else the raw stamp ("" when the line had none)
    time_format: str  # iso | ctime | monotonic | syslog | none
    epoch: float | None  # Unix seconds when the stamp carries a zone (ISO), else None
    severity: str
    meaning: str
    # SXid only: the switch device ("nvswitch2"), the NVLink port ("48"), and the report's
    # continuation lines ("Severity 1 Engine instance 48 ...", "Data {...}") folded into this event.
    device: str = ""
    link: str = ""
    detail: str = ""


def normalise_pci(text: str) -> str:
    """'00000000:18:00.0', '0000:18:00', 'PCI:0000:18:00' -> '0000:18:00' (domain:bus:device).

    Xid lines drop the PCI function and NVML pads the domain to 8 digits; both sides of the
    GPU mapping go through here so they compare equal."""
    text = text.strip().removeprefix("PCI:").split(".")[0]
    parts = text.split(":")
    if len(parts) == 2:  # bus:device without a domain
        parts = ["0", *parts]
    try:
        domain, bus, device = (int(p, 16) for p in parts[-3:])
    except ValueError:
        return text.lower()
    return f"{domain:04x}:{bus:02x}:{device:02x}"


def catalogue_entry(kind: str, code: int, message: str = "") -> XidInfo:
    if kind == "sxid":
        known = SXID_CATALOGUE.get(code)
        # The NVSwitch driver says itself whether the error is fatal (Fabric Manager guide).
        fatal = message.lstrip().lower().startswith("fatal")
        if known and fatal and known.severity != CRITICAL:
            action = f"{known.action}; the driver reports it Fatal, so judged critical"
            return XidInfo(known.meaning, CRITICAL, action, known.source)
        if known:
            return known
        severity = CRITICAL if fatal else WARN
        return XidInfo(
            "NVSwitch error (not in Kiln's catalogue)", severity, "see the Fabric Manager guide", NVSWITCH_DOC
        )
    known = XID_CATALOGUE.get(code)
    if known is None:
        return XidInfo("not in Kiln's catalogue", WARN, "look the code up in NVIDIA's Xid catalog")
    if code == 154 and _RECOVERY_NONE.search(message):
        return XidInfo(known.meaning, INFO, "none: the required recovery was cleared", known.source)
    if 144 <= code <= 149 and (decoded := nvlink5_decode(code, message)) is not None:
        status = "" if decoded.status is None else f", error status 0x{decoded.status:08x}"
        action = f"{decoded.bucket} per the catalog's Xid 144-150 decode ({decoded.unit}{status})"
        if decoded.fatal and decoded.bucket != RESET_GPU:
            action += "; the driver reports it Fatal, so judged critical"
        # The driver calls it fatal: never downgraded.
        severity = CRITICAL if decoded.fatal else _BUCKET_SEVERITY[decoded.bucket]
        return XidInfo(known.meaning, severity, action, known.source)
    return known


def xid_action(row: Mapping[str, Any]) -> str:
    """The catalogue's action for a stored `xid` or `sxid` measurement row (the triage view's "what to do")."""
    labels = row.get("labels") or {}
    if row.get("value") is None:
        return "look the code up in NVIDIA's Xid catalog"
    return catalogue_entry(labels.get("kind", "xid"), int(row["value"]), row.get("text") or "").action


def _parse_iso(stamp: str) -> tuple[str, float | None]:
    text = stamp.replace(",", ".")
    match = re.match(r"^(.*T\d{2}:\d{2}:\d{2})(?:\.(\d+))?(Z|[+-]\d{2}:?\d{2})?$", text)
    if not match:
        return stamp, None
    base, frac, zone = match.groups()
    if frac:
        base += "." + (frac + "000000")[:6]
    if zone:
        zone = "+00:00" if zone == "Z" else zone if ":" in zone else f"{zone[:3]}:{zone[3:]}"
        base += zone
    try:
        when = dt.datetime.fromisoformat(base)
    except ValueError:
        return stamp, None
    return when.isoformat(), when.timestamp() if when.tzinfo else None


def _split_stamp(line: str) -> tuple[str, str, float | None, str] | None:
    """(time, time_format, epoch, rest of the line), or None when the line has no known stamp."""
    line = _DECODE.sub("", line, count=1)
    if match := _ISO.match(line):
        when, epoch = _parse_iso(match["stamp"])
        return when, "iso", epoch, line[match.end() :]
    if match := _CTIME.match(line):
        try:
            when = dt.datetime.strptime(" ".join(match["stamp"].split()), "%a %b %d %H:%M:%S %Y").isoformat()
        except ValueError:
            when = match["stamp"]
        return when, "ctime", None, line[match.end() :]
    if match := _MONOTONIC.match(line):
        return match["stamp"], "monotonic", None, line[match.end() :]
    if match := _SYSLOG.match(line):
        return match["stamp"], "syslog", None, line[match.end() :]
    return None


def parse_kernel_log(text: str) -> tuple[list[XidEvent], int]:
    """Every Xid/SXid event in a kernel log, and how many lines were recognised as kernel log."""
    events: list[XidEvent] = []
    sxid_heads: dict[tuple[str, int], int] = {}  # (switch PCI, code) -> index of its last head event
    recognised = 0
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if _JOURNAL_META.match(line):
            recognised += 1
            continue
        stamped = _split_stamp(line)
        if stamped is None:
            when, fmt, epoch, rest = "", "none", None, line
        else:
            recognised += 1
            when, fmt, epoch, rest = stamped
        match = _XID.search(rest)
        if not match:
            continue
        kind = match["kind"].lower()
        code = int(match["code"])
        message = match["message"].strip()
        pci = normalise_pci(match["pci"])
        if kind == "sxid" and _fold_sxid(events, sxid_heads, pci, code, message):
            continue
        info = catalogue_entry(kind, code, message)
        device = link = ""
        if kind == "sxid":
            found = _SXID_DEVICE.search(rest)
            device = found["device"] if found else ""
            linked = _SXID_LINK.search(message) or _SXID_ENGINE.search(message)
            link = linked["link"].lstrip("0") or "0" if linked else ""
        event = XidEvent(kind, code, pci, message, when, fmt, epoch, info.severity, info.meaning, device, link)
        if kind == "sxid" and not _SXID_CONTINUATION.match(message):
            sxid_heads[(pci, code)] = len(events)
        events.append(event)
    return events, recognised


def _fold_sxid(events: list[XidEvent], heads: dict[tuple[str, int], int], pci: str, code: int, message: str) -> bool:
    """Fold an SXid continuation line into the last head event of the same switch and code; False
    when the line is a head, or a continuation with no head before it (it then stands alone:
    an event is never dropped because its first line is missing)."""
    if not _SXID_CONTINUATION.match(message):
        return False
    position = heads.get((pci, code))
    if position is None:
        return False
    head = events[position]
    engine = _SXID_ENGINE.search(message)
    if engine and head.link and (engine["link"].lstrip("0") or "0") != head.link:
        return False  # another port's report
    detail = f"{head.detail}; {message}" if head.detail else message
    events[position] = dataclasses.replace(head, detail=detail)
    return True


def since_filter(events: list[XidEvent], since: float | None) -> list[XidEvent]:
    """Events at or after `since`. An event whose time cannot be compared is kept: an old event
    counted again is a visible false alarm, a new one dropped would be a silent pass."""
    if since is None:
        return events
    return [e for e in events if e.epoch is None or e.epoch >= since]


def xid_measurements(events: list[XidEvent], gpu_by_pci: dict[str, int] | None = None) -> list[Measurement]:
    mapping = gpu_by_pci or {}
    out = []
    for e in events:
        labels = {
            "kind": e.kind,
            "pci": e.pci,
            "severity": e.severity,
            "meaning": e.meaning,
            "time": e.time,
            "time_format": e.time_format,
        }
        for name in ("device", "link", "detail"):
            if getattr(e, name):
                labels[name] = getattr(e, name)
        if e.kind == "sxid" and (word := _SXID_FATAL.match(e.message)):
            labels["driver_severity"] = "Fatal" if word[1].lower() == "fatal" else "Non-fatal"
        gpu = mapping.get(e.pci) if e.kind == "xid" else None
        # An NVSwitch event is its own measurement (`sxid`): it names a switch, never a GPU.
        out.append(Measurement(name=e.kind, value=float(e.code), gpu=gpu, text=e.message, labels=labels))
    return out


@register_parser("dmesg")
def parse_dmesg(text: str) -> Parsed:
    """`dmesg` (any time format) or `journalctl -k` output -> one `xid` / `sxid` measurement per event."""
    events, recognised = parse_kernel_log(text)
    if not recognised and not events:
        first = next((line.strip() for line in text.splitlines() if line.strip()), "")
        raise EvidenceError(f"not a kernel log: no timestamped line ({first[:80]!r})")
    warnings = [] if events else ["no Xid or SXid events"]
    return Parsed(xid_measurements(events), warnings)


# --- reading the kernel log on a node ------------------------------------------------------------

KERNEL_LOG_LABEL = "kernel log"
KERNEL_LOG_MARK = "@@kiln-kernel-log"  # the kernel-log script's end-of-reader line
_MARK = KERNEL_LOG_MARK
# journalctl says these (on stderr) when it shows less than the whole system journal: without
# them recognised, a user outside `systemd-journal`/`adm` would read "-- No entries --" and pass.
_JOURNAL_BLIND = (
    "insufficient permissions",
    "not seeing messages from other users and the system",
    "No journal files were found",
    "No journal files were opened",
)
# Fixed script, the epoch passed as $1 (never interpolated). journalctl first (its --since is
# exact and it survives ring-buffer wrap), dmesg when journalctl is absent, fails, or is blind.
# Each reader's output is followed by a marker line with its exit status; stderr is passed on.
KERNEL_LOG_SCRIPT = r"""since="$1"
use_dmesg=1
if command -v journalctl >/dev/null 2>&1; then
  if [ -n "$since" ]; then
    { jerr=$(journalctl -k --since "@$since" -o short-iso --no-pager 2>&1 >&3); jrc=$?; } 3>&1
  else
    { jerr=$(journalctl -k -o short-iso --no-pager 2>&1 >&3); jrc=$?; } 3>&1
  fi
  [ -n "$jerr" ] && printf '%s\n' "$jerr" >&2
  printf '\n@@kiln-kernel-log source=journalctl rc=%s\n' "$jrc"
  use_dmesg=
  [ "$jrc" -ne 0 ] && use_dmesg=1
  case "$jerr" in
    *"insufficient permissions"*|*"not seeing messages from other users"*|*"No journal files were"*) use_dmesg=1;;
  esac
fi
if [ -n "$use_dmesg" ]; then
  if command -v dmesg >/dev/null 2>&1; then
    dmesg --time-format iso
    printf '\n@@kiln-kernel-log source=dmesg rc=%s\n' "$?"
  else
    echo "dmesg: command not found" >&2
    printf '\n@@kiln-kernel-log source=dmesg rc=127\n'
  fi
fi
"""


def kernel_log_command(since: float | None, timeout: float = 60.0) -> Command:
    epoch = "" if since is None else str(int(since))
    # journalctl -k / dmesg: reads the kernel ring buffer, clears nothing.
    return Command(
        argv=("sh", "-c", KERNEL_LOG_SCRIPT, "sh", epoch), timeout=timeout, label=KERNEL_LOG_LABEL, read_only=True
    )


@dataclass
class KernelLog:
    source: str  # journalctl | dmesg
    since: float | None
    events: list[XidEvent]


def read_kernel_log(output: CommandOutput) -> KernelLog:
    """The usable section of the kernel log command's output, Xid events since the run start.

    EvidenceError("kernel log unreadable: ...") when no reader gave a trustworthy answer."""
    since_arg = output.command.argv[-1] if output.command.argv else ""
    since = float(since_arg) if since_arg.strip().isdigit() else None
    sections = _sections(output.stdout)
    stderr_lines = [s.strip() for s in output.stderr.splitlines() if s.strip()]
    if not sections:
        hint = f": {stderr_lines[-1][:200]}" if stderr_lines else ""
        raise EvidenceError(f"kernel log unreadable: the reader printed no end marker{hint}")
    problems = []
    for source, rc, text in reversed(sections):  # the fallback (last) is what the script chose
        blind = [s for s in stderr_lines if any(p in s for p in _JOURNAL_BLIND)] if source == "journalctl" else []
        if rc == 0 and not blind:
            events, recognised = parse_kernel_log(text)
            if text.strip() and not recognised:
                first = text.strip().splitlines()[0][:80]
                problems.append(f"{source} printed no kernel log lines ({first!r})")
                continue
            return KernelLog(source=source, since=since, events=since_filter(events, since))
        why = blind[0] if blind else _reason_for(source, stderr_lines)
        problems.append(f"{source} exited {rc}: {why}" if rc else f"{source}: {why}")
    raise EvidenceError("kernel log unreadable: " + "; ".join(reversed(problems)))


def _sections(stdout: str) -> list[tuple[str, int, str]]:
    """(source, exit status, text) of each reader the script ran, from its end-marker lines; an
    unreadable status is -1."""
    sections: list[tuple[str, int, str]] = []
    lines: list[str] = []
    for line in stdout.splitlines():
        if line.startswith(_MARK):
            fields = dict(part.split("=", 1) for part in line.split()[1:] if "=" in part)
            rc = fields.get("rc", "")
            sections.append((fields.get("source", "?"), int(rc) if rc.lstrip("-").isdigit() else -1, "\n".join(lines)))
            lines = []
        else:
            lines.append(line)
    return sections


def _reason_for(source: str, stderr_lines: list[str]) -> str:
    mine = [s for s in stderr_lines if s.startswith(source)]
    if mine:
        return mine[-1][:200]
    others = [s for s in stderr_lines if not any(p in s for p in _JOURNAL_BLIND)]
    return (others or stderr_lines or ["no stderr"])[-1][:200]
