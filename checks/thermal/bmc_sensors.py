"""The BMC's coolant and leak sensors, as dlc_temperature reads them (checks/thermal/check.py): parsers
`ipmitool_sdr` (compact `ipmitool sdr`) and `redfish_thermal` (Thermal v1.x `Temperatures` and
ThermalMetrics `TemperatureReadingsCelsius`, LeakDetectors when present) -> `temperature` (value
C, labels sensor, unit) and `sensor` (text "ok" / "asserted" / "no reading", labels sensor)."""

from __future__ import annotations

import re
from typing import Any

from checks.core.base import EvidenceError, Measurement
from checks.core.parsers import Parsed, load_json, register_parser


def _sensor_state(name: str, condition: str, raw: float | None = None, **labels: str) -> Measurement:
    return Measurement(name="sensor", text=condition, value=raw, labels={"sensor": name, **labels})


@register_parser("ipmitool_sdr")
def parse_ipmitool_sdr(text: str) -> Parsed:
    """Compact `ipmitool sdr` ("Name | Reading units | status"): temperatures as `temperature`,
    discrete sensors (hex readings) as `sensor` with state ok / asserted / no reading."""
    out: list[Measurement] = []
    warnings: list[str] = []
    rows = 0
    for line in text.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) != 3 or not parts[0]:
            continue
        rows += 1
        name, reading, status = parts
        temp = re.fullmatch(r"(-?[\d.]+) degrees C", reading)
        if temp:
            out.append(
                Measurement(
                    name="temperature", value=float(temp.group(1)), unit="C", labels={"sensor": name, "unit": "C"}
                )
            )
            if status not in ("ok", ""):
                out.append(_sensor_state(name, "asserted", None, status=status))
            continue
        hexval = re.fullmatch(r"0x([0-9a-fA-F]+)", reading)
        if hexval:
            raw = int(hexval.group(1), 16)
            # A discrete sensor (leak, fault) reads 0x00 when no state is asserted.
            asserted = raw != 0 or status in ("cr", "nr", "nc")
            out.append(_sensor_state(name, "asserted" if asserted else "ok", float(raw), status=status))
        elif status == "ns" or reading in ("no reading", "Not Readable", "disabled"):
            out.append(_sensor_state(name, "no reading", None, status=status or "ns"))
    if not rows:
        raise EvidenceError("not ipmitool sdr output (no 'Name | Reading | Status' rows)")
    if not out:
        # Rows of three '|' fields but no reading Kiln understands: garbage, or a BMC with no
        # temperature or discrete sensor at all. Either way there is no evidence to judge.
        raise EvidenceError(f"ipmitool sdr output has no temperature or discrete sensor reading ({rows} rows)")
    return Parsed(out, warnings)


def _health(item: dict[str, Any]) -> str:
    status = item.get("Status")
    return str(status.get("Health") or "") if isinstance(status, dict) else ""


@register_parser("redfish_thermal")
def parse_redfish_thermal(text: str) -> Parsed:
    """Redfish Thermal (legacy, Temperatures[].ReadingCelsius) or ThermalSubsystem/ThermalMetrics
    (TemperatureReadingsCelsius[].Reading); LeakDetectors[].DetectorState when present."""
    doc = load_json(text, "Redfish output")
    if not isinstance(doc, dict):
        raise EvidenceError("Redfish output is not a JSON object")
    warnings: list[str] = []
    # Thermal v1.x (e.g. Dell iDRAC), then ThermalMetrics v1.x (e.g. HPE iLO).
    legacy = _redfish_temperatures(doc.get("Temperatures"), ("Name", "MemberId"), "ReadingCelsius", health=True)
    metrics = _redfish_temperatures(
        doc.get("TemperatureReadingsCelsius"), ("DeviceName", "DataSourceUri"), "Reading", health=False
    )
    leaks = _redfish_leaks(doc.get("LeakDetectors"))
    out = [m for found in (legacy, metrics, leaks) if found is not None for m in found]
    known = any(found is not None for found in (legacy, metrics, leaks))
    if "Fans" in doc:
        known = True
    if not known:
        raise EvidenceError("Redfish document has no Temperatures / TemperatureReadingsCelsius / LeakDetectors")
    if not any(m.name == "temperature" for m in out):
        warnings.append("no temperature readings in the Redfish document")
    return Parsed(out, warnings)


def _redfish_temperatures(
    items: Any, name_keys: tuple[str, str], value_key: str, *, health: bool
) -> list[Measurement] | None:
    """`temperature` per readable item, else `sensor` "no reading" (and "asserted" on a bad Health,
    where the schema has one); None when the document has no such items."""
    out: list[Measurement] | None = None
    for item in items or []:
        out = out if out is not None else []
        if not isinstance(item, dict):
            continue
        name = str(item.get(name_keys[0]) or item.get(name_keys[1]) or "")
        value = item.get(value_key)
        labels = {"sensor": name, "unit": "C", "context": str(item.get("PhysicalContext") or "")}
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out.append(Measurement(name="temperature", value=float(value), unit="C", labels=labels))
        else:
            out.append(_sensor_state(name, "no reading"))
        if health and _health(item) not in ("", "OK"):
            out.append(_sensor_state(name, "asserted", None, health=_health(item)))
    return out


def _redfish_leaks(items: Any) -> list[Measurement] | None:
    """LeakDetection v1.x (DMTF, liquid-cooled chassis): DetectorState -> ok / asserted / no reading;
    None when the document has no leak detectors."""
    out: list[Measurement] | None = None
    for item in items or []:
        out = out if out is not None else []
        if isinstance(item, dict):
            state = str(item.get("DetectorState") or "")
            text_state = "ok" if state == "OK" else ("no reading" if not state else "asserted")
            out.append(_sensor_state(str(item.get("Name") or item.get("Id") or ""), text_state, None, state=state))
    return out
