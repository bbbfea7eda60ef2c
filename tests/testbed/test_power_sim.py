"""The simulated node's power (testbed/sim/power.py) through its readers: `ipmitool dcmi power
reading` and `ipmitool sdr` against the real outputs' shapes, the fake NVML and nvidia-smi, under
idle and gpu_burn load, and the BMC faults. Runs the simulated tools as subprocesses (no sshd)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from checks.core.parsers import PARSERS
from testbed.sim import SimPaths, build_simulator, node_env, write_state
from testbed.sim.power import PLATFORM_IDLE_W, PLATFORM_LOAD_W, node_power

# Real `ipmitool dcmi power reading` outputs, verbatim (the captures in tests/fixtures/ipmitool-dcmi/):
# lovoo/ipmi_exporter issue 18 (2017, activated) and openbmc/openbmc issue 3257 (2018, a BMC
# without statistics: deactivated).
REAL_ACTIVATED = """
    Instantaneous power reading:                   215 Watts
    Minimum during sampling period:                162 Watts
    Maximum during sampling period:                276 Watts
    Average power reading over sample period:      176 Watts
    IPMI timestamp:                           Wed Feb 15 12:49:51 2017
    Sampling period:                          01131466 Seconds.
    Power reading state is:                   activated

"""
REAL_DEACTIVATED = """
    Instantaneous power reading:                   319 Watts
    Minimum during sampling period:                319 Watts
    Maximum during sampling period:                319 Watts
    Average power reading over sample period:      319 Watts
    IPMI timestamp:                           Thu Jan  1 00:00:00 1970
    Sampling period:                          00000000 Seconds.
    Power reading state is:                   deactivated

"""
# `ipmitool sdr elist full | grep 'Power In'` on an IBM server (ateodorescu/home-assistant-ipmi issue 13).
REAL_ELIST = ["PS1 Power In     | 52h | ok  | 10.1 | 132 Watts", "PS2 Power In     | 53h | ok  | 10.2 | 160 Watts"]
ELIST_ROW = re.compile(r".{16} \| [0-9A-F]{2}h \| ok  \| [ \d]\d\.\d \| \d+ Watts")
# fake_nvml.c under steady load: 650 W + 5 W x slot on 8 GPUs; idle 70 W + 0.137 W x slot.
LOADED_GPU_W = sum(650.0 + 5.0 * s for s in range(8))
IDLE_GPU_W = sum(70.0 + 0.137 * s for s in range(8))
CTIME = re.compile(r"[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}")


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> SimPaths:
    return build_simulator(tmp_path_factory.mktemp("sim"))


def run(sim: SimPaths, state: Path, *argv: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), env=node_env(sim, state), capture_output=True, text=True, timeout=timeout)


def node(tmp_path: Path, name: str = "gpu01", **faults: str | int) -> Path:
    state = tmp_path / "nodes" / name / "state"
    write_state(state, node=name, **faults)
    return state


def loaded(state: Path) -> None:
    """gpu_burn's load marker with a live pid (this test), aged past the 1.5 s ramp: steady full load."""
    marker = Path(f"{state}.load")
    marker.write_text(f"{os.getpid()}\n")
    past = time.time() - 60
    os.utime(marker, (past, past))


def dcmi(sim: SimPaths, state: Path) -> dict[str, int]:
    proc = run(sim, state, "ipmitool", "dcmi", "power", "reading")
    assert proc.returncode == 0, proc.stderr
    found = dict(re.findall(r"^\s+(\w+)[^:\n]*:\s+(\d+) (?:Watts|Seconds\.)$", proc.stdout, re.M))
    return {k: int(v) for k, v in found.items()}


def shape(line: str) -> str:
    """A line with its values blanked but its columns kept: the real output's layout."""
    line = CTIME.sub("<ctime>", line)
    return re.sub(r" *\d+", lambda m: "#" * len(m.group()), line)


# --- ipmitool dcmi power reading ---------------------------------------------------------------------


def test_dcmi_reading_has_the_real_layout(sim: SimPaths, tmp_path: Path) -> None:
    out = run(sim, node(tmp_path), "ipmitool", "dcmi", "power", "reading").stdout
    assert out.startswith("\n") and out.endswith("activated\n\n")
    assert [shape(line) for line in out.splitlines()] == [shape(line) for line in REAL_ACTIVATED.splitlines()]


