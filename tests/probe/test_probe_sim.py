"""The probe end to end on simulated nodes: `python3 - < probe.py` against the fake
libnvidia-ml.so.1 (through the real pynvml) and the fake nvidia-smi, with injected faults."""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from checks.probe import probe_source
from testbed.sim import SimPaths, build_simulator, node_env, read_state, write_state

pytest.importorskip("pynvml")


@dataclass
class ProbeRun:
    returncode: int
    data: dict[str, Any]
    stderr: str


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> SimPaths:
    return build_simulator(tmp_path_factory.mktemp("sim"))


@pytest.fixture
def node(sim: SimPaths, tmp_path: Path):
    def run(*probe_args: str, node_name: str = "gpu01", **faults: str | int) -> ProbeRun:
        state = tmp_path / f"{node_name}.state"
        write_state(state, node=node_name, **faults)
        proc = subprocess.run(
            ["python3", "-", *probe_args],  # found through the node's PATH, as over SSH
            input=probe_source(),
            env=node_env(sim, state),
            capture_output=True,
            text=True,
            timeout=60,
        )
        return ProbeRun(proc.returncode, json.loads(proc.stdout), proc.stderr)

    return run


def _uuids(data: dict[str, Any]) -> list[str]:
    return [gpu["uuid"] for gpu in data["gpus"]]


def test_it_reads_a_healthy_node_through_nvml(node) -> None:
    run = node()
    data = run.data
    assert run.returncode == 0, run.stderr
    assert data["source"] == "nvml"
    assert data["errors"] == []
    assert data["driver_version"] == "550.54.15"
    assert data["cuda_version"] == "12.4"
    assert data["gpu_count"] == 8
    assert [gpu["index"] for gpu in data["gpus"]] == list(range(8))
    assert len(set(_uuids(data))) == 8
    assert len({gpu["serial"] for gpu in data["gpus"]}) == 8
    for gpu in data["gpus"]:
        assert gpu["name"] == "NVIDIA H100 80GB HBM3"
        assert gpu["uuid"].startswith("GPU-") and len(gpu["uuid"]) == 40
        assert gpu["serial"].startswith("16549220")
        assert gpu["vbios_version"] == "96.00.89.00.01"
        assert gpu["ecc_mode"] == {"current": True, "pending": True}
        assert gpu["ecc_errors"]["volatile"] == {"corrected": 0, "uncorrected": 0}
        assert gpu["ecc_errors"]["aggregate"] == {"corrected": 0, "uncorrected": 0}
        assert gpu["remapped_rows"] == {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False}
        assert 33 <= gpu["temperature"]["gpu"] <= 40
        assert gpu["temperature"]["memory"] is not None
        assert gpu["temperature"]["slowdown"] == 87
        assert gpu["temperature"]["shutdown"] == 92
        assert gpu["temperature"]["gpu_max_operating"] == 85
        assert gpu["temperature"]["memory_max_operating"] == 95
        assert 69 < gpu["power"]["draw_w"] < 72 and gpu["power"]["limit_w"] == 700.0
        assert gpu["clock_event_reasons"] == {"mask": 1, "active": ["gpu_idle"]}
        assert gpu["pcie"] == {"gen_current": 5, "gen_max": 5, "width_current": 16, "width_max": 16}
        # Hopper has no page retirement: the only field the driver cannot answer.
        assert gpu["retired_pages"] is None
        assert gpu["errors"] == {"retired_pages": "Not Supported"}


def test_it_gives_each_node_stable_and_distinct_uuids(node) -> None:
    first = _uuids(node(node_name="gpu01").data)
    again = _uuids(node(node_name="gpu01").data)
    other = _uuids(node(node_name="gpu02").data)
    assert first == again
    assert not set(first) & set(other)


def test_it_reports_an_uncorrectable_ecc_error_on_one_gpu(node) -> None:
    data = node(ecc_uncorrectable_gpu=3).data
    uncorrected = [gpu["ecc_errors"]["volatile"]["uncorrected"] for gpu in data["gpus"]]
    assert uncorrected == [0, 0, 0, 2, 0, 0, 0, 0]
    assert data["gpus"][3]["ecc_errors"]["aggregate"]["uncorrected"] == 2
    assert data["gpus"][3]["ecc_errors"]["volatile"]["corrected"] == 0


