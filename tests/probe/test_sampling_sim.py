"""The probe's sampling mode on simulated nodes: idle sampling, and sampling while the simulated
gpu_burn loads the fake GPUs (through the real pynvml and the fake libnvidia-ml)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from checks.probe import probe_source
from testbed.sim import SimPaths, build_simulator, node_env, write_state
from tests.probe.steady import steady_indices

pytest.importorskip("pynvml")


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> SimPaths:
    return build_simulator(tmp_path_factory.mktemp("sim"))


def run(sim: SimPaths, tmp_path: Path, *args: str, **faults: str | int) -> tuple[int, dict[str, Any]]:
    state = tmp_path / "gpu01.state"
    write_state(state, node="gpu01", **faults)
    proc = subprocess.run(
        ["python3", "-", *args],
        input=probe_source(),
        env=node_env(sim, state),
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc.returncode, json.loads(proc.stdout)


def column(data: dict[str, Any], gpu: int, field: str) -> list[Any]:
    """One GPU's readings of one field (sampling schema 2: an array per GPU per field)."""
    return next(g[field] for g in data["samples"]["gpus"] if g["index"] == gpu)


def steady(data: dict[str, Any], gpu: int, field: str) -> list[Any]:
    """One GPU's readings of one field at steady load (after the simulated ramp)."""
    values = column(data, gpu, field)
    return [values[i] for i in steady_indices(data)]


def test_it_samples_an_idle_node_for_the_duration(sim: SimPaths, tmp_path: Path) -> None:
    code, data = run(sim, tmp_path, "--sample", "0.5", "--duration", "1.5")
    assert code == 0
    assert (data["schema"], data["mode"], data["child"], data["errors"]) == (2, "sample", None, [])
    assert data["before"]["gpu_count"] == 8 and data["after"]["gpu_count"] == 8
    times = data["samples"]["t"]
    assert 3 <= len(times) <= 6 and times == sorted(times)
    gpus = data["samples"]["gpus"]
    assert [g["index"] for g in gpus] == list(range(8))
    assert set(gpus[0]) == {"index", "temp_gpu", "temp_memory", "power_w", "sm_clock_mhz", "clock_event_reasons",
                            "ecc_volatile_uncorrected", "ecc_volatile_corrected"}  # fmt: skip
    assert all(len(values) == len(times) for g in gpus for name, values in g.items() if name != "index")
    assert gpus[0]["clock_event_reasons"][0] == 1 and gpus[0]["temp_gpu"][0] < 45  # idle


def test_it_samples_rising_temperatures_under_gpu_burn(sim: SimPaths, tmp_path: Path) -> None:
    code, data = run(sim, tmp_path, "--sample", "0.5", "--", "gpu_burn", "3")
    assert code == 0
    assert data["child"]["argv"] == ["gpu_burn", "3"] and data["child"]["exit_code"] == 0
    assert "Tested 8 GPUs:" in data["child"]["stdout"]
    assert column(data, 0, "temp_gpu")[0] < 45
    assert all(65 <= t <= 72 for t in steady(data, 0, "temp_gpu"))
    assert all(73 <= t <= 80 for t in steady(data, 0, "temp_memory"))
    assert all(650 <= p <= 690 for p in steady(data, 0, "power_w"))
    assert set(steady(data, 0, "sm_clock_mhz")) == {1980}
    assert set(steady(data, 0, "clock_event_reasons")) == {0}
    assert not Path(str(tmp_path / "gpu01.state") + ".load").exists()  # marker removed


def test_it_shows_the_hot_gpu_twelve_degrees_hotter(sim: SimPaths, tmp_path: Path) -> None:
    _, data = run(sim, tmp_path, "--sample", "0.5", "--", "gpu_burn", "3", hot_gpu=3)
    # Slot offsets: GPU 3 idles 1 C above GPU 2, so +12 under load reads as 13 over GPU 2.
    assert {a - b for a, b in zip(steady(data, 3, "temp_gpu"), steady(data, 2, "temp_gpu"), strict=True)} == {13}


def test_it_shows_thermal_reasons_on_the_throttled_gpu(sim: SimPaths, tmp_path: Path) -> None:
    _, data = run(sim, tmp_path, "--sample", "0.5", "--", "gpu_burn", "3", throttle_gpu=6)
    assert all(m & 0x60 == 0x60 for m in steady(data, 6, "clock_event_reasons"))  # sw + hw thermal
    assert set(steady(data, 6, "temp_gpu")) == {87}
    assert max(steady(data, 6, "sm_clock_mhz")) < 1980
    assert set(steady(data, 5, "clock_event_reasons")) == {0}


def test_it_returns_the_childs_exit_code(sim: SimPaths, tmp_path: Path) -> None:
    code, data = run(sim, tmp_path, "--sample", "0.5", "--", "sh", "-c", "echo boom >&2; exit 7")
    assert (code, data["child"]["exit_code"], data["child"]["stderr"]) == (7, 7, "boom\n")


