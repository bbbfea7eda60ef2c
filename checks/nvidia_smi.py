"""`nvidia-smi -q -x` as a parser kind: the probe's XML reader, flattened into public measurement names."""

from __future__ import annotations

from typing import Any

from checks.base import EvidenceError, Measurement
from checks.parsers import Parsed, register_parser


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