def test_it_reports_a_pending_row_remap(node) -> None:
    data = node(remap_pending_gpu=1).data
    assert [gpu["remapped_rows"]["pending"] for gpu in data["gpus"]] == [False, True] + [False] * 6
    assert data["gpus"][1]["remapped_rows"]["failure"] is False


def test_it_counts_a_missing_gpu(node) -> None:
    data = node(missing_gpu=7).data
    assert data["gpu_count"] == 7
    assert len(data["gpus"]) == 7
    assert "00000000:DB:00.0" not in [gpu["pci_bus_id"] for gpu in data["gpus"]]


def test_it_reports_the_driver_version_of_the_node(node) -> None:
    assert node(driver="535.104.05").data["driver_version"] == "535.104.05"


def test_it_reads_disabled_ecc_as_no_evidence(node) -> None:
    gpu = node(ecc_disabled_gpu=2).data["gpus"][2]
    assert gpu["ecc_mode"] == {"current": False, "pending": False}
    assert gpu["ecc_errors"]["volatile"] == {"corrected": None, "uncorrected": None}
    assert gpu["errors"]["ecc_errors.volatile.uncorrected"] == "Not Supported"


def test_it_reports_thermal_slowdown_of_a_hot_gpu(node) -> None:
    gpu = node(temp_gpu=5, temp_value=90).data["gpus"][5]
    assert gpu["temperature"]["gpu"] == 90
    assert gpu["clock_event_reasons"]["active"] == ["sw_thermal_slowdown", "hw_thermal_slowdown"]


def test_it_falls_back_to_nvidia_smi_without_nvml(node) -> None:
    nvml = node(ecc_uncorrectable_gpu=3).data
    run = node(nvml_absent=1, ecc_uncorrectable_gpu=3)
    smi = run.data
    assert run.returncode == 0
    assert smi["source"] == "nvidia-smi"
    assert any("LibraryNotFound" in e for e in smi["errors"])
    assert smi["driver_version"] == nvml["driver_version"]
    assert smi["cuda_version"] == nvml["cuda_version"]
    assert smi["gpu_count"] == nvml["gpu_count"]
    assert _uuids(smi) == _uuids(nvml)
    assert [g["ecc_errors"] for g in smi["gpus"]] == [g["ecc_errors"] for g in nvml["gpus"]]


@pytest.mark.parametrize(
    "faults",
    [
        {},
        {"missing_gpu": 2, "remap_failure_gpu": 4},
        {"ecc_disabled_gpu": 1, "ecc_corrected_gpu": 6, "temp_gpu": 0, "temp_value": 86},
        {"pcie_degraded_gpu": 3, "remap_pending_gpu": 5},
    ],
)
def test_it_reads_the_same_facts_through_both_paths(node, faults: dict[str, int]) -> None:
    nvml = node("--source", "nvml", **faults).data
    smi = node("--source", "nvidia-smi", **faults).data
    assert (nvml["source"], smi["source"]) == ("nvml", "nvidia-smi")
    for key in ("driver_version", "cuda_version", "gpu_count"):
        assert nvml[key] == smi[key]
    assert len(nvml["gpus"]) == len(smi["gpus"])
    for a, b in zip(nvml["gpus"], smi["gpus"], strict=True):
        # nvidia-smi rounds watts to 2 decimals; error texts differ ("Not Supported" vs "N/A").
        assert a["power"]["draw_w"] == pytest.approx(b["power"]["draw_w"], abs=0.01)
        assert set(a["errors"]) == set(b["errors"])
        skip = {"power", "errors"}
        assert {k: v for k, v in a.items() if k not in skip} == {k: v for k, v in b.items() if k not in skip}


def test_it_exits_3_when_nothing_can_be_read(node) -> None:
    run = node(garbage=1)
    assert run.returncode == 3
    assert run.data["source"] == "none"
    assert run.data["gpus"] == [] and run.data["gpu_count"] is None
    text = " ".join(run.data["errors"])
    assert "nvmlInit failed" in text
    assert "nvidia-smi: unparseable output" in text


