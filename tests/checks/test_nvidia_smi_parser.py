"""`python -m checks parse nvidia_smi_xml` on the real captures: the public measurement names."""

from __future__ import annotations

from checks.gpu.nvidia_smi import parse_nvidia_smi_xml_output
from tests.checks.probe_docs import fixture

V13 = "nvsmi_q_x_RTX4000Ada_drv595_v13schema.xml"
DRV535 = "nvsmi_q_x_A100-SXM4-80GB_MIG_drv535.xml"


def values(parsed, gpu=None) -> dict:
    return {m.name: (m.value if m.value is not None else (m.text or None)) for m in parsed.measurements if m.gpu == gpu}


def test_it_pins_the_v13_schema_capture() -> None:
    parsed = parse_nvidia_smi_xml_output(fixture(V13).read_text())
    top, gpu0 = values(parsed), values(parsed, 0)
    assert (top["gpus"], top["driver_version"], top["cuda_version"]) == (1, "595.84", "13.2")
    assert gpu0["product_name"] == "NVIDIA RTX 4000 SFF Ada Generation"
    assert gpu0["uuid"] == "GPU-37037c3f-65c8-ec4d-24a9-420204ad8026"
    assert gpu0["ecc_mode"] == 0
    assert gpu0["pcie_gen_current"] is not None and gpu0["gpu_temp"] is not None
    assert gpu0["remapped_rows_pending"] == 0 and gpu0["remapped_rows_failure"] == 0


def test_it_pins_the_driver_535_mig_capture() -> None:
    parsed = parse_nvidia_smi_xml_output(fixture(DRV535).read_text())
    top, gpu0 = values(parsed), values(parsed, 0)
    assert (top["gpus"], top["driver_version"], top["cuda_version"]) == (4, "535.54.03", "12.2")
    assert gpu0["product_name"] == "NVIDIA A100-SXM4-80GB"
    # Row remapping reads N/A under MIG: no evidence, so None, never 0.
    assert gpu0["remapped_rows_pending"] is None
    assert parsed.warnings, "the 4-attached / 1-listed mismatch is reported"
