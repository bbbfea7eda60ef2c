"""nvidia-smi outputs as parser kinds: `nvidia-smi -q -x` (the probe's XML reader, flattened into public
measurement names) and `nvidia-smi -q -d PAGE_RETIREMENT` (pre-Ampere page retirement)."""

from __future__ import annotations

import re
from typing import Any

from checks.core.base import EvidenceError, Measurement
from checks.core.parsers import Parsed, register_parser


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@register_parser("nvidia_smi_xml")
def parse_nvidia_smi_xml_output(text: str) -> Parsed:
    from checks.probe.probe import parse_nvidia_smi_xml

    try:
        doc = parse_nvidia_smi_xml(text)
    except ValueError as exc:
        raise EvidenceError(f"not nvidia-smi XML (-q -x): {exc}") from None
    out = [
        Measurement(name="gpus", value=_number(doc.get("gpu_count")), unit="GPUs"),
        Measurement(name="driver_version", text=doc.get("driver_version") or ""),
        Measurement(name="cuda_version", text=doc.get("cuda_version") or ""),
    ]
    for gpu in doc.get("gpus", []):
        index = gpu.get("index")
        ecc = gpu.get("ecc_errors") or {}
        volatile, aggregate = ecc.get("volatile") or {}, ecc.get("aggregate") or {}
        remap = gpu.get("remapped_rows") or {}
        temperature = gpu.get("temperature") or {}
        power = gpu.get("power") or {}
        pcie = gpu.get("pcie") or {}
        ecc_mode = (gpu.get("ecc_mode") or {}).get("current")
        texts = {"product_name": gpu.get("name"), "serial": gpu.get("serial"), "uuid": gpu.get("uuid")}
        for name, value in texts.items():
            out.append(Measurement(name=name, text=value or "", gpu=index))
        numbers: list[tuple[str, Any, str]] = [
            ("ecc_mode", None if ecc_mode is None else int(bool(ecc_mode)), ""),
            ("ecc_volatile_uncorrected", volatile.get("uncorrected"), ""),
            ("ecc_volatile_corrected", volatile.get("corrected"), ""),
            ("ecc_aggregate_uncorrected", aggregate.get("uncorrected"), ""),
            ("ecc_aggregate_corrected", aggregate.get("corrected"), ""),
            ("remapped_rows_pending", None if remap.get("pending") is None else int(bool(remap["pending"])), ""),
            ("remapped_rows_failure", None if remap.get("failure") is None else int(bool(remap["failure"])), ""),
            ("gpu_temp", temperature.get("gpu"), "C"),
            ("gpu_temp_slowdown", temperature.get("slowdown"), "C"),
            ("gpu_temp_shutdown", temperature.get("shutdown"), "C"),
            ("power_draw", power.get("draw_w"), "W"),
            ("pcie_gen_current", pcie.get("gen_current"), ""),
            ("pcie_width_current", pcie.get("width_current"), ""),
        ]
        for name, value, unit in numbers:
            out.append(Measurement(name=name, value=_number(value), unit=unit, gpu=index))
    return Parsed(measurements=out, warnings=[str(e) for e in doc.get("errors", [])])


_RETIRED_GPU = re.compile(r"^GPU (?P<bus>[0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+\.[0-7])\s*$")
_RETIRED_FIELD = re.compile(
    r"^(?P<key>Single Bit ECC|Double Bit ECC|Pending Page Blacklist|Pending)\s*:\s*(?P<value>.+)$"
)


@register_parser("nvsmi_page_retirement")
def parse_page_retirement(text: str) -> Parsed:
    """`nvidia-smi -q -d PAGE_RETIREMENT` (pre-Ampere page retirement) -> per GPU, in listing order:
    retired_pages_single_bit, retired_pages_double_bit (pages), retired_pages_pending (1/0);
    labels pci (the bus id as printed). N/A values are recorded as missing."""
    out: list[Measurement] = []
    index = -1
    bus = ""
    names = {
        "Single Bit ECC": "retired_pages_single_bit",
        "Double Bit ECC": "retired_pages_double_bit",
        "Pending Page Blacklist": "retired_pages_pending",
        "Pending": "retired_pages_pending",
    }
    for raw in text.splitlines():
        line = raw.strip()
        if match := _RETIRED_GPU.match(line):
            index, bus = index + 1, match["bus"]
            continue
        match = _RETIRED_FIELD.match(line)
        if not match or index < 0:
            continue
        name, value = names[match["key"]], match["value"].strip()
        m = Measurement(name=name, gpu=index, labels={"pci": bus})
        if name == "retired_pages_pending":
            m.value = {"Yes": 1.0, "No": 0.0}.get(value)
        else:
            m.unit = "pages"
            m.value = float(value) if value.isdigit() else None
        if m.value is None:
            m.labels["missing"] = value
        out.append(m)
    if index < 0:
        raise EvidenceError("no 'GPU <bus id>' section: not nvidia-smi -q -d PAGE_RETIREMENT output")
    return Parsed(out)
