#!/usr/bin/env python3
"""Kiln node probe: one self-contained file, run on a node as `python3 - < probe.py`.

Reads GPU inventory and health facts through NVML (pynvml) and prints the JSON of
checks/probe/SCHEMA.md on stdout. When NVML is unusable it falls back to parsing
`nvidia-smi -q -x`. It never raises: every failure lands in `errors`.

Constraints (it runs on whatever python3 a node has): standard library + optional pynvml,
Python >= 3.8 syntax only, no imports from the Kiln repo.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

SCHEMA_VERSION = 1
# The sampling document's own version (SCHEMA.md "Sampling mode"): 2 prints the samples as one
# array per GPU per field; version 1 printed one object per sample (the portal still reads it).
SAMPLING_SCHEMA_VERSION = 2
NVIDIA_SMI_TIMEOUT_S = 30.0
EXIT_OK = 0
EXIT_NOTHING_READ = 3

# NVML C enum values. Defined here rather than read from pynvml so that an old pynvml on a node
# (which may lack a newer constant name) still works: the ABI values never change.
NVML_TEMPERATURE_GPU = 0
NVML_TEMPERATURE_THRESHOLD_SHUTDOWN = 0
NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1
NVML_TEMPERATURE_THRESHOLD_MEM_MAX = 2
NVML_TEMPERATURE_THRESHOLD_GPU_MAX = 3
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
NVML_FI_DEV_MEMORY_TEMP = 82
NVML_CLOCK_SM = 1
NVML_ERROR_FUNCTION_NOT_FOUND = 13

# Clock-event reason bits (nvmlClocksEventReason*), in bit order, with the schema's names.
CLOCK_EVENT_REASONS: Tuple[Tuple[int, str], ...] = (
    (0x001, "gpu_idle"),
    (0x002, "applications_clocks_setting"),
    (0x004, "sw_power_cap"),
    (0x008, "hw_slowdown"),
    (0x010, "sync_boost"),
    (0x020, "sw_thermal_slowdown"),
    (0x040, "hw_thermal_slowdown"),
    (0x080, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)
_REASON_BITS = {name: bit for bit, name in CLOCK_EVENT_REASONS}
# nvidia-smi spells one reason differently from NVML ("clocks" vs "clock").
_XML_REASON_ALIASES = {
    "display_clocks_setting": "display_clock_setting",
    "user_defined_clocks": "applications_clocks_setting",
}

# Texts nvidia-smi prints for "no value". Compared lowercased, with brackets stripped.
_NA_TEXTS = frozenset(
    ["", "n/a", "not supported", "requested functionality has been deprecated", "unknown error", "not available"]
)


# ----------------------------------------------------------------------------- result skeleton


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_result() -> Dict[str, Any]:
    return {
        "schema": SCHEMA_VERSION,
        "source": "none",
        "hostname": None,
        "collected_at": None,
        "driver_version": None,
        "cuda_version": None,
        "gpu_count": None,
        "gpus": [],
        "errors": [],
    }


def new_gpu(index: int) -> Dict[str, Any]:
    """A GPU record with every field present and null: null means "no evidence", never zero."""
    return {
        "index": index,
        "name": None,
        "uuid": None,
        "serial": None,
        "pci_bus_id": None,
        "vbios_version": None,
        "ecc_mode": {"current": None, "pending": None},
        "ecc_errors": {
            "volatile": {"corrected": None, "uncorrected": None},
            "aggregate": {"corrected": None, "uncorrected": None},
        },
        "remapped_rows": None,
        "retired_pages": None,
        "temperature": {
            "gpu": None,
            "memory": None,
            "slowdown": None,
            "shutdown": None,
            "gpu_max_operating": None,
            "memory_max_operating": None,
        },
        "power": {"draw_w": None, "limit_w": None},
        "clock_event_reasons": {"mask": None, "active": None},
        "pcie": {"gen_current": None, "gen_max": None, "width_current": None, "width_max": None},
        "errors": {},
    }


def reasons_from_mask(mask: int) -> List[str]:
    return [name for bit, name in CLOCK_EVENT_REASONS if mask & bit]


def cuda_version_from_int(value: int) -> Optional[str]:
    """NVML reports CUDA as 1000*major + 10*minor (12040 -> "12.4")."""
    if value <= 0:
        return None
    return "%d.%d" % (value // 1000, (value % 1000) // 10)


# ----------------------------------------------------------------------------- NVML path


def _err_text(err: BaseException) -> str:
    text = str(err)
    return text or type(err).__name__


def _is_function_not_found(err: BaseException) -> bool:
    # Old pynvml lacks newer wrappers (AttributeError); old drivers lack newer C symbols
    # (NVMLError_FunctionNotFound). Both mean: try the older spelling.
    return isinstance(err, AttributeError) or getattr(err, "value", None) == NVML_ERROR_FUNCTION_NOT_FOUND


def _call_first(nv: Any, names: Sequence[str], *args: Any) -> Any:
    """Call the first wrapper in `names` that exists in both pynvml and the driver."""
    last: Optional[BaseException] = None
    for name in names:
        try:
            fn = getattr(nv, name)
            return fn(*args)
        except Exception as err:  # noqa: BLE001 - NVMLError or AttributeError, decided below
            if not _is_function_not_found(err):
                raise
            last = err
    assert last is not None
    raise last


def _read(gpu: Dict[str, Any], field: str, fn: Callable[[], Any]) -> Any:
    """Run one NVML read; on any failure record it under gpu["errors"][field] and return None."""
    try:
        return fn()
    except Exception as err:  # noqa: BLE001 - one bad read must never abort the probe
        gpu["errors"][field] = _err_text(err)
        return None


def _memory_temperature(nv: Any, handle: Any) -> int:
    """HBM temperature has no NVML getter of its own; it is field NVML_FI_DEV_MEMORY_TEMP."""
    values = nv.nvmlDeviceGetFieldValues(handle, [NVML_FI_DEV_MEMORY_TEMP])
    value = values[0]
    if value.nvmlReturn != 0:
        raise nv.NVMLError(value.nvmlReturn)
    kind = value.valueType
    union = value.value
    by_type = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
    return int(getattr(union, by_type.get(kind, "uiVal")))


def _nvml_gpu(nv: Any, index: int) -> Dict[str, Any]:
    gpu = new_gpu(index)
    try:
        handle = nv.nvmlDeviceGetHandleByIndex(index)
    except Exception as err:  # noqa: BLE001 - a lost GPU still shows up, with every field null
        gpu["errors"]["handle"] = _err_text(err)
        return gpu

    gpu["name"] = _read(gpu, "name", lambda: nv.nvmlDeviceGetName(handle))
    gpu["uuid"] = _read(gpu, "uuid", lambda: nv.nvmlDeviceGetUUID(handle))
    gpu["serial"] = _read(gpu, "serial", lambda: nv.nvmlDeviceGetSerial(handle))
    gpu["vbios_version"] = _read(gpu, "vbios_version", lambda: nv.nvmlDeviceGetVbiosVersion(handle))
    pci = _read(gpu, "pci_bus_id", lambda: nv.nvmlDeviceGetPciInfo(handle))
    if pci is not None:
        bus_id = pci.busId
        gpu["pci_bus_id"] = bus_id.decode() if isinstance(bus_id, bytes) else str(bus_id)

    mode = _read(gpu, "ecc_mode", lambda: nv.nvmlDeviceGetEccMode(handle))
    if mode is not None:
        gpu["ecc_mode"] = {"current": bool(mode[0]), "pending": bool(mode[1])}

    for counter_name, counter in (("volatile", NVML_VOLATILE_ECC), ("aggregate", NVML_AGGREGATE_ECC)):
        for kind_name, kind in (
            ("corrected", NVML_MEMORY_ERROR_TYPE_CORRECTED),
            ("uncorrected", NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
        ):
            gpu["ecc_errors"][counter_name][kind_name] = _read(
                gpu,
                "ecc_errors.%s.%s" % (counter_name, kind_name),
                lambda k=kind, c=counter: int(nv.nvmlDeviceGetTotalEccErrors(handle, k, c)),
            )

    rows = _read(gpu, "remapped_rows", lambda: nv.nvmlDeviceGetRemappedRows(handle))
    if rows is not None:
        corr, unc, pending, failure = rows
        gpu["remapped_rows"] = {
            "correctable": int(corr),
            "uncorrectable": int(unc),
            "pending": bool(pending),
            "failure": bool(failure),
        }

    # Page retirement exists before Ampere only; later GPUs answer NotSupported -> null.
    sbe = _read(
        gpu,
        "retired_pages",
        lambda: len(nv.nvmlDeviceGetRetiredPages(handle, NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)),
    )
    if sbe is not None:
        dbe = _read(
            gpu,
            "retired_pages.double_bit",
            lambda: len(nv.nvmlDeviceGetRetiredPages(handle, NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)),
        )
        pending_pages = _read(
            gpu, "retired_pages.pending", lambda: bool(nv.nvmlDeviceGetRetiredPagesPendingStatus(handle))
        )
        gpu["retired_pages"] = {"single_bit": sbe, "double_bit": dbe, "pending": pending_pages}

    temp = gpu["temperature"]
    temp["gpu"] = _read(
        gpu,
        "temperature.gpu",
        lambda: int(_call_first(nv, ("nvmlDeviceGetTemperature", "nvmlDeviceGetTemperatureV"), handle, 0)),
    )
    temp["memory"] = _read(gpu, "temperature.memory", lambda: _memory_temperature(nv, handle))
    for key, threshold in (
        ("slowdown", NVML_TEMPERATURE_THRESHOLD_SLOWDOWN),
        ("shutdown", NVML_TEMPERATURE_THRESHOLD_SHUTDOWN),
        ("gpu_max_operating", NVML_TEMPERATURE_THRESHOLD_GPU_MAX),
        ("memory_max_operating", NVML_TEMPERATURE_THRESHOLD_MEM_MAX),
    ):
        temp[key] = _read(
            gpu,
            "temperature." + key,
            lambda t=threshold: int(nv.nvmlDeviceGetTemperatureThreshold(handle, t)),
        )

    # NVML reports milliwatts.
    draw = _read(gpu, "power.draw_w", lambda: nv.nvmlDeviceGetPowerUsage(handle))
    limit = _read(gpu, "power.limit_w", lambda: nv.nvmlDeviceGetEnforcedPowerLimit(handle))
    gpu["power"] = {
        "draw_w": None if draw is None else round(draw / 1000.0, 3),
        "limit_w": None if limit is None else round(limit / 1000.0, 3),
    }

    mask = _read(
        gpu,
        "clock_event_reasons",
        lambda: int(
            _call_first(
                nv,
                ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"),
                handle,
            )
        ),
    )
    if mask is not None:
        gpu["clock_event_reasons"] = {"mask": mask, "active": reasons_from_mask(mask)}

    pcie = gpu["pcie"]
    for key, name in (
        ("gen_current", "nvmlDeviceGetCurrPcieLinkGeneration"),
        ("gen_max", "nvmlDeviceGetMaxPcieLinkGeneration"),
        ("width_current", "nvmlDeviceGetCurrPcieLinkWidth"),
        ("width_max", "nvmlDeviceGetMaxPcieLinkWidth"),
    ):
        pcie[key] = _read(gpu, "pcie." + key, lambda n=name: int(getattr(nv, n)(handle)))
    return gpu


def collect_nvml(result: Dict[str, Any]) -> bool:
    """Fill `result` through pynvml. Returns False (with the reason in errors) when NVML is unusable."""
    errors: List[str] = result["errors"]
    try:
        import pynvml as nv  # type: ignore[import-not-found]
    except Exception as err:  # noqa: BLE001 - ImportError, or a broken install
        errors.append("nvml: pynvml not importable: %s: %s" % (type(err).__name__, _err_text(err)))
        return False
    try:
        nv.nvmlInit()
    except Exception as err:  # noqa: BLE001 - LibraryNotFound, DriverNotLoaded, version mismatch...
        errors.append("nvml: nvmlInit failed: %s: %s" % (type(err).__name__, _err_text(err)))
        return False
    try:
        try:
            count = int(nv.nvmlDeviceGetCount())
        except Exception as err:  # noqa: BLE001 - without a count NVML tells us nothing usable
            errors.append("nvml: nvmlDeviceGetCount failed: %s: %s" % (type(err).__name__, _err_text(err)))
            return False
        result["source"] = "nvml"
        result["gpu_count"] = count
        try:
            result["driver_version"] = str(nv.nvmlSystemGetDriverVersion())
        except Exception as err:  # noqa: BLE001
            errors.append("nvml: driver_version: %s" % _err_text(err))
        try:
            result["cuda_version"] = cuda_version_from_int(
                int(_call_first(nv, ("nvmlSystemGetCudaDriverVersion", "nvmlSystemGetCudaDriverVersion_v2")))
            )
        except Exception as err:  # noqa: BLE001
            errors.append("nvml: cuda_version: %s" % _err_text(err))
        result["gpus"] = [_nvml_gpu(nv, index) for index in range(count)]
        return True
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:  # noqa: BLE001,S110 - nothing useful to do about a failed shutdown
            pass


# ----------------------------------------------------------------------------- nvidia-smi XML path


def _is_na(text: Optional[str]) -> bool:
    if text is None:
        return True
    return text.strip().strip("[]").strip().lower() in _NA_TEXTS


_NUMBER = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?)\s*[A-Za-z%/()]*\s*$")


def parse_number(text: Optional[str]) -> Optional[float]:
    """ "35 C" -> 35, "70.50 W" -> 70.5, "16x" -> 16, "N/A" -> None. Ints stay ints."""
    if _is_na(text):
        return None
    assert text is not None
    match = _NUMBER.match(text)
    if not match:
        return None
    raw = match.group(1)
    return float(raw) if "." in raw else int(raw)


def _text(elem: Optional[ET.Element], path: str) -> Optional[str]:
    """Text at `path` below `elem`; None when the element is absent or has no text."""
    if elem is None:
        return None
    found = elem.find(path)
    if found is None or found.text is None:
        return None
    return found.text.strip()


def _xml_str(gpu: Dict[str, Any], field: str, elem: Optional[ET.Element], path: str) -> Optional[str]:
    text = _text(elem, path)
    if _is_na(text):
        gpu["errors"][field] = text if text else "absent from nvidia-smi XML"
        return None
    return text


def _xml_num(gpu: Dict[str, Any], field: str, elem: Optional[ET.Element], paths: Sequence[str]) -> Any:
    """First numeric value among `paths` (old and new schema spellings); records why when none."""
    seen: Optional[str] = None
    for path in paths:
        text = _text(elem, path)
        if text is None:
            continue
        value = parse_number(text)
        if value is not None:
            return value
        seen = text
    gpu["errors"][field] = seen if seen else "absent from nvidia-smi XML"
    return None


def _xml_bool(text: Optional[str]) -> Optional[bool]:
    if _is_na(text):
        return None
    assert text is not None
    low = text.lower()
    if low in ("enabled", "yes", "active", "true"):
        return True
    if low in ("disabled", "no", "not active", "false"):
        return False
    return None


def _sum_numeric(texts: Sequence[Optional[str]]) -> Optional[int]:
    """Sum the numeric parts; None when none is numeric (all N/A means no evidence, not zero)."""
    values = [parse_number(t) for t in texts]
    numbers = [int(v) for v in values if v is not None]
    return sum(numbers) if numbers else None


def _ecc_counts(elem: Optional[ET.Element]) -> Tuple[Optional[int], Optional[int]]:
    """(corrected, uncorrected) from one <volatile>/<aggregate> block, any schema generation."""
    if elem is None:
        return None, None
    if elem.find("single_bit") is not None or elem.find("double_bit") is not None:
        # Pre-535 schema: <single_bit><total>, <double_bit><total>.
        corr = parse_number(_text(elem, "single_bit/total"))
        unc = parse_number(_text(elem, "double_bit/total"))
        return (None if corr is None else int(corr)), (None if unc is None else int(unc))
    corrected = _sum_numeric([_text(elem, "sram_correctable"), _text(elem, "dram_correctable")])
    if elem.find("sram_uncorrectable") is not None:
        sram_unc = [_text(elem, "sram_uncorrectable")]
    else:
        # v13 splits SRAM uncorrectable into parity and SEC-DED parts.
        sram_unc = [_text(elem, "sram_uncorrectable_parity"), _text(elem, "sram_uncorrectable_secded")]
    uncorrected = _sum_numeric(sram_unc + [_text(elem, "dram_uncorrectable")])
    return corrected, uncorrected


def _xml_temperature(gpu: Dict[str, Any], elem: Optional[ET.Element]) -> None:
    temp = gpu["temperature"]
    temp["gpu"] = _xml_num(gpu, "temperature.gpu", elem, ["gpu_temp"])
    temp["memory"] = _xml_num(gpu, "temperature.memory", elem, ["memory_temp"])
    absolute = {
        "shutdown": "gpu_temp_max_threshold",
        "slowdown": "gpu_temp_slow_threshold",
        "gpu_max_operating": "gpu_temp_max_gpu_threshold",
        "memory_max_operating": "gpu_temp_max_mem_threshold",
    }
    relative = {
        "shutdown": "gpu_temp_max_tlimit_threshold",
        "slowdown": "gpu_temp_slow_tlimit_threshold",
        "gpu_max_operating": "gpu_temp_max_gpu_tlimit_threshold",
        "memory_max_operating": "gpu_temp_max_mem_tlimit_threshold",
    }
    # Newer drivers (v13 schema) print thresholds as offsets from T.Limit (e.g. slowdown -2 C on
    # H100), not absolute temperatures, and gpu_temp_tlimit is the current margin below T.Limit.
    # T.Limit = gpu_temp + margin; an absolute threshold = T.Limit - offset. The memory offset is
    # not relative to the GPU T.Limit, so it cannot be converted.
    margin = parse_number(_text(elem, "gpu_temp_tlimit"))
    for key in ("slowdown", "shutdown", "gpu_max_operating", "memory_max_operating"):
        field = "temperature." + key
        abs_text = _text(elem, absolute[key])
        value = parse_number(abs_text)
        if value is not None:
            temp[key] = value
            continue
        rel_text = _text(elem, relative[key])
        offset = parse_number(rel_text)
        if offset is not None and key != "memory_max_operating" and margin is not None and temp["gpu"] is not None:
            temp[key] = int(round(temp["gpu"] + margin - offset))
            continue
        if offset is not None:
            gpu["errors"][field] = "only a T.Limit-relative value (%s C) without a usable T.Limit margin" % rel_text
        else:
            gpu["errors"][field] = abs_text or rel_text or "absent from nvidia-smi XML"


def _xml_identity(gpu: Dict[str, Any], elem: ET.Element) -> None:
    gpu["name"] = _xml_str(gpu, "name", elem, "product_name")
    gpu["uuid"] = _xml_str(gpu, "uuid", elem, "uuid")
    gpu["serial"] = _xml_str(gpu, "serial", elem, "serial")
    gpu["vbios_version"] = _xml_str(gpu, "vbios_version", elem, "vbios_version")
    bus_id = _text(elem, "pci/pci_bus_id") or elem.get("id")
    if _is_na(bus_id):
        gpu["errors"]["pci_bus_id"] = "absent from nvidia-smi XML"
    else:
        gpu["pci_bus_id"] = bus_id


def _xml_ecc_mode(gpu: Dict[str, Any], elem: ET.Element) -> None:
    current = _xml_bool(_text(elem, "ecc_mode/current_ecc"))
    pending = _xml_bool(_text(elem, "ecc_mode/pending_ecc"))
    gpu["ecc_mode"] = {"current": current, "pending": pending}
    if current is None:
        gpu["errors"]["ecc_mode"] = _text(elem, "ecc_mode/current_ecc") or "absent from nvidia-smi XML"


def _xml_ecc_errors(gpu: Dict[str, Any], elem: ET.Element) -> None:
    ecc = elem.find("ecc_errors")
    for counter in ("volatile", "aggregate"):
        corr, unc = _ecc_counts(None if ecc is None else ecc.find(counter))
        gpu["ecc_errors"][counter] = {"corrected": corr, "uncorrected": unc}
        if corr is None:
            gpu["errors"]["ecc_errors.%s.corrected" % counter] = "N/A"
        if unc is None:
            gpu["errors"]["ecc_errors.%s.uncorrected" % counter] = "N/A"


def _xml_remapped_rows(gpu: Dict[str, Any], elem: ET.Element) -> None:
    rows = elem.find("remapped_rows")
    if rows is None or len(rows) == 0:
        # "N/A" as the whole element: pre-Ampere, or MIG enabled.
        gpu["errors"]["remapped_rows"] = (rows.text or "").strip() if rows is not None else "absent from nvidia-smi XML"
        return
    corr = parse_number(_text(rows, "remapped_row_corr"))
    unc = parse_number(_text(rows, "remapped_row_unc"))
    if corr is None and unc is None:
        gpu["errors"]["remapped_rows"] = "N/A"
        return
    gpu["remapped_rows"] = {
        "correctable": None if corr is None else int(corr),
        "uncorrectable": None if unc is None else int(unc),
        "pending": _xml_bool(_text(rows, "remapped_row_pending")),
        "failure": _xml_bool(_text(rows, "remapped_row_failure")),
    }


def _xml_retired_pages(gpu: Dict[str, Any], elem: ET.Element) -> None:
    pages = elem.find("retired_pages")
    sbe = parse_number(_text(pages, "multiple_single_bit_retirement/retired_count"))
    dbe = parse_number(_text(pages, "double_bit_retirement/retired_count"))
    if sbe is None and dbe is None:
        gpu["errors"]["retired_pages"] = "N/A" if pages is not None else "absent from nvidia-smi XML"
        return
    pending_text = _text(pages, "pending_retirement")
    if pending_text is None:
        pending_text = _text(pages, "pending_blacklist")  # pre-R450 name
    gpu["retired_pages"] = {
        "single_bit": None if sbe is None else int(sbe),
        "double_bit": None if dbe is None else int(dbe),
        "pending": _xml_bool(pending_text),
    }


def _xml_power(gpu: Dict[str, Any], elem: ET.Element) -> None:
    power = elem.find("gpu_power_readings")
    if power is None:
        power = elem.find("power_readings")  # pre-R530 name
    # NVML's power usage is a ~1 s average on current GPUs, so prefer the average reading.
    gpu["power"] = {
        "draw_w": _xml_num(gpu, "power.draw_w", power, ["power_draw", "average_power_draw", "instant_power_draw"]),
        "limit_w": _xml_num(
            gpu, "power.limit_w", power, ["enforced_power_limit", "current_power_limit", "power_limit"]
        ),
    }
    for key in ("draw_w", "limit_w"):
        if gpu["power"][key] is not None:
            gpu["power"][key] = float(gpu["power"][key])


def _xml_reason_mask(reasons: Optional[ET.Element], prefix: str) -> Tuple[int, int]:
    """(mask, how many known reasons were read) from the per-reason Active/Not Active elements."""
    mask = 0
    known = 0
    for child in list(reasons) if reasons is not None else []:
        if not child.tag.startswith(prefix):
            continue
        name = child.tag[len(prefix) :]
        name = _XML_REASON_ALIASES.get(name, name)
        bit = _REASON_BITS.get(name)
        state = _xml_bool(child.text)
        if bit is None or state is None:
            continue
        known += 1
        if state:
            mask |= bit
    return mask, known


def _xml_clock_event_reasons(gpu: Dict[str, Any], elem: ET.Element) -> None:
    reasons = elem.find("clocks_event_reasons")
    prefix = "clocks_event_reason_"
    if reasons is None:
        reasons = elem.find("clocks_throttle_reasons")  # pre-535 name
        prefix = "clocks_throttle_reason_"
    mask, known = _xml_reason_mask(reasons, prefix)
    if known:
        gpu["clock_event_reasons"] = {"mask": mask, "active": reasons_from_mask(mask)}
    else:
        gpu["errors"]["clock_event_reasons"] = "absent from nvidia-smi XML"


def _xml_pcie(gpu: Dict[str, Any], elem: ET.Element) -> None:
    link = elem.find("pci/pci_gpu_link_info")
    gpu["pcie"] = {
        "gen_current": _xml_num(gpu, "pcie.gen_current", link, ["pcie_gen/current_link_gen"]),
        "gen_max": _xml_num(gpu, "pcie.gen_max", link, ["pcie_gen/max_link_gen"]),
        "width_current": _xml_num(gpu, "pcie.width_current", link, ["link_widths/current_link_width"]),
        "width_max": _xml_num(gpu, "pcie.width_max", link, ["link_widths/max_link_width"]),
    }


def _xml_gpu(index: int, elem: ET.Element) -> Dict[str, Any]:
    # The step order is the order of the keys in gpu["errors"]: keep it.
    gpu = new_gpu(index)
    _xml_identity(gpu, elem)
    _xml_ecc_mode(gpu, elem)
    _xml_ecc_errors(gpu, elem)
    _xml_remapped_rows(gpu, elem)
    _xml_retired_pages(gpu, elem)
    _xml_temperature(gpu, elem.find("temperature"))
    _xml_power(gpu, elem)
    _xml_clock_event_reasons(gpu, elem)
    _xml_pcie(gpu, elem)
    return gpu


def _normalise_cuda(text: Optional[str]) -> Optional[str]:
    if _is_na(text):
        return None
    assert text is not None
    match = re.match(r"^\s*(\d+)\.(\d+)", text)
    return "%s.%s" % (match.group(1), int(match.group(2))) if match else None


def parse_nvidia_smi_xml(text: str) -> Dict[str, Any]:
    """Parse `nvidia-smi -q -x` output into the probe's schema dict (source "nvidia-smi").

    Pure: hostname and collected_at stay None for the caller to fill. Raises ValueError when
    the text is not nvidia-smi XML (the caller records that as an error).
    """
    try:
        root = ET.fromstring(text)
    except ET.ParseError as err:
        raise ValueError("not XML (%s)" % err) from None
    if root.tag != "nvidia_smi_log":
        raise ValueError("unexpected XML root <%s>, expected <nvidia_smi_log>" % root.tag)
    result = new_result()
    result["source"] = "nvidia-smi"
    driver = _text(root, "driver_version")
    result["driver_version"] = None if _is_na(driver) else driver
    result["cuda_version"] = _normalise_cuda(_text(root, "cuda_version"))
    gpus = [_xml_gpu(index, elem) for index, elem in enumerate(root.findall("gpu"))]
    result["gpus"] = gpus
    # attached_gpus is what the driver sees; with MIG some drivers list fewer <gpu> elements.
    attached = parse_number(_text(root, "attached_gpus"))
    result["gpu_count"] = int(attached) if attached is not None else len(gpus)
    if result["gpu_count"] != len(gpus):
        result["errors"].append(
            "nvidia-smi: attached_gpus=%s but %d <gpu> elements listed" % (result["gpu_count"], len(gpus))
        )
    return result


def collect_nvidia_smi(result: Dict[str, Any], timeout: float) -> bool:
    """Fill `result` from `nvidia-smi -q -x`. Returns False (reason in errors) when unusable."""
    errors: List[str] = result["errors"]
    try:
        # subprocess.run kills the child when the timeout expires: a hung driver must not hang us.
        proc = subprocess.run(
            ["nvidia-smi", "-q", "-x"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            timeout=timeout,
        )
    except FileNotFoundError:
        errors.append("nvidia-smi: not found on PATH")
        return False
    except subprocess.TimeoutExpired:
        errors.append("nvidia-smi: timed out after %gs and was killed" % timeout)
        return False
    except Exception as err:  # noqa: BLE001 - e.g. PermissionError
        errors.append("nvidia-smi: could not run: %s: %s" % (type(err).__name__, _err_text(err)))
        return False
    stdout = proc.stdout.decode("utf-8", "replace")
    if proc.returncode != 0:
        detail = (proc.stderr.decode("utf-8", "replace") or stdout).strip()[-300:]
        errors.append("nvidia-smi: exit code %d: %s" % (proc.returncode, detail))
        return False
    try:
        parsed = parse_nvidia_smi_xml(stdout)
    except ValueError as err:
        errors.append("nvidia-smi: unparseable output: %s; starts with %r" % (err, stdout[:60]))
        return False
    for key in ("source", "driver_version", "cuda_version", "gpu_count", "gpus"):
        result[key] = parsed[key]
    errors.extend(parsed["errors"])
    return True


# ----------------------------------------------------------------------------- entry points


def collect(source: str = "auto", nvidia_smi_timeout: float = NVIDIA_SMI_TIMEOUT_S) -> Dict[str, Any]:
    """Collect the probe result. `source`: "auto" (NVML, then nvidia-smi), "nvml" or "nvidia-smi"."""
    result = new_result()
    result["hostname"] = socket.gethostname()
    result["collected_at"] = utc_now()
    try:
        done = False
        if source in ("auto", "nvml"):
            done = collect_nvml(result)
        if not done and source in ("auto", "nvidia-smi"):
            done = collect_nvidia_smi(result, nvidia_smi_timeout)
    except Exception as err:  # noqa: BLE001 - last resort: the probe must always print JSON
        result["errors"].append("probe: internal error: %s: %s" % (type(err).__name__, _err_text(err)))
    return result


def exit_code(result: Dict[str, Any]) -> int:
    return EXIT_NOTHING_READ if result.get("source") == "none" else EXIT_OK


# ----------------------------------------------------------------------------- node power (BMC)
# `--node-power` (sampling mode): the node's input power from its BMC, in band, through ipmitool:
# `ipmitool dcmi power reading` (the instantaneous reading), else the sum of the power supplies'
# input sensors in `ipmitool sdr elist` where DCMI is absent or deactivated. ipmitool runs in a
# thread of its own, with its own timeout, so a slow or hung BMC never delays the GPU samples: each
# sample takes the latest reading only while it is fresh (SCHEMA.md "Node power").
# The parsers follow checks/power/readings.py (the portal's `ipmitool_dcmi_power` and
# `ipmitool_sdr_power`); tests/probe/test_node_power.py holds both to the same fixtures.

DCMI_ARGV = ("ipmitool", "dcmi", "power", "reading")
# `elist` prints each sensor's IPMI entity (10.N = power supply N): Dell names its PSU sensors
# just "Current", the entity is what marks them (checks/power/readings.py _sdr_measurement).
SDR_ARGV = ("ipmitool", "sdr", "elist")
# ipmitool gives up on an in-band request after 15 s (src/plugins/open/open.c,
# IPMI_OPENIPMI_READ_TIMEOUT): a command running longer is hung, and is killed.
IPMITOOL_TIMEOUT_S = 15.0
# checks/soak/physics.py MAX_NODE_POWER_W, 100 kW: 7x the largest 8-GPU node's rated maximum
# (DGX B200 ~14.3 kW, NVIDIA DGX B200 datasheet). A reading above it is a misread, not a machine.
# The probe cannot import checks/; tests/probe/test_node_power.py keeps the two equal.
MAX_NODE_POWER_W = 100000.0
# A node running this probe draws tens of watts at the very least: 0 W (OpenBMC printed it beside
# "deactivated", openbmc/phosphor-host-ipmid#167) or less is no measurement.
MIN_NODE_POWER_W = 1.0

# What an ipmitool failure means for the node power source.
ABSENT = "absent"  # DCMI rejected or deactivated: fall back to the PSU sensors
UNAVAILABLE = "unavailable"  # no ipmitool, no BMC device, no PSU input sensor: stop trying
TRANSIENT = "transient"  # a timeout, a garbled answer, an impossible value: null for this sample

_DCMI_LABELS = (
    "Instantaneous power reading",
    "Minimum during sampling period",
    "Maximum during sampling period",
    "Average power reading over sample period",
)
_DCMI_STATE = re.compile(r"Power reading state is:[ \t]*(\w+)")
# Completion codes that mean the BMC has no DCMI power reading (IPMI 2.0 table 5-2): C1 invalid
# command, C2 invalid for this LUN, D5 not supported in present state, D6 sub-function unavailable.
_DCMI_REJECTED = re.compile(r"\((c1|c2|d5|d6)\)|invalid command|not supported", re.I)
_PSU_NAME = re.compile(r"\b(psu?|power ?supply)[ _-]?\d*\b", re.I)
_OUTPUT_NAME = re.compile(r"out|pout", re.I)
_POWER_NAME = re.compile(r"pwr|power|watt", re.I)
_NO_READING = frozenset(["no reading", "not readable", "disabled", "na", "n/a", ""])
_HEX_ID = re.compile(r"[0-9A-Fa-f]{1,4}h")

PowerResult = Tuple[Optional[float], Optional[Tuple[str, str]]]  # (watts, None) or (None, (kind, why))


def _float(text: str) -> Optional[float]:
    try:
        return float(text)
    except ValueError:
        return None


def node_power_problem(watts: float) -> Optional[str]:
    """Why a node power reading cannot be a measurement (NaN, inf, <= 0, above the bound), or None."""
    if watts != watts or watts in (float("inf"), float("-inf")):
        return "%r W is not a finite number" % watts
    if watts < MIN_NODE_POWER_W or watts > MAX_NODE_POWER_W:
        return "%g W is impossible for a node (outside %g..%g W)" % (watts, MIN_NODE_POWER_W, MAX_NODE_POWER_W)
    return None


def _checked(watts: float, what: str) -> PowerResult:
    why = node_power_problem(watts)
    return (None, (TRANSIENT, "%s: %s" % (what, why))) if why else (watts, None)


def parse_dcmi_power(text: str) -> PowerResult:
    """`ipmitool dcmi power reading` -> the instantaneous watts, or why not: deactivated (ABSENT),
    incomplete or garbled (TRANSIENT). As checks/power/readings.py: all four readings and the
    closing state line must be there, and only an "activated" reading is a measurement."""
    values = []
    for label in _DCMI_LABELS:
        found = re.search(r"%s:[ \t]*(\S+)[ \t]*Watts" % re.escape(label), text)
        if found is None:
            return None, (TRANSIENT, "dcmi: garbled answer: no '%s' line" % label)
        values.append((label, found.group(1)))
    if _DCMI_STATE.search(text) is None:
        return None, (TRANSIENT, "dcmi: garbled answer: the closing 'Power reading state is:' line is missing")
    state = _DCMI_STATE.search(text)
    assert state is not None
    if state.group(1) != "activated":
        return None, (ABSENT, "dcmi: power reading state is %s (no power measurement)" % state.group(1))
    watts = _float(values[0][1])
    if watts is None:
        return None, (TRANSIENT, "dcmi: garbled answer: instantaneous reading %r is not a number" % values[0][1][:40])
    return _checked(watts, "dcmi")


def _sdr_row(line: str) -> Optional[Tuple[str, str, str, str]]:
    """(name, reading, status, entity) of a row of `sdr`, `sdr elist`/`sdr type` or `sensor`
    (checks/power/readings.py _sdr_row); None for anything else."""
    parts = [p.strip() for p in line.split("|")]
    if len(parts) < 3 or not parts[0]:
        return None
    if len(parts) == 3:
        return parts[0], parts[1], parts[2], ""
    if len(parts) == 5 and _HEX_ID.fullmatch(parts[1]):
        return parts[0], parts[4], parts[2], parts[3]
    return parts[0], ("%s %s" % (parts[1], parts[2])).strip(), parts[3], ""


def _psu_input(name: str, reading: str, status: str, entity: str) -> Tuple[Optional[float], bool]:
    """(watts, is_input): a power supply's input-power sensor and its reading (None: no reading)."""
    if not (_PSU_NAME.search(name) or entity.startswith("10.")) or _OUTPUT_NAME.search(name):
        return None, False
    watts = re.fullmatch(r"(\S+)\s+Watts", reading, re.I)
    if watts is None:
        # A PSU power sensor without a reading ("PS2 Power In | ns | No Reading"), or not power.
        unread = status.lower() == "ns" or reading.lower() in _NO_READING
        return None, bool(unread and _POWER_NAME.search(name))
    value = None if status.lower() == "ns" else _float(watts.group(1))
    return value, True