def test_a_bmc_without_statistics_prints_the_deactivated_layout(sim: SimPaths, tmp_path: Path) -> None:
    out = run(sim, node(tmp_path, dcmi_deactivated=1), "ipmitool", "dcmi", "power", "reading").stdout
    assert [shape(line) for line in out.splitlines()] == [shape(line) for line in REAL_DEACTIVATED.splitlines()]
    assert "IPMI timestamp:                           Thu Jan  1 00:00:00 1970" in out
    assert "Sampling period:                          00000000 Seconds." in out
    values = re.findall(r"(\d+) Watts", out)
    assert len(values) == 4 and len(set(values)) == 1


def test_dcmi_follows_the_load_and_equals_nvml_plus_platform(sim: SimPaths, tmp_path: Path) -> None:
    state = node(tmp_path)
    idle = dcmi(sim, state)["Instantaneous"]
    assert idle == round(IDLE_GPU_W + PLATFORM_IDLE_W)
    loaded(state)
    busy = dcmi(sim, state)["Instantaneous"]
    assert busy == round(LOADED_GPU_W + PLATFORM_LOAD_W) == 6840
    # The GPU part is what the fake NVML reports at that moment.
    probe = (
        "import pynvml as n\nn.nvmlInit()\n"
        "print(sum(n.nvmlDeviceGetPowerUsage(n.nvmlDeviceGetHandleByIndex(i)) for i in range(n.nvmlDeviceGetCount())))"
    )
    nvml = subprocess.run(
        [sys.executable, "-c", probe], env=node_env(sim, state), capture_output=True, text=True, timeout=30
    )
    assert nvml.returncode == 0, nvml.stderr
    assert busy == round(int(nvml.stdout) / 1000 + PLATFORM_LOAD_W)
    assert busy == round(node_power(state).total_w)


def test_nvidia_smi_power_draw_follows_the_load_like_nvml(sim: SimPaths, tmp_path: Path) -> None:
    state = node(tmp_path)

    def draws() -> list[float]:
        root = ET.fromstring(run(sim, state, "nvidia-smi", "-q", "-x").stdout)
        return [float(e.text.split()[0]) for e in root.iter("power_draw") if e.text and e.text != "N/A"]

    assert sum(draws()) == pytest.approx(IDLE_GPU_W, abs=0.05)
    loaded(state)
    assert sum(draws()) == pytest.approx(LOADED_GPU_W, abs=0.05)


def test_a_running_gpu_burn_raises_the_reading_and_its_end_lowers_it(sim: SimPaths, tmp_path: Path) -> None:
    state = node(tmp_path)
    idle = dcmi(sim, state)["Instantaneous"]
    burn = subprocess.Popen(["gpu_burn", "60"], env=node_env(sim, state), stdout=subprocess.DEVNULL)
    try:
        marker = Path(f"{state}.load")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (marker.exists() and marker.read_text().strip()):
            time.sleep(0.05)  # gpu_burn creates its marker, then writes its pid into it
        assert marker.read_text().strip() == str(burn.pid)
        during = dcmi(sim, state)["Instantaneous"]
        assert during > idle  # from 5% of the way up (the ramp's start) to full load
        assert during <= round(LOADED_GPU_W + PLATFORM_LOAD_W)
    finally:
        burn.send_signal(signal.SIGTERM)
        burn.wait(timeout=20)
    assert not marker.exists()
    assert dcmi(sim, state)["Instantaneous"] == idle


def test_min_max_average_cover_the_readings_of_the_period(sim: SimPaths, tmp_path: Path) -> None:
    state = node(tmp_path, dcmi_period_s=3600)
    # A reading older than the period is forgotten.
    Path(f"{state}.dcmi").write_text(f"{time.time() - 7200:.3f} 99999\n")
    idle = dcmi(sim, state)
    assert idle["Minimum"] == idle["Maximum"] == idle["Average"] == idle["Instantaneous"]
    assert idle["Sampling"] == 3600
    loaded(state)
    busy = dcmi(sim, state)
    assert (busy["Minimum"], busy["Maximum"]) == (idle["Instantaneous"], busy["Instantaneous"])
    assert busy["Average"] == round((idle["Instantaneous"] + busy["Instantaneous"]) / 2)
    again = dcmi(sim, state)
    assert again["Average"] == round((idle["Instantaneous"] + 2 * busy["Instantaneous"]) / 3)