def test_it_ignores_a_stale_load_marker(sim: SimPaths, tmp_path: Path) -> None:
    state = tmp_path / "gpu01.state"
    dead = subprocess.Popen(["true"])
    dead.wait()
    write_state(state, node="gpu01")
    Path(str(state) + ".load").write_text(f"{dead.pid}\n")
    _, data = run(sim, tmp_path, "--sample", "0.5", "--duration", "0.5")
    assert column(data, 0, "clock_event_reasons")[-1] == 1  # idle, not loaded


def test_it_kills_the_child_process_group_when_terminated(sim: SimPaths, tmp_path: Path) -> None:
    state = tmp_path / "gpu01.state"
    write_state(state, node="gpu01")
    pidfile = tmp_path / "child.pid"
    script = f"echo $$ > {pidfile}; sleep 300 & wait"
    proc = subprocess.Popen(
        ["python3", "-", "--sample", "0.5", "--", "sh", "-c", script],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=node_env(sim, state), text=True,
    )  # fmt: skip
    assert proc.stdin is not None
    proc.stdin.write(probe_source())
    proc.stdin.close()
    proc.stdin = None  # sent; communicate() below must not flush it again
    deadline = time.monotonic() + 20
    while not (pidfile.exists() and pidfile.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.1)
    child = int(pidfile.read_text())
    proc.send_signal(signal.SIGTERM)
    stdout, _ = proc.communicate(timeout=30)
    data = json.loads(stdout)
    assert proc.returncode == 128 + signal.SIGTERM
    assert "terminated by signal 15" in data["errors"][0]
    assert live_members(child) == []  # the whole group (sh and its sleep) is gone


def live_members(pgid: int) -> list[int]:
    """Non-zombie processes of a process group (a container's PID 1 may never reap zombies)."""
    deadline = time.monotonic() + 5
    while True:
        found = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                found.append(int(stat.parent.name))
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


class _SamplerSignalledMidRead:
    """A sampler whose read is interrupted by SIGTERM inside a broad `except Exception`, as the
    real GPU reads are: the signal must still stop the probe (it was once swallowed there)."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = errors
        self.reads = 0

    def open(self) -> bool:
        return True

    def sample(self, t: float) -> dict[str, Any]:
        self.reads += 1
        try:
            if self.reads == 2:
                os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.01)  # the handler runs here, inside the guard
        except Exception:
            pass
        return {"t": t, "gpus": []}

    def close(self) -> None:
        pass


def test_a_signal_during_a_guarded_read_still_stops_sampling(monkeypatch: pytest.MonkeyPatch) -> None:
    from checks.probe import probe

    monkeypatch.setattr(probe, "_Sampler", _SamplerSignalledMidRead)
    monkeypatch.setattr(probe, "collect", lambda: {"gpu_count": 0})
    started = time.monotonic()
    doc, code = probe.run_sampling(0.05, None, ["sleep", "30"])
    assert time.monotonic() - started < 15
    assert code == 128 + signal.SIGTERM
    assert doc["errors"] == ["probe: terminated by signal 15; child killed"]
    assert doc["child"]["exit_code"] == -signal.SIGTERM


class _IdleSampler:
    """A sampler that reads nothing (no NVML needed), for the sampling loop's timing."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = errors

    def open(self) -> bool:
        return True

    def sample(self, t: float) -> dict[str, Any]:
        return {"t": round(t, 3), "gpus": []}

    def close(self) -> None:
        pass


class _LateClock:
    """`time` as the probe sees it: a monotonic clock that moves only when the probe sleeps, each
    sleep `late_s` longer than asked; everything else is the real module."""

    def __init__(self, late_s: float) -> None:
        self.now, self.late_s = 1000.0, late_s

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds + self.late_s

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


def test_it_keeps_samples_on_the_interval_grid_however_late_each_wakes(monkeypatch: pytest.MonkeyPatch) -> None:
    from checks.probe import probe

    monkeypatch.setattr(probe, "_Sampler", _IdleSampler)
    monkeypatch.setattr(probe, "collect", lambda: {"gpu_count": 0})
    # The probe's own clock, every wake-up exactly 4 ms late: the real one, on a loaded machine,
    # adds lateness of its own that is not the probe's (a test of scheduling, not of the load).
    monkeypatch.setattr(probe, "time", _LateClock(late_s=0.004))
    doc, code = probe.run_sampling(0.05, 2.0, [])
    times = doc["samples"]["t"]
    assert code == 0 and len(times) >= 30
    # Late wake-ups once added up (40 x 4 ms = 0.16 s, past half an interval); now each sample is at
    # most one wake-up late against its slot k x 0.05 s.
    assert max(abs(t - round(t / 0.05) * 0.05) for t in times) < 0.02
    assert len({round(t / 0.05) for t in times}) == len(times)