def parse_sdr_psu_input(text: str) -> PowerResult:
    """`ipmitool sdr elist` (or `sdr`, `sensor`) -> the sum of the power supplies' input watts, or
    why not: no PSU input sensor (UNAVAILABLE), one without a reading or impossible (TRANSIENT: a
    partial sum would hide what that supply draws)."""
    rows = [row for row in (_sdr_row(line) for line in text.splitlines()) if row is not None]
    if not rows:
        return None, (TRANSIENT, "sdr: garbled answer: no 'Name | ... | ...' rows")
    total = 0.0
    inputs = 0
    for name, reading, status, entity in rows:
        watts, is_input = _psu_input(name, reading, status, entity)
        if not is_input:
            continue
        if watts is None:
            return None, (TRANSIENT, "sdr: %s has no reading (%s): the PSU sum would be partial" % (name, reading))
        if not 0.0 <= watts <= MAX_NODE_POWER_W:  # NaN fails this too
            return None, (TRANSIENT, "sdr: %s reads %r W: impossible for a power supply" % (name, watts))
        total += watts
        inputs += 1
    if not inputs:
        return None, (UNAVAILABLE, "sdr: no power supply input-power sensor among %d sensors" % len(rows))
    return _checked(total, "sdr")


def ipmitool_failure(argv: Sequence[str], code: int, stderr: str) -> Tuple[str, str]:
    """(kind, why) of an ipmitool run that exited `code`."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    last = lines[-1][:200] if lines else "no message"
    what = argv[1]
    if "could not open device" in stderr.lower():
        return UNAVAILABLE, "%s: no in-band BMC device: %s" % (what, last)
    if what == "dcmi" and _DCMI_REJECTED.search(stderr):
        return ABSENT, "dcmi: the BMC rejects DCMI: %s" % last
    return TRANSIENT, "%s: ipmitool exited %d: %s" % (what, code, last)


class _NodePower:
    """The BMC poller: one reading at a time in a background thread, at the times the sampler asks
    for (`request`); `take` gives a sample the latest reading while it is fresh (taken within one
    interval), else None. Sticks to the first source that answers, so one series never mixes DCMI
    with PSU sums."""

    def __init__(self, interval: float, timeout: float) -> None:
        self.interval = interval
        self.timeout = timeout
        self.source: Optional[str] = None
        self.gave_up = False
        self.readings = 0
        self.attempts = 0
        self.errors: Dict[str, int] = {}  # why -> how often, in the order first seen
        self.cond = threading.Condition()
        self.due: Optional[float] = None
        self.stopped = False
        self.latest: Optional[Tuple[float, float]] = None  # (monotonic time it came, watts)
        self.proc: Optional["subprocess.Popen[bytes]"] = None
        self.proc_started = 0.0
        self.proc_what = ""
        self.thread = threading.Thread(target=self._loop, name="kiln-node-power", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def request(self, at: float) -> None:
        """Take the next reading at monotonic time `at` (at once when already past)."""
        with self.cond:
            self.due = at
            self.cond.notify()

    def take(self, now: float) -> Optional[float]:
        latest = self.latest
        if latest is None or now - latest[0] > self.interval:
            return None
        return latest[1]

    def close(self) -> None:
        with self.cond:
            self.stopped = True
            self.cond.notify()
            proc, began, what = self.proc, self.proc_started, self.proc_what
        if proc is not None and proc.poll() is None:
            waited = time.monotonic() - began
            if waited > self.interval:
                self._error("%s: no answer in %.1f s when sampling ended (killed)" % (what, waited))
            _kill_quietly(proc)
        self.thread.join(timeout=2.0)

    def document(self) -> Dict[str, Any]:
        argv = {"dcmi": DCMI_ARGV, "sdr": SDR_ARGV}.get(self.source or "")
        return {
            "source": self.source,
            "argv": list(argv) if argv else None,
            "readings": self.readings,
            "attempts": self.attempts,
            "timeout_s": self.timeout,
            "errors": ["%s (%d times)" % (why, n) if n > 1 else why for why, n in self.errors.items()],
        }

    # --- the poller thread ----------------------------------------------------------------

    def _loop(self) -> None:
        while not self.gave_up:
            with self.cond:
                while not self.stopped and (self.due is None or self.due > time.monotonic()):
                    wait = None if self.due is None else max(0.0, self.due - time.monotonic())
                    self.cond.wait(timeout=wait)
                if self.stopped:
                    return
                self.due = None
            try:
                self._read_once()
            except Exception as err:  # noqa: BLE001 - the poller must outlive any surprise
                self._error("node power: internal error: %s: %s" % (type(err).__name__, _err_text(err)))

    def _read_once(self) -> None:
        self.attempts += 1
        if self.source is not None:
            watts, problem = self._read(self.source)
        else:
            watts, problem = self._read("dcmi")
            if problem is not None and problem[0] == ABSENT:
                self._error(problem[1])
                watts, problem = self._read("sdr")
                self.source = "sdr" if problem is None or problem[0] != UNAVAILABLE else None
            elif problem is None or problem[0] != UNAVAILABLE:
                self.source = "dcmi" if problem is None else None
        if self.stopped:
            return  # killed by close(): not the BMC's doing
        if problem is not None:
            self._error(problem[1])
            self.gave_up = problem[0] == UNAVAILABLE
            return
        assert watts is not None
        self.latest = (time.monotonic(), watts)
        self.readings += 1

    def _read(self, source: str) -> PowerResult:
        argv = DCMI_ARGV if source == "dcmi" else SDR_ARGV
        try:
            code, out, err = self._run(argv)
        except OSError as exc:
            return None, (UNAVAILABLE, "%s: ipmitool cannot run: %s" % (argv[1], _err_text(exc)))
        if code is None:
            return None, (TRANSIENT, err)
        if code != 0:
            return None, ipmitool_failure(argv, code, err)
        return parse_dcmi_power(out) if source == "dcmi" else parse_sdr_psu_input(out)

    def _run(self, argv: Sequence[str]) -> Tuple[Optional[int], str, str]:
        """(exit code, stdout, stderr); exit code None with the reason when it did not finish.
        OSError when ipmitool cannot be started at all."""
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own group: a timeout kills all of it
        )
        with self.cond:
            self.proc, self.proc_started, self.proc_what = proc, time.monotonic(), argv[1]
        try:
            out, err = proc.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            _kill_quietly(proc)
            return None, "", "%s: ipmitool gave no answer in %g s (killed)" % (argv[1], self.timeout)
        finally:
            with self.cond:
                self.proc = None
        return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")

    def _error(self, why: str) -> None:
        with self.cond:
            self.errors[why] = self.errors.get(why, 0) + 1


def _kill_quietly(proc: "subprocess.Popen[bytes]") -> None:
    """SIGKILL a command's process group and reap it; one stuck in the kernel is left behind."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    try:
        proc.wait(timeout=2.0)
    except subprocess.TimeoutExpired:
        pass