def test_it_blocks_on_a_hung_driver_until_killed(sim: SimPaths, tmp_path: Path) -> None:
    state = tmp_path / "hung.state"
    write_state(state, node="gpu09", hang=1)
    started = time.monotonic()
    proc = subprocess.run(
        ["timeout", "3", "python3", "-"],
        input=probe_source(),
        env=node_env(sim, state),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 124  # killed by timeout: nvmlInit never returned
    assert proc.stdout == ""
    assert time.monotonic() - started < 15


def test_it_kills_a_hung_nvidia_smi_after_its_own_timeout(node) -> None:
    started = time.monotonic()
    run = node("--source", "nvidia-smi", "--nvidia-smi-timeout", "1", hang=1)
    assert time.monotonic() - started < 15
    assert run.returncode == 3
    assert any("timed out" in e for e in run.data["errors"])


def test_it_lists_gpus_like_nvidia_smi_l(sim: SimPaths, tmp_path: Path) -> None:
    state = tmp_path / "list.state"
    write_state(state, node="gpu03", gpus=4)
    out = subprocess.run(
        ["nvidia-smi", "-L"], env=node_env(sim, state), capture_output=True, text=True, timeout=30, check=True
    ).stdout.splitlines()
    assert len(out) == 4
    assert out[0].startswith("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-")


def test_it_writes_and_reads_state_files(tmp_path: Path) -> None:
    state = tmp_path / "s.state"
    write_state(state, node="gpu07", ecc_uncorrectable_gpu=3, hang=True)
    values = read_state(state)
    assert values["node"] == "gpu07" and values["ecc_uncorrectable_gpu"] == "3" and values["hang"] == "1"
    assert values["gpus"] == "8"
    write_state(state, node="gpu07")  # clearing faults
    assert "ecc_uncorrectable_gpu" not in read_state(state)
    with pytest.raises(ValueError, match="ecc_uncorectable_gpu"):
        write_state(state, node="gpu07", ecc_uncorectable_gpu=3)


def test_it_skips_rebuilding_an_up_to_date_simulator(sim: SimPaths) -> None:
    lib = sim.lib_dir / "libnvidia-ml.so.1"
    before = lib.stat().st_mtime_ns
    again = build_simulator(sim.bin_dir.parent)
    assert again == sim
    assert lib.stat().st_mtime_ns == before
    assert os.access(sim.bin_dir / "nvidia-smi", os.X_OK)


def test_it_raises_with_the_compiler_output_when_the_build_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import testbed.sim as simmod

    broken = tmp_path / "broken.c"
    broken.write_text("int nvmlInit(void) { return }\n")
    monkeypatch.setattr(simmod, "NVML_SOURCE", broken)
    with pytest.raises(RuntimeError, match="error"):
        build_simulator(tmp_path / "out")
    assert not list((tmp_path / "out" / "lib").iterdir())  # no half-written library left behind


def test_it_tolerates_functions_missing_from_old_drivers_and_old_pynvml() -> None:
    import types

    import pynvml

    from checks.probe import probe

    def not_found(*_args: object) -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

    def not_supported(*_args: object) -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    # An old driver: no ClocksEventReasons symbol (ThrottleReasons instead), no field values,
    # no remapped rows; an old pynvml: no nvmlDeviceGetFieldValues wrapper at all.
    nv = types.SimpleNamespace(
        NVMLError=pynvml.NVMLError,
        nvmlDeviceGetHandleByIndex=lambda i: object(),
        nvmlDeviceGetName=lambda h: "Tesla V100-SXM2-32GB",
        nvmlDeviceGetCurrentClocksEventReasons=not_found,
        nvmlDeviceGetCurrentClocksThrottleReasons=lambda h: 0x4,
        nvmlDeviceGetRemappedRows=not_supported,
    )
    gpu = probe._nvml_gpu(nv, 0)
    assert gpu["name"] == "Tesla V100-SXM2-32GB"
    assert gpu["clock_event_reasons"] == {"mask": 4, "active": ["sw_power_cap"]}
    assert gpu["remapped_rows"] is None and gpu["errors"]["remapped_rows"] == "Not Supported"
    assert gpu["temperature"]["memory"] is None and "temperature.memory" in gpu["errors"]
    assert gpu["uuid"] is None and "uuid" in gpu["errors"]
