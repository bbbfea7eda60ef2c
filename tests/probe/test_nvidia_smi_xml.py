"""The probe's nvidia-smi XML parser, on real `nvidia-smi -q -x` outputs (tests/fixtures/nvidia-smi)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from checks.probe import PROBE_PATH, probe_source
from checks.probe.probe import parse_number, parse_nvidia_smi_xml

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "nvidia-smi"
A100_MIG = FIXTURES / "nvsmi_q_x_A100-SXM4-80GB_MIG_drv535.xml"
RTX_V13 = FIXTURES / "nvsmi_q_x_RTX4000Ada_drv595_v13schema.xml"


@pytest.fixture(scope="module")
def a100() -> dict[str, Any]:
    return parse_nvidia_smi_xml(A100_MIG.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def rtx() -> dict[str, Any]:
    return parse_nvidia_smi_xml(RTX_V13.read_text(encoding="utf-8"))


def test_it_keeps_fixture_provenance_next_to_fixtures() -> None:
    for xml in (A100_MIG, RTX_V13):
        assert xml.with_suffix(".source.txt").exists()


def test_it_reads_the_driver_header_of_v12(a100: dict[str, Any]) -> None:
    assert a100["schema"] == 1
    assert a100["source"] == "nvidia-smi"
    assert a100["driver_version"] == "535.54.03"
    assert a100["cuda_version"] == "12.2"
    assert a100["hostname"] is None and a100["collected_at"] is None


def test_it_reports_attached_gpus_and_flags_unlisted_ones(a100: dict[str, Any]) -> None:
    # The fixture says attached_gpus=4 but lists one <gpu>: the count is the driver's, and the gap is an error.
    assert a100["gpu_count"] == 4
    assert len(a100["gpus"]) == 1
    assert any("attached_gpus=4" in e for e in a100["errors"])


def test_it_reads_identity_of_a100(a100: dict[str, Any]) -> None:
    gpu = a100["gpus"][0]
    assert gpu["index"] == 0
    assert gpu["name"] == "NVIDIA A100-SXM4-80GB"
    assert gpu["uuid"] == "GPU-513536b6-7d19-9063-b049-1e69664bb298"
    assert gpu["serial"] == "1650522003820"
    assert gpu["pci_bus_id"] == "00000000:01:00.0"
    assert gpu["vbios_version"] == "92.00.36.00.02"


def test_it_sums_sram_and_dram_ecc_counts_of_v12(a100: dict[str, Any]) -> None:
    gpu = a100["gpus"][0]
    assert gpu["ecc_mode"] == {"current": True, "pending": True}
    assert gpu["ecc_errors"] == {
        "volatile": {"corrected": 0, "uncorrected": 0},
        "aggregate": {"corrected": 0, "uncorrected": 0},
    }


def test_it_reports_remapped_rows_as_null_under_mig(a100: dict[str, Any]) -> None:
    gpu = a100["gpus"][0]
    assert gpu["remapped_rows"] is None
    assert gpu["errors"]["remapped_rows"] == "N/A"
    assert gpu["retired_pages"] is None


def test_it_reads_absolute_temperature_thresholds_of_v12(a100: dict[str, Any]) -> None:
    assert a100["gpus"][0]["temperature"] == {
        "gpu": 27,
        "memory": 44,
        "slowdown": 89,
        "shutdown": 92,
        "gpu_max_operating": 85,
        "memory_max_operating": 95,
    }


def test_it_reads_power_pcie_and_clock_reasons_of_v12(a100: dict[str, Any]) -> None:
    gpu = a100["gpus"][0]
    assert gpu["power"] == {"draw_w": 67.03, "limit_w": 500.0}
    assert gpu["pcie"] == {"gen_current": 4, "gen_max": 4, "width_current": 16, "width_max": 16}
    assert gpu["clock_event_reasons"] == {"mask": 0, "active": []}


def test_it_reads_the_v13_header_and_identity(rtx: dict[str, Any]) -> None:
    assert rtx["driver_version"] == "595.84"
    assert rtx["cuda_version"] == "13.2"
    assert rtx["gpu_count"] == 1
    assert rtx["errors"] == []
    gpu = rtx["gpus"][0]
    assert gpu["name"] == "NVIDIA RTX 4000 SFF Ada Generation"
    assert gpu["uuid"] == "GPU-37037c3f-65c8-ec4d-24a9-420204ad8026"
    assert gpu["serial"] == "REDACTED"
    assert gpu["pci_bus_id"] == "00000000:06:00.0"
    assert gpu["vbios_version"] == "95.04.53.00.01"


def test_it_reports_disabled_ecc_with_null_counts_of_v13(rtx: dict[str, Any]) -> None:
    gpu = rtx["gpus"][0]
    assert gpu["ecc_mode"] == {"current": False, "pending": False}
    # All-N/A split counters are no evidence, never zero.
    assert gpu["ecc_errors"] == {
        "volatile": {"corrected": None, "uncorrected": None},
        "aggregate": {"corrected": None, "uncorrected": None},
    }
    assert gpu["errors"]["ecc_errors.volatile.uncorrected"] == "N/A"


def test_it_reads_the_full_remapped_rows_block_of_v13(rtx: dict[str, Any]) -> None:
    assert rtx["gpus"][0]["remapped_rows"] == {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False}


def test_it_converts_tlimit_relative_thresholds_of_v13(rtx: dict[str, Any]) -> None:
    # gpu 38 C + T.Limit margin 49 C = T.Limit 87 C; thresholds are offsets from it (-7, -2, 0).
    temp = rtx["gpus"][0]["temperature"]
    assert temp == {
        "gpu": 38,
        "memory": None,
        "slowdown": 89,
        "shutdown": 94,
        "gpu_max_operating": 87,
        "memory_max_operating": None,
    }
    assert rtx["gpus"][0]["errors"]["temperature.memory"] == "N/A"


def test_it_reads_power_pcie_and_clock_reasons_of_v13(rtx: dict[str, Any]) -> None:
    gpu = rtx["gpus"][0]
    assert gpu["power"] == {"draw_w": 8.81, "limit_w": 70.0}  # average_power_draw, like NVML's 1 s average
    assert gpu["pcie"] == {"gen_current": 1, "gen_max": 4, "width_current": 16, "width_max": 16}
    assert gpu["clock_event_reasons"] == {"mask": 1, "active": ["gpu_idle"]}


# A hand-made document in the pre-535 schema (no real fixture of it is stored): it covers
# clocks_throttle_reasons, <single_bit>/<double_bit> totals, <power_readings> and page retirement.
OLD_SCHEMA = """<?xml version="1.0" ?>
<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v10.dtd">
<nvidia_smi_log>
  <driver_version>470.82.01</driver_version>
  <cuda_version>11.4</cuda_version>
  <attached_gpus>1</attached_gpus>
  <gpu id="00000000:3B:00.0">
    <product_name>Tesla V100-SXM2-32GB</product_name>
    <serial>0323218012345</serial>
    <uuid>GPU-00000000-1111-2222-3333-444444444444</uuid>
    <vbios_version>88.00.80.00.01</vbios_version>
    <pci><pci_bus_id>00000000:3B:00.0</pci_bus_id></pci>
    <clocks_throttle_reasons>
      <clocks_throttle_reason_gpu_idle>Not Active</clocks_throttle_reason_gpu_idle>
      <clocks_throttle_reason_sw_power_cap>Active</clocks_throttle_reason_sw_power_cap>
      <clocks_throttle_reason_hw_thermal_slowdown>Active</clocks_throttle_reason_hw_thermal_slowdown>
      <clocks_throttle_reason_display_clocks_setting>Not Active</clocks_throttle_reason_display_clocks_setting>
    </clocks_throttle_reasons>
    <ecc_mode><current_ecc>Enabled</current_ecc><pending_ecc>Enabled</pending_ecc></ecc_mode>
    <ecc_errors>
      <volatile>
        <single_bit><device_memory>3</device_memory><total>3</total></single_bit>
        <double_bit><device_memory>1</device_memory><total>1</total></double_bit>
      </volatile>
      <aggregate>
        <single_bit><total>17</total></single_bit>
        <double_bit><total>[N/A]</total></double_bit>
      </aggregate>
    </ecc_errors>
    <retired_pages>
      <multiple_single_bit_retirement><retired_count>2</retired_count></multiple_single_bit_retirement>
      <double_bit_retirement><retired_count>1</retired_count></double_bit_retirement>
      <pending_blacklist>Yes</pending_blacklist>
    </retired_pages>
    <temperature>
      <gpu_temp>41 C</gpu_temp>
      <gpu_temp_max_threshold>90 C</gpu_temp_max_threshold>
      <gpu_temp_slow_threshold>87 C</gpu_temp_slow_threshold>
    </temperature>
    <power_readings>
      <power_draw>55.12 W</power_draw>
      <enforced_power_limit>300.00 W</enforced_power_limit>
    </power_readings>
  </gpu>