# ----------------------------------------------------------------------------- sampling mode
# `--sample INTERVAL [--duration S] [-- CMD ARG...]`: telemetry over time (SCHEMA.md "Sampling mode").

PR_SET_PDEATHSIG = 1
CHILD_KILL_GRACE_S = 5.0


def _sample_gpu(nv: Any, index: int, handle: Any) -> Dict[str, Any]:
    """One GPU's fast-changing facts; a failed read is null (no evidence), never zero."""

    def read(fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception:  # noqa: BLE001 - a bad read is a null, the sample goes on
            return None

    power = read(lambda: nv.nvmlDeviceGetPowerUsage(handle))
    return {
        "index": index,
        "temp_gpu": read(
            lambda: int(_call_first(nv, ("nvmlDeviceGetTemperature", "nvmlDeviceGetTemperatureV"), handle, 0))
        ),
        "temp_memory": read(lambda: _memory_temperature(nv, handle)),
        "power_w": None if power is None else round(power / 1000.0, 3),
        "sm_clock_mhz": read(lambda: int(nv.nvmlDeviceGetClockInfo(handle, NVML_CLOCK_SM))),
        "clock_event_reasons": read(
            lambda: int(
                _call_first(
                    nv,
                    ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"),
                    handle,
                )
            )
        ),
        "ecc_volatile_uncorrected": read(
            lambda: int(nv.nvmlDeviceGetTotalEccErrors(handle, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC))
        ),
        "ecc_volatile_corrected": read(
            lambda: int(nv.nvmlDeviceGetTotalEccErrors(handle, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC))
        ),
    }


class _Sampler:
    """NVML opened once for the whole sampling run (re-initialising per sample costs seconds on 8 GPUs)."""

    def __init__(self, errors: List[str]) -> None:
        self.errors = errors
        self.nv: Any = None
        self.handles: List[Tuple[int, Any]] = []

    def open(self) -> bool:
        try:
            import pynvml as nv  # type: ignore[import-not-found]
        except Exception as err:  # noqa: BLE001
            self.errors.append("sample: pynvml not importable: %s: %s" % (type(err).__name__, _err_text(err)))
            return False
        try:
            nv.nvmlInit()
        except Exception as err:  # noqa: BLE001
            self.errors.append("sample: nvmlInit failed: %s: %s" % (type(err).__name__, _err_text(err)))
            return False
        self.nv = nv
        try:
            count = int(nv.nvmlDeviceGetCount())
        except Exception as err:  # noqa: BLE001
            self.errors.append("sample: nvmlDeviceGetCount failed: %s" % _err_text(err))
            return False
        for index in range(count):
            try:
                self.handles.append((index, nv.nvmlDeviceGetHandleByIndex(index)))
            except Exception as err:  # noqa: BLE001 - a lost GPU is simply absent from the samples
                self.errors.append("sample: GPU %d: no handle: %s" % (index, _err_text(err)))
        return True

    def sample(self, t: float) -> Dict[str, Any]:
        return {"t": round(t, 3), "gpus": [_sample_gpu(self.nv, i, h) for i, h in self.handles]}

    def close(self) -> None:
        if self.nv is not None:
            try:
                self.nv.nvmlShutdown()
            except Exception:  # noqa: BLE001,S110
                pass


# The per-GPU fields of a sample, in the order the document prints them.
SAMPLE_FIELDS = (
    "temp_gpu",
    "temp_memory",
    "power_w",
    "sm_clock_mhz",
    "clock_event_reasons",
    "ecc_volatile_uncorrected",
    "ecc_volatile_corrected",
)


class _Columns:
    """The samples as columns: one list of times, and per GPU one list per field in step with it.
    A 12 h burn-in at 1 Hz on 8 GPUs is 2.4 million readings: as one JSON object per GPU per sample
    they took ~60 MB of output (and of the probe's memory); as arrays, ~9 MB."""

    def __init__(self, node_power: bool = False) -> None:
        self.t: List[float] = []
        self.gpus: Dict[int, Dict[str, List[Any]]] = {}
        self.node_power: Optional[List[Optional[float]]] = [] if node_power else None

    def add(self, sample: Dict[str, Any]) -> None:
        """Append one sample ({"t": s, "gpus": [{"index": i, field: value, ...}]}). A GPU missing
        from a sample gets nulls there (no evidence), so every array stays as long as `t`."""
        before = len(self.t)
        self.t.append(sample["t"])
        if self.node_power is not None:
            self.node_power.append(sample.get("node_power_w"))
        for gpu in sample["gpus"]:
            columns = self.gpus.get(gpu["index"])
            if columns is None:
                columns = self.gpus[gpu["index"]] = {name: [None] * before for name in SAMPLE_FIELDS}
            for name in SAMPLE_FIELDS:
                columns[name].append(gpu.get(name))
        for columns in self.gpus.values():
            for values in columns.values():
                if len(values) == before:
                    values.append(None)

    def document(self) -> Dict[str, Any]:
        gpus = [dict([("index", index)] + list(columns.items())) for index, columns in sorted(self.gpus.items())]
        doc: Dict[str, Any] = {"t": self.t, "gpus": gpus}
        if self.node_power is not None:
            doc["node_power_w"] = self.node_power
        return doc


_LIBC: List[Any] = []  # libc through ctypes, loaded once in the probe itself (see _child_setup)


def _load_libc() -> None:
    """Load libc before forking: the BMC poller's thread may hold a lock at the fork, so the
    child must not import or load anything between fork and exec."""
    if not _LIBC:
        try:
            import ctypes

            _LIBC.append(ctypes.CDLL(None, use_errno=True))
        except Exception:  # noqa: BLE001 - not Linux: the signal handlers below still kill it
            _LIBC.append(None)


def _child_setup() -> None:
    """In the forked child, before exec: its own process group (so the probe can kill the whole
    tree gpu_burn forks), and SIGKILL when the probe dies, even by SIGKILL (Linux prctl)."""
    os.setpgrp()
    if _LIBC and _LIBC[0] is not None:
        try:
            _LIBC[0].prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except Exception:  # noqa: BLE001,S110 - the signal handlers below still kill it
            pass


def _kill_group(proc: "subprocess.Popen[bytes]") -> None:
    """SIGTERM the child's process group, then SIGKILL it if it does not go in time."""
    for sig, wait_s in ((signal.SIGTERM, CHILD_KILL_GRACE_S), (signal.SIGKILL, 2.0)):
        try:
            os.killpg(proc.pid, sig)
        except OSError:
            return  # already gone
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _drain(stream: Any, into: List[bytes]) -> None:
    for chunk in iter(lambda: stream.read(65536), b""):
        into.append(chunk)


class _Child:
    """The command sampled under (none in idle sampling): its process and its captured output."""

    def __init__(self, argv: Sequence[str]) -> None:
        self.argv = list(argv)
        self.proc: Optional["subprocess.Popen[bytes]"] = None
        self.out_chunks: List[bytes] = []
        self.err_chunks: List[bytes] = []
        self.readers: List[threading.Thread] = []

    def start(self, doc: Dict[str, Any], errors: List[str]) -> int:
        """Start it with its output drained by threads; 127 (and doc["child"]) when it cannot start."""
        _load_libc()
        try:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                preexec_fn=_child_setup,  # setpgrp + PDEATHSIG; Python 3.8 has no process_group=
            )
        except OSError as err:
            errors.append("child: could not start %s: %s" % (self.argv[0], _err_text(err)))
            doc["child"] = {"argv": list(self.argv), "exit_code": 127, "stdout": "", "stderr": _err_text(err)}
            return 127
        for stream, into in ((self.proc.stdout, self.out_chunks), (self.proc.stderr, self.err_chunks)):
            reader = threading.Thread(target=_drain, args=(stream, into), daemon=True)
            reader.start()
            self.readers.append(reader)
        return EXIT_OK

    def exited(self) -> bool:
        return self.proc is not None and self.proc.poll() is not None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            _kill_group(self.proc)

    def record(self, doc: Dict[str, Any], started: float, code: int) -> int:
        """Put the child's result in doc["child"]; the exit code with the child's folded in."""
        if self.proc is None:
            return code
        for reader in self.readers:
            reader.join(timeout=5.0)
        exit_status = self.proc.returncode
        doc["child"] = {
            "argv": list(self.argv),
            "exit_code": exit_status,
            "stdout": b"".join(self.out_chunks).decode("utf-8", "replace"),
            "stderr": b"".join(self.err_chunks).decode("utf-8", "replace"),
            "duration_s": round(time.monotonic() - started, 3),
        }
        child_code = exit_status if exit_status >= 0 else 128 - exit_status  # killed by N -> 128+N
        # A crashed tool must reach the caller; a clean run without telemetry still exits 3.
        if code == EXIT_OK or (code == EXIT_NOTHING_READ and child_code != 0):
            return child_code
        return code