def test_power_over_pct_adds_that_share_of_the_gpu_sum(sim: SimPaths, tmp_path: Path) -> None:
    healthy, over = node(tmp_path, "gpu01"), node(tmp_path, "gpu02", power_over_pct=30)
    assert dcmi(sim, over)["Instantaneous"] - dcmi(sim, healthy)["Instantaneous"] == round(0.3 * IDLE_GPU_W)
    loaded(healthy)
    loaded(over)
    difference = dcmi(sim, over)["Instantaneous"] - dcmi(sim, healthy)["Instantaneous"]
    assert difference == round(0.3 * LOADED_GPU_W) == 1602


def test_a_power_capped_gpu_draws_its_cap_under_load(tmp_path: Path) -> None:
    state = node(tmp_path, power_cap_gpu=6, power_cap_w=400)
    loaded(state)
    assert node_power(state).gpu_mw[6] == 400000
    assert node_power(state).gpu_w == pytest.approx(LOADED_GPU_W - 680 + 400)


def test_dcmi_absent_fails_like_ipmitool_and_sdr_still_answers(sim: SimPaths, tmp_path: Path) -> None:
    state = node(tmp_path, dcmi_absent=1)
    proc = run(sim, state, "ipmitool", "dcmi", "power", "reading")
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr == "\n    DCMI request failed because: Invalid command (c1)\n"
    assert "PSU1 Power In" in run(sim, state, "ipmitool", "sdr").stdout


def test_dcmi_garbage_is_truncated_junk(sim: SimPaths, tmp_path: Path) -> None:
    proc = run(sim, node(tmp_path, dcmi_garbage=1), "ipmitool", "dcmi", "power", "reading")
    assert proc.returncode == 0
    assert "\x00" in proc.stdout and "Power reading state" not in proc.stdout and "Average" not in proc.stdout


def test_dcmi_hang_blocks_until_killed(sim: SimPaths, tmp_path: Path) -> None:
    proc = run(sim, node(tmp_path, dcmi_hang=1), "timeout", "2", "ipmitool", "dcmi", "power", "reading")
    assert (proc.returncode, proc.stdout) == (124, "")


@pytest.mark.parametrize("fault", ["hang", "garbage"])
def test_gpu_driver_faults_leave_the_bmc_answering(sim: SimPaths, tmp_path: Path, fault: str) -> None:
    state = node(tmp_path, **{fault: 1})
    assert dcmi(sim, state)["Instantaneous"] == round(IDLE_GPU_W + PLATFORM_IDLE_W)


def test_other_dcmi_commands_are_refused(sim: SimPaths, tmp_path: Path) -> None:
    proc = run(sim, node(tmp_path), "ipmitool", "-I", "open", "dcmi", "power", "get_limit")
    assert proc.returncode == 1 and "only 'dcmi power reading'" in proc.stderr


# --- ipmitool sdr: PSU input power -------------------------------------------------------------------


def test_sdr_psu_input_power_sums_to_the_node_and_temperatures_still_parse(sim: SimPaths, tmp_path: Path) -> None:
    state = node(tmp_path)
    loaded(state)
    out = run(sim, state, "ipmitool", "-I", "open", "sdr").stdout
    psus = [int(w) for w in re.findall(r"^PSU\d Power In +\| (\d+) Watts +\| ok$", out, re.M)]
    assert len(psus) == 6 and abs(sum(psus) - 6840) <= 3
    assert "Avg Power        | 6840 Watts        | ok" in out
    parsed = PARSERS["ipmitool_sdr"](out)
    temps = {m.labels["sensor"]: m.value for m in parsed.measurements if m.name == "temperature"}
    assert temps == {"Inlet Temp": 24.0, "Exhaust Temp": 41.0, "Coolant Inlet": 30.0, "Coolant Outlet": 38.0}


def test_sdr_elist_has_the_real_extended_layout(sim: SimPaths, tmp_path: Path) -> None:
    assert all(ELIST_ROW.fullmatch(line) for line in REAL_ELIST)
    out = run(sim, node(tmp_path), "ipmitool", "sdr", "elist").stdout.splitlines()
    ours = [line for line in out if "Power In" in line]
    assert len(ours) == 6 and all(ELIST_ROW.fullmatch(line) for line in ours), ours
    assert ours[0].startswith("PSU1 Power In    | 52h | ok  | 10.1 | ")


