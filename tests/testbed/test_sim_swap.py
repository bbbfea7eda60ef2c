"""`swap_gpu`: another board in a GPU slot, as after a swap. NVML (read by the real probe through
pynvml) and nvidia-smi name it alike, with a serial and UUID of its own; the other GPUs keep theirs."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from checks.probe import probe_source
from testbed.sim import SimPaths, build_simulator, node_env, write_state


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> SimPaths:
    return build_simulator(tmp_path_factory.mktemp("sim"))


def _identities(sim: SimPaths, state: Path) -> tuple[dict[int, tuple[str, str]], dict[int, tuple[str, str]]]:
    env = {**os.environ, **node_env(sim, state)}
    probe = subprocess.run(["python3", "-"], input=probe_source(), env=env, capture_output=True, text=True, check=True)
    nvml = {g["index"]: (g["serial"], g["uuid"]) for g in json.loads(probe.stdout)["gpus"]}
    argv = ["nvidia-smi", "--query-gpu=index,serial,uuid", "--format=csv,noheader"]
    rows = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout.splitlines()
    smi = {int(i): (serial, uuid) for i, serial, uuid in (r.split(", ") for r in rows if r.strip())}
    return nvml, smi


def test_a_swapped_gpu_has_its_own_serial_and_uuid_in_nvml_and_nvidia_smi(sim: SimPaths, tmp_path: Path) -> None:
    state = tmp_path / "gpu07" / "state"
    state.parent.mkdir()
    write_state(state, node="gpu07")
    before, smi_before = _identities(sim, state)
    write_state(state, node="gpu07", swap_gpu="3,5")
    after, smi_after = _identities(sim, state)

    assert before == smi_before and after == smi_after
    assert {i for i in range(8) if before[i] != after[i]} == {3, 5}
    for slot in (3, 5):
        assert before[slot][0] != after[slot][0] and before[slot][1] != after[slot][1]
        assert after[slot][0].endswith(f"{slot:02d}")  # still the slot's serial form
    assert len({serial for serial, _ in after.values()} | {serial for serial, _ in before.values()}) == 10