def _new_sampling_doc(interval: float) -> Dict[str, Any]:
    return {
        "schema": SAMPLING_SCHEMA_VERSION,
        "mode": "sample",
        "interval_s": interval,
        "before": None,
        "after": None,
        "samples": {"t": [], "gpus": []},
        "child": None,
        "node_power": None,
        "start_at": None,
        "started_at": None,
        "start_late_s": None,
        "errors": [],
    }


def _wait_for_next(next_at: float, child: _Child, terminated: List[int]) -> None:
    # Wake early when the child exits, so its end is not a whole interval late.
    while time.monotonic() < next_at and not terminated:
        if child.exited():
            break
        time.sleep(min(0.05, max(0.0, next_at - time.monotonic())))


def _taker(
    sampler: _Sampler, usable: bool, power: Optional[_NodePower], samples: _Columns, started: float
) -> Callable[[float], None]:
    """What one sample is: the GPUs (when NVML is usable), and the BMC's latest fresh reading (with
    --node-power: then the next reading is asked for half an interval later, so that it is fresh,
    and a full interval old at most, by the next sample)."""

    def take(now: float) -> None:
        if not usable and power is None:
            return
        sample = sampler.sample(now - started) if usable else {"t": round(now - started, 3), "gpus": []}
        if power is not None:
            sample["node_power_w"] = power.take(time.monotonic())
            power.request(now + power.interval / 2.0)
        samples.add(sample)

    return take


