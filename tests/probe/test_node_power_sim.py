"""The probe's --node-power and --start-at, run as on a node (`python3 - < probe.py`): GPUs from the
simulator's fake NVML, ipmitool a fake one on PATH in a temporary folder (normal, DCMI absent, hung,
garbled, NaN, missing), then the simulator's own ipmitool, whose power follows gpu_burn's load."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from checks.core.sampling import parse_sampling
from checks.probe import probe_source
from testbed.sim import SimPaths, build_simulator, node_env, write_state
from tests.probe.steady import steady_indices

# Real-time readings judged on a deadline: beside other such tests, never at once (tests/conftest.py).
pytestmark = pytest.mark.exclusive("cpu")

pytest.importorskip("pynvml")

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "ipmitool-dcmi"
DCMI_TEXT = (FIXTURES / "dcmi-power-reading-activated-lovoo-18.txt").read_text(encoding="utf-8")  # 215 W
SDR_TEXT = (FIXTURES / "sdr-elist-psu-power-in-ibm-ha-ipmi-13.txt").read_text(encoding="utf-8")  # 132 + 160 W
ABSENT = 'echo "    DCMI request failed because: Invalid command (c1)" >&2; exit 1'


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> SimPaths:
    return build_simulator(tmp_path_factory.mktemp("sim"))


def fake_ipmitool(folder: Path, dcmi: str, sdr: str = "") -> Path:
    """An `ipmitool` whose `dcmi` runs the shell `dcmi` and whose `sdr` prints `sdr`; every call is
    logged to calls.log (one line each)."""
    folder.mkdir(exist_ok=True)
    (folder / "dcmi.txt").write_text(DCMI_TEXT, encoding="utf-8")
    (folder / "sdr.txt").write_text(sdr, encoding="utf-8")
    script = folder / "ipmitool"
    script.write_text(
        "#!/bin/sh\n"
        f'cd "{folder}"\n'
        'echo "$1" >> calls.log\n'
        f'if [ "$1" = dcmi ]; then {dcmi}; fi\n'
        'if [ "$1" = sdr ]; then cat sdr.txt; exit 0; fi\n'
        "exit 1\n",
        encoding="utf-8",
    )
    script.chmod(0o755)
    return folder


def probe(sim: SimPaths, tmp_path: Path, *args: str, bin_dir: Path | None = None, **faults: str | int):
    state = tmp_path / "gpu01.state"
    write_state(state, node="gpu01", **faults)
    env = node_env(sim, state)
    if bin_dir is not None:
        env["PATH"] = f"{bin_dir}:{env['PATH']}"
    began = time.monotonic()
    proc = subprocess.run(
        ["python3", "-", *args], input=probe_source(), env=env, capture_output=True, text=True, timeout=120
    )
    data: dict[str, Any] = json.loads(proc.stdout) if proc.stdout.strip() else {}
    return proc, data, time.monotonic() - began


IDLE = ("--sample", "0.5", "--node-power", "--duration", "2")


def test_it_samples_dcmi_power_beside_the_gpus(sim: SimPaths, tmp_path: Path) -> None:
    bin_dir = fake_ipmitool(tmp_path / "bin", dcmi="cat dcmi.txt; exit 0")
    proc, data, _ = probe(sim, tmp_path, *IDLE, bin_dir=bin_dir)
    assert proc.returncode == 0, proc.stderr
    power, times = data["samples"]["node_power_w"], data["samples"]["t"]
    assert len(power) == len(times) >= 4
    assert set(power[1:]) == {215.0}  # t = 0 may come before the first answer
    assert data["node_power"]["source"] == "dcmi" and data["node_power"]["errors"] == []
    calls = (bin_dir / "calls.log").read_text().split()
    assert set(calls) == {"dcmi"} and len(calls) <= len(times) + 1  # one reading per sample, no flood
    assert parse_sampling(proc.stdout).node_power()[1] == (times[1], 215.0)


def test_it_falls_back_to_the_psu_sensors_without_dcmi(sim: SimPaths, tmp_path: Path) -> None:
    bin_dir = fake_ipmitool(tmp_path / "bin", dcmi=ABSENT, sdr=SDR_TEXT)
    _, data, _ = probe(sim, tmp_path, *IDLE, bin_dir=bin_dir)
    assert set(data["samples"]["node_power_w"][1:]) == {292.0}
    assert data["node_power"]["source"] == "sdr" and data["node_power"]["argv"] == ["ipmitool", "sdr", "elist"]
    rejected = "dcmi: the BMC rejects DCMI: DCMI request failed because: Invalid command (c1)"
    assert data["node_power"]["errors"] == [rejected]
    assert (bin_dir / "calls.log").read_text().split().count("dcmi") == 1  # asked once, then sdr


def test_it_keeps_sampling_gpus_on_time_while_the_bmc_hangs(sim: SimPaths, tmp_path: Path) -> None:
    bin_dir = fake_ipmitool(tmp_path / "bin", dcmi="exec sleep 299.75")
    args = ("--sample", "0.5", "--node-power", "--node-power-timeout", "1", "--duration", "3")
    proc, data, _ = probe(sim, tmp_path, *args, bin_dir=bin_dir)
    assert proc.returncode == 0, proc.stderr
    times = data["samples"]["t"]
    assert len(times) >= 6 and max(b - a for a, b in zip(times, times[1:], strict=False)) < 0.8  # not delayed
    assert data["samples"]["node_power_w"] == [None] * len(times)
    assert data["samples"]["gpus"][0]["power_w"][-1] is not None
    assert data["node_power"]["source"] is None
    assert data["node_power"]["errors"][0].startswith("dcmi: ipmitool gave no answer in 1 s (killed)")
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
    assert "sleep 299.75" not in ps  # the hung ipmitool was killed, not left behind


@pytest.mark.parametrize(
    ("dcmi", "error"),
    [
        ("printf '    Instantaneous power reading: 21\\0\\7#junk\\n'", "dcmi: garbled answer: no 'Instantaneous"),
        ("sed 's/  215 Watts/  nan Watts/' dcmi.txt", "dcmi: nan W is not a finite number"),
        ("sed 's/  215 Watts/  -40 Watts/' dcmi.txt", "dcmi: -40 W is impossible for a node"),
    ],
)
def test_it_turns_garbage_and_impossible_readings_into_nulls(
    sim: SimPaths, tmp_path: Path, dcmi: str, error: str
) -> None:
    bin_dir = fake_ipmitool(tmp_path / "bin", dcmi=dcmi + "; exit 0")
    _, data, _ = probe(sim, tmp_path, *IDLE, bin_dir=bin_dir)
    assert data["samples"]["node_power_w"] == [None] * len(data["samples"]["t"])
    [reason] = data["node_power"]["errors"]
    assert reason.startswith(error) and reason.endswith("times)")  # once, counted
    parse_sampling(json.dumps(data))  # nulls only: a readable document


def test_it_says_so_when_the_node_has_no_ipmitool(sim: SimPaths, tmp_path: Path) -> None:
    state = tmp_path / "gpu01.state"
    write_state(state, node="gpu01")
    env = node_env(sim, state)
    env["PATH"] = ":".join(p for p in env["PATH"].split(":") if p != str(sim.bin_dir))  # the sim's ipmitool too
    proc = subprocess.run(["python3", "-", *IDLE], input=probe_source(), env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    data = json.loads(proc.stdout)
    assert data["samples"]["node_power_w"] == [None] * len(data["samples"]["t"])
    assert data["node_power"]["attempts"] == 1  # gave up: nothing to retry
    assert data["node_power"]["errors"][0].startswith("dcmi: ipmitool cannot run: ")


def test_it_follows_gpu_burns_load_and_the_over_drawing_fault(sim: SimPaths, tmp_path: Path) -> None:
    args = ("--sample", "0.5", "--node-power", "--", "gpu_burn", "3")
    _, healthy, _ = probe(sim, tmp_path, *args)
    _, over, _ = probe(sim, tmp_path, *args, power_over_pct=30)
    for data in (healthy, over):
        assert data["node_power"]["source"] == "dcmi" and data["node_power"]["errors"] == []
    # At steady load (after the ramp, by the samples' times): the node's reading and its GPUs' sum.
    loaded = [healthy["samples"]["node_power_w"][i] for i in steady_indices(healthy)]
    # 8 GPUs of 650-685 W and the platform's 1,500 W (testbed/sim/power.py)
    assert all(6500 < p < 7000 for p in loaded), loaded
    for i in steady_indices(over):
        gpus = sum(g["power_w"][i] for g in over["samples"]["gpus"])
        assert over["samples"]["node_power_w"][i] - max(loaded) == pytest.approx(0.3 * gpus, rel=0.1)


def test_it_waits_for_the_common_start(sim: SimPaths, tmp_path: Path) -> None:
    start = round(time.time() + 2.5, 3)
    proc, data, took = probe(sim, tmp_path, "--sample", "0.5", "--duration", "0.5", "--start-at", f"{start}")
    assert proc.returncode == 0, proc.stderr
    assert data["start_at"] == start and start <= data["started_at"] < start + 0.3
    assert 0 <= data["start_late_s"] < 0.3 and took >= 2.5
    assert data["samples"]["t"][0] == 0.0 and data["child"] is None


def test_it_starts_at_once_when_the_start_is_past(sim: SimPaths, tmp_path: Path) -> None:
    start = time.time() - 30
    proc, data, took = probe(sim, tmp_path, "--sample", "0.5", "--duration", "0.5", "--start-at", f"{start}")
    assert proc.returncode == 0 and took < 20
    assert 30 <= data["start_late_s"] < 30 + took + 1


@pytest.mark.parametrize(
    ("start", "message"),
    [(3600, "s ahead of this node's clock, more than 600 s"), (float("nan"), "must be a finite time")],
)
def test_it_refuses_a_start_too_far_ahead(sim: SimPaths, tmp_path: Path, start: float, message: str) -> None:
    at = f"{time.time() + start:.0f}" if start == start else "nan"
    proc, data, took = probe(sim, tmp_path, "--sample", "1", "--start-at", at, "--", "gpu_burn", "5")
    assert (proc.returncode, data) == (2, {}) and took < 10
    assert message in proc.stderr and "probe.py: error: --start-at" in proc.stderr
