"""The samples of a simulated gpu_burn at steady load, picked by the samples' own times: on a busy
machine gpu_burn starts late and its load ramp falls anywhere among the samples."""

from __future__ import annotations

from typing import Any

from testbed.sim.power import LOAD_RAMP_S

# The reads of one sample take a moment after its time `t`: the load marker may appear among them.
READS_S = 0.1


def steady_indices(data: dict[str, Any]) -> list[int]:
    """Indices of the samples taken LOAD_RAMP_S after the first loaded one (the load marker appeared
    before its reads) while the node was still loaded (GPU 0 without the idle reason, bit 0)."""
    times = data["samples"]["t"]
    gpu0 = next(g for g in data["samples"]["gpus"] if g["index"] == 0)
    busy = [reasons is not None and reasons & 1 == 0 for reasons in gpu0["clock_event_reasons"]]
    assert any(busy), f"no sample saw the load: {times}"
    loaded_at = times[busy.index(True)]
    picked = [i for i, t in enumerate(times) if busy[i] and t > loaded_at + LOAD_RAMP_S + READS_S]
    assert picked, f"no sample after the {LOAD_RAMP_S} s ramp: {times}"
    return picked