def _sample_until_done(
    take: Callable[[float], None],
    child: _Child,
    interval: float,
    duration: Optional[float],
    started: float,
    terminated: List[int],
) -> None:
    """Sample every `interval` until the child exits, the duration ends or a signal comes. Samples
    are due at k x interval after the start (a late one skips the slots it missed), so t stays on
    that grid however long a run: a group's nodes, started together, keep sampling together."""
    deadline = None if duration is None else started + duration
    slot = 0
    while not terminated:
        now = time.monotonic()
        take(now)
        if child.exited():
            break
        if child.proc is None and (deadline is None or now >= deadline):
            break
        slot = max(slot + 1, int((now - started) / interval) + 1)
        next_at = started + slot * interval
        if deadline is not None:
            next_at = min(next_at, deadline)
        _wait_for_next(next_at, child, terminated)
        if deadline is not None and time.monotonic() >= deadline and child.proc is None and not terminated:
            take(time.monotonic())
            break


def _sampling_code(code: int, usable: bool, terminated: List[int], errors: List[str]) -> int:
    if terminated:
        errors.append("probe: terminated by signal %d; child killed" % terminated[0])
        return 128 + terminated[0]
    if not usable:
        return EXIT_NOTHING_READ
    return code


# The furthest ahead --start-at may be. power_soak's start delay for 1,250 nodes at its defaults is
# 5 s + 0.25 s x 1,250 = ~318 s (checks/soak/check.py); a start further away is a node clock that is
# off or a time not in seconds (milliseconds since the epoch read as seconds are millennia ahead),
# and waiting it out would hold the node and its SSH session idle for nothing.
MAX_START_WAIT_S = 600.0