</nvidia_smi_log>
"""


def test_it_reads_the_pre_535_schema_names() -> None:
    gpu = parse_nvidia_smi_xml(OLD_SCHEMA)["gpus"][0]
    assert gpu["clock_event_reasons"] == {"mask": 0x44, "active": ["sw_power_cap", "hw_thermal_slowdown"]}
    assert gpu["ecc_errors"] == {
        "volatile": {"corrected": 3, "uncorrected": 1},
        "aggregate": {"corrected": 17, "uncorrected": None},
    }
    assert gpu["retired_pages"] == {"single_bit": 2, "double_bit": 1, "pending": True}
    assert gpu["power"] == {"draw_w": 55.12, "limit_w": 300.0}
    assert gpu["temperature"]["shutdown"] == 90
    assert gpu["temperature"]["gpu_max_operating"] is None
    assert gpu["remapped_rows"] is None
    assert gpu["pcie"]["gen_current"] is None
    assert "pcie.gen_current" in gpu["errors"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("35 C", 35),
        ("70.50 W", 70.5),
        ("16x", 16),
        ("-7 C", -7),
        ("2560 bank(s)", 2560),
        ("N/A", None),
        ("[N/A]", None),
        ("Not Supported", None),
        ("[Not Supported]", None),
        ("Requested functionality has been deprecated", None),
        (None, None),
        ("Enabled", None),
    ],
)
def test_it_parses_numbers_with_units(text: str | None, expected: float | None) -> None:
    assert parse_number(text) == expected


@pytest.mark.parametrize("text", ["", "Failed to initialize NVML: Driver/library version mismatch", "<other/>"])
def test_it_rejects_what_is_not_nvidia_smi_xml(text: str) -> None:
    with pytest.raises(ValueError):
        parse_nvidia_smi_xml(text)


def test_it_exposes_the_probe_source_without_running_it() -> None:
    assert PROBE_PATH.name == "probe.py"
    assert "def parse_nvidia_smi_xml" in probe_source()
