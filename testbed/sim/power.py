"""The simulated node's electrical power: one model for every reader of it.

A simulated node draws the power of its GPUs (exactly what the fake NVML reports at that moment,
fake_nvml.c's nvmlDeviceGetPowerUsage, mirrored here: idle ~70 W, under the simulated gpu_burn
650-685 W, 480 W on a throttling GPU, never above the GPU's enforced power limit) plus a platform
overhead (CPUs, memory, NICs, NVSwitches, fans) that rises from PLATFORM_IDLE_W to PLATFORM_LOAD_W
with the same load level, plus the fault `power_over_pct` (the node draws that percentage of its
GPU sum on top). Readers: the simulated `ipmitool dcmi power reading` and `ipmitool sdr` (PSU input
power) on each node, and the testbed's Redfish PDU/CDU service (testbed/sim/redfish_facility.py),
so the BMC, the PDU phases and the coolant loop all follow the same load at the same instant. The
ipmitool is compiled (fake_ipmitool.c, a reading per sample must be cheap) and mirrors this model and
the DCMI statistics below: keep the two in step (tests/testbed/test_power_sim.py compares them).

The load level is fake_nvml.c's load_level(): the marker "$KILN_SIM_STATE.load" that gpu_burn keeps
(its pid) makes the node loaded, ramping from 0.05 to 1 over LOAD_RAMP_S after the marker appeared;
a marker whose pid is gone is stale and ignored. Keep the constants here and in fake_nvml.c in step.

Standard library only, and importable on its own: build_simulator installs this file beside the
node tools as kiln_sim_power.py, where the simulated nvidia-smi loads it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

# fake_nvml.c: LOAD_RAMP_S, seconds from idle to steady load (tests burn for 2-5 s).
LOAD_RAMP_S = 1.5
# fake_nvml.c, nvmlDeviceGetPowerUsage: idle 70 W + 0.137 W x slot; busy 650 W + 5 W x slot; a
# throttling GPU (throttle_gpu) 480 W under load. In milliwatts, as NVML reports them.
GPU_IDLE_MW = 70000.0
GPU_IDLE_STEP_MW = 137.0
GPU_BUSY_MW = 650000.0
GPU_BUSY_STEP_MW = 5000.0
GPU_THROTTLED_MW = 480000.0
# fake_nvml.c, nvmlDeviceGetEnforcedPowerLimit: H100 SXM board power 700 W (NVIDIA H100 datasheet),
# power_cap_w (default 500 W) on a power_cap_gpu. Under load a GPU draws at most its limit.
GPU_LIMIT_W = 700.0
DEFAULT_CAP_W = 500.0
# Platform overhead of an HGX H100 8-GPU node besides its GPUs (2 CPUs, DDR5, 8 ConnectX-7 NICs,
# 4 NVSwitches, fans, PSU losses): a model of ~900 W idle and ~1,500 W under a GPU burn
# (the CPUs stay lightly loaded). For scale: NVIDIA's DGX H100 datasheet gives 10.2 kW maximum system
# power, of which 8 x 700 W are GPUs.
PLATFORM_IDLE_W = 900.0
PLATFORM_LOAD_W = 1500.0
# fake_nvml.c and nvidia-smi: 8 GPUs when the state file says nothing; MAX_GPUS slots at most.
DEFAULT_GPUS = 8
MAX_GPUS = 64


@dataclass(frozen=True)
class NodePower:
    """One instant of a node's power. total_w = gpu_w + platform_w + over_w."""

    load: float  # 0 (idle) .. 1 (steady gpu_burn)
    gpu_mw: dict[int, int]  # physical slot -> mW, what NVML reports
    platform_w: float
    over_w: float  # the power_over_pct fault's extra draw

    @property
    def gpu_w(self) -> float:
        return sum(self.gpu_mw.values()) / 1000.0

    @property
    def total_w(self) -> float:
        return self.gpu_w + self.platform_w + self.over_w


def read_state(path: str | os.PathLike[str] | None) -> dict[str, str]:
    """key=value lines, `#` comments; a missing or unreadable file is a healthy node ({})."""
    state: dict[str, str] = {}
    if not path:
        return state
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return state
    for line in lines:
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            state[key.strip()] = value.strip()
    return state


def slots(state: dict[str, str], key: str) -> set[int]:
    """A fault key's GPU set, "3" or "1,5" (fake_nvml.c parse_set)."""
    return {int(p) for p in state.get(key, "").replace(" ", "").split(",") if p.isdigit()}


def _number(state: dict[str, str], key: str, default: float) -> float:
    try:
        return float(state[key])
    except (KeyError, ValueError):
        return default


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process (fake_nvml.c: only ESRCH means gone)
    return True