def _wait_until(start_at: float, terminated: List[int]) -> None:
    """Sleep until wall-clock time `start_at` (at once when it is past), or until a signal."""
    while not terminated:
        left = start_at - time.time()
        if left <= 0:
            return
        time.sleep(min(left, 0.25))


def _record_start(doc: Dict[str, Any], start_at: Optional[float]) -> None:
    """When sampling began (epoch seconds), and how late against --start-at."""
    now = time.time()
    doc["started_at"] = round(now, 3)
    if start_at is not None:
        doc["start_at"] = start_at
        doc["start_late_s"] = round(max(0.0, now - start_at), 3)


def _start_power(power: Optional[_NodePower], start_at: Optional[float]) -> None:
    """Start the BMC poller, its first reading due half an interval before sampling starts."""
    if power is None:
        return
    power.start()
    lead = 0.0 if start_at is None else max(0.0, start_at - time.time() - power.interval / 2.0)
    power.request(time.monotonic() + lead)


def run_sampling(
    interval: float,
    duration: Optional[float],
    child_argv: Sequence[str],
    node_power: bool = False,
    start_at: Optional[float] = None,
    node_power_timeout: float = IPMITOOL_TIMEOUT_S,
) -> Tuple[Dict[str, Any], int]:
    """The sampling document and the exit code (the child's, else 0; 3 when NVML is unreadable)."""
    doc = _new_sampling_doc(interval)
    errors: List[str] = doc["errors"]
    child = _Child(child_argv)
    code = EXIT_OK
    started = 0.0
    sampler = _Sampler(errors)
    samples = _Columns(node_power=node_power)
    power = _NodePower(interval, node_power_timeout) if node_power else None
    # The handler only records the signal and the loop polls it: an exception raised from a
    # handler can land inside one of the sampler's `except Exception` guards and be swallowed,
    # which left the probe sampling until its child ended.
    terminated: List[int] = []

    def on_signal(signum: int, frame: Any) -> None:
        terminated.append(signum)

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, on_signal)
    try:
        doc["before"] = collect()
        usable = sampler.open()
        _start_power(power, start_at)
        if start_at is not None:
            _wait_until(start_at, terminated)
        if child_argv and not terminated:
            code = child.start(doc, errors)
        started = time.monotonic()
        _record_start(doc, start_at)
        take = _taker(sampler, usable, power, samples, started)
        _sample_until_done(take, child, interval, duration, started, terminated)
        code = _sampling_code(code, usable, terminated, errors)
    except Exception as err:  # noqa: BLE001 - the probe must always print JSON
        errors.append("probe: internal error while sampling: %s: %s" % (type(err).__name__, _err_text(err)))
        code = 1
    finally:
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(sig, signal.SIG_IGN)  # finish the cleanup and print, whatever comes next
        child.stop()
        sampler.close()
        if power is not None:
            power.close()
            doc["node_power"] = power.document()
    doc["samples"] = samples.document()
    code = child.record(doc, started, code)
    try:
        doc["after"] = collect()
    except Exception as err:  # noqa: BLE001
        errors.append("probe: after-probe failed: %s" % _err_text(err))
    return doc, code