def test_without_a_state_file_the_node_is_a_healthy_idle_one(sim: SimPaths) -> None:
    env = node_env(sim, Path("/nonexistent/state"))
    del env["KILN_SIM_STATE"]
    proc = subprocess.run(["ipmitool", "dcmi", "power", "reading"], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0
    assert f"{round(IDLE_GPU_W + PLATFORM_IDLE_W):8d} Watts" in proc.stdout


# --- the compiled ipmitool against power.py -----------------------------------------------------------

MODEL_STATES = [
    {},
    {"power_over_pct": 30},
    {"power_cap_gpu": "6", "power_cap_w": 400},
    {"missing_gpu": "1, 5"},
    {"throttle_gpu": "2,3"},
    {"gpus": 3, "power_over_pct": "12.5"},
    {"gpus": 100},
    {"power_over_pct": -5},
]


@pytest.mark.parametrize("load", ["idle", "loaded"])
@pytest.mark.parametrize("faults", MODEL_STATES, ids=lambda f: ",".join(f"{k}={v}" for k, v in f.items()) or "healthy")
def test_it_reads_what_the_power_model_says(sim: SimPaths, tmp_path: Path, faults: dict[str, str], load: str) -> None:
    # fake_ipmitool.c mirrors power.py, which nvidia-smi and the facility's Redfish service import:
    # the BMC, the PDUs and the coolant loop must see the same node.
    state = node(tmp_path, **faults)
    if load == "loaded":
        loaded(state)
    watts = node_power(state).total_w
    assert dcmi(sim, state)["Instantaneous"] == int(watts + 0.5)
    out = run(sim, state, "ipmitool", "sdr").stdout
    assert f"Avg Power        | {round(watts)} Watts" in out  # Python's round: half to even, as rint()
    psus = re.findall(r"^PSU\d Power In +\| (\d+) Watts", out, re.M)
    assert psus == [str(round(watts / 6))] * 6


def test_it_keeps_the_statistics_as_the_power_model_does(sim: SimPaths, tmp_path: Path) -> None:
    from testbed.sim.power import record_reading

    state = node(tmp_path, dcmi_period_s=60)
    now = time.time()
    # Two readings inside the minute, one outside it, and lines a reader must skip.
    history = f"{now - 500:.3f} 9000\n{now - 30:.3f} 5000\nnot a reading\n{now - 10:.3f} 7001\n{now - 5:.3f} 1.5\n"
    Path(f"{state}.dcmi").write_text(history)
    (tmp_path / "copy.dcmi").write_text(history)
    got = dcmi(sim, state)
    want = record_reading(tmp_path / "copy.dcmi", got["Instantaneous"], 60, time.time())
    assert (got["Minimum"], got["Maximum"], got["Average"], got["Sampling"]) == (
        want.min_w,
        want.max_w,
        want.avg_w,
        want.period_s,
    )
    kept = [line.split()[1] for line in Path(f"{state}.dcmi").read_text().splitlines()]
    assert kept == ["5000", "7001", str(got["Instantaneous"])]


def test_sdr_type_temperature_lists_the_temperatures_only(sim: SimPaths, tmp_path: Path) -> None:
    out = run(sim, node(tmp_path, coolant_inlet="31.5"), "ipmitool", "sdr", "type", "temperature").stdout
    assert out.splitlines() == [
        "Inlet Temp       | 24 degrees C      | ok",
        "Exhaust Temp     | 41 degrees C      | ok",
        "Coolant Inlet    | 31.5 degrees C    | ok",
        "Coolant Outlet   | 38 degrees C      | ok",
    ]


def test_a_coolant_reading_that_is_not_a_number_is_an_error_naming_it(sim: SimPaths, tmp_path: Path) -> None:
    proc = run(sim, node(tmp_path, coolant_outlet="warm"), "ipmitool", "sdr")
    assert (proc.returncode, proc.stdout) == (1, "")
    assert "coolant_outlet=warm is not a number" in proc.stderr


def test_a_reading_costs_about_a_millisecond_of_cpu(sim: SimPaths, tmp_path: Path) -> None:
    # Every soak and burn-in sample reads the BMC on every node: eight simulated nodes at 1 Hz must
    # not load a 2-core machine. The Python simulator cost ~50 ms of CPU per reading (time the
    # interpreter starts); the compiled one ~1-2 ms (bench/bench_bmc_sim.py). 15 ms leaves room for
    # a busy machine's accounting and still fails an interpreter.
    import resource

    state = node(tmp_path)
    env = node_env(sim, state)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    for _ in range(20):
        subprocess.run(["ipmitool", "dcmi", "power", "reading"], env=env, capture_output=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    spent = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    assert spent / 20 < 0.015, f"{spent / 20 * 1000:.1f} ms of CPU per reading"