def load_level(state_path: str | os.PathLike[str] | None, now: float | None = None) -> float:
    """fake_nvml.c load_level(): 0 idle; 0.05 .. 1 over LOAD_RAMP_S after gpu_burn's marker appeared."""
    if not state_path:
        return 0.0
    marker = f"{os.fspath(state_path)}.load"
    try:
        with open(marker, encoding="utf-8") as handle:
            text = handle.readline()
        mtime = os.stat(marker).st_mtime
    except OSError:
        return 0.0
    try:
        pid = int(text.strip())
    except ValueError:
        return 0.0
    if pid <= 0 or not _pid_alive(pid):
        return 0.0
    age = (time.time() if now is None else now) - mtime
    if age <= 0.0:
        return 0.05
    return 1.0 if age >= LOAD_RAMP_S else 0.05 + 0.95 * age / LOAD_RAMP_S


def _lerp(start: float, end: float, level: float) -> int:
    """fake_nvml.c lerp(): (int)(from + (to - from) * level + 0.5)."""
    return int(start + (end - start) * level + 0.5)


def gpu_power_mw(state: dict[str, str], load: float) -> dict[int, int]:
    """Each present GPU's draw in mW (physical slot -> mW), as the fake NVML reports it."""
    count = min(max(0, int(_number(state, "gpus", DEFAULT_GPUS))), MAX_GPUS)
    missing = slots(state, "missing_gpu")
    throttled = slots(state, "throttle_gpu")
    capped = slots(state, "power_cap_gpu")
    cap_mw = _number(state, "power_cap_w", DEFAULT_CAP_W) * 1000.0
    out: dict[int, int] = {}
    for slot in range(count):
        if slot in missing:
            continue  # off the bus: NVML does not see it (and the model has it draw nothing)
        idle = GPU_IDLE_MW + slot * GPU_IDLE_STEP_MW
        busy = GPU_THROTTLED_MW if slot in throttled else GPU_BUSY_MW + slot * GPU_BUSY_STEP_MW
        busy = min(busy, cap_mw if slot in capped else GPU_LIMIT_W * 1000.0)
        out[slot] = _lerp(idle, busy, load)
    return out


def node_power(state_path: str | os.PathLike[str] | None, now: float | None = None) -> NodePower:
    """The node's power at this instant, from its state file and gpu_burn's load marker."""
    state = read_state(state_path)
    load = load_level(state_path, now)
    gpus = gpu_power_mw(state, load)
    platform = PLATFORM_IDLE_W + (PLATFORM_LOAD_W - PLATFORM_IDLE_W) * load
    over_pct = max(0.0, _number(state, "power_over_pct", 0.0))
    return NodePower(load=load, gpu_mw=gpus, platform_w=platform, over_w=sum(gpus.values()) / 1000.0 * over_pct / 100.0)


# ----------------------------------------------------------------------------- the BMC's statistics

# The simulated BMC's DCMI statistics window (state key dcmi_period_s): a rolling minute spans a
# soak's 1 Hz samples and forgets an earlier test's load within a minute. Real BMCs differ widely:
# the fixtures in tests/fixtures/ipmitool-dcmi/ show periods of 123,893 s and 1,131,466 s.
DCMI_PERIOD_S = 60
# Samples kept at most in the history file (one per reading), whatever the window.
HISTORY_MAX = 4096


@dataclass(frozen=True)
class Statistics:
    current_w: int
    min_w: int
    max_w: int
    avg_w: int
    period_s: int


def _read_history(path: Path) -> list[tuple[float, int]]:
    samples: list[tuple[float, int]] = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return samples
    for line in lines:
        parts = line.split()
        if len(parts) == 2:
            try:
                samples.append((float(parts[0]), int(parts[1])))
            except ValueError:
                continue
    return samples


def _write_history(path: Path, samples: list[tuple[float, int]]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        tmp.write_text("".join(f"{stamp:.3f} {watts}\n" for stamp, watts in samples), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass  # a read-only node directory: the statistics hold this reading only


def record_reading(history: Path | None, watts: int, period_s: int, now: float) -> Statistics:
    """Add this reading to the node's history file and return min/max/avg over the last period_s
    seconds (this reading included). Without a history file: the reading alone."""
    samples: list[tuple[float, int]] = []
    if history is not None:
        samples = [(t, w) for t, w in _read_history(history) if now - period_s < t <= now]
    samples.append((now, watts))
    samples = samples[-HISTORY_MAX:]
    if history is not None:
        _write_history(history, samples)
    values = [w for _, w in samples]
    return Statistics(
        current_w=watts,
        min_w=min(values),
        max_w=max(values),
        avg_w=int(sum(values) / len(values) + 0.5),
        period_s=period_s,
    )


def dcmi_period(state: dict[str, str]) -> int:
    period = int(_number(state, "dcmi_period_s", DCMI_PERIOD_S))
    return period if period > 0 else DCMI_PERIOD_S