def _sampling_args_problem(args: argparse.Namespace, child: Sequence[str]) -> Optional[str]:
    """Why the sampling options cannot run, or None."""
    if not args.sample > 0:
        return "--sample must be > 0"
    if not child and args.duration is None:
        return "--sample needs --duration S or a command after --"
    if not args.node_power_timeout > 0:
        return "--node-power-timeout must be > 0"
    start_at = args.start_at
    if start_at is not None:
        if start_at != start_at or start_at in (float("inf"), float("-inf")):
            return "--start-at must be a finite time in seconds since the epoch"
        ahead = start_at - time.time()
        if ahead > MAX_START_WAIT_S:
            return (
                "--start-at is %.0f s ahead of this node's clock, more than %.0f s: the clock is off or the time"
                " is not in seconds since the epoch; not waiting" % (ahead, MAX_START_WAIT_S)
            )
    return None


def main(argv: Optional[Sequence[str]] = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    child: List[str] = []
    if "--" in args_in:
        cut = args_in.index("--")
        args_in, child = args_in[:cut], args_in[cut + 1 :]
    parser = argparse.ArgumentParser(prog="probe.py", description="Kiln GPU node probe (JSON on stdout)")
    parser.add_argument("--source", choices=("auto", "nvml", "nvidia-smi"), default="auto")
    parser.add_argument("--nvidia-smi-timeout", type=float, default=NVIDIA_SMI_TIMEOUT_S, metavar="SECONDS")
    parser.add_argument("--sample", type=float, default=None, metavar="INTERVAL_S", help="sampling mode")
    parser.add_argument("--duration", type=float, default=None, metavar="SECONDS", help="idle sampling length")
    parser.add_argument("--node-power", action="store_true", help="also sample the BMC's node power (ipmitool)")
    parser.add_argument("--node-power-timeout", type=float, default=IPMITOOL_TIMEOUT_S, metavar="SECONDS")
    parser.add_argument("--start-at", type=float, default=None, metavar="EPOCH", help="start sampling then")
    args = parser.parse_args(args_in)
    if args.sample is not None:
        problem = _sampling_args_problem(args, child)
        if problem:
            parser.error(problem)
        doc, code = run_sampling(
            args.sample,
            args.duration,
            child,
            node_power=args.node_power,
            start_at=args.start_at,
            node_power_timeout=args.node_power_timeout,
        )
        # Compact separators: a space after every comma would add one byte per reading.
        sys.stdout.write(json.dumps(doc, separators=(",", ":")) + "\n")
        sys.stdout.flush()
        return code
    if child or args.duration is not None or args.node_power or args.start_at is not None:
        parser.error("a command after --, --duration, --node-power and --start-at need --sample")
    result = collect(source=args.source, nvidia_smi_timeout=args.nvidia_smi_timeout)
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    return exit_code(result)


if __name__ == "__main__":
    sys.exit(main())
