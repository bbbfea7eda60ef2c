"""Params and thresholds of the NCCL checks (checks/nccl/allreduce.py): one node and across nodes."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from checks.core.base import ParamsError
from checks.nccl.measure import DEFAULT_PEAK_MIN_BYTES
from checks.nccl.nccl_tests import parse_size


def _sizes_ok(values: dict[str, Any]) -> None:
    for name in ("min_bytes", "max_bytes", "peak_min_bytes"):
        try:
            parse_size(values[name])
        except ValueError as exc:
            raise ParamsError(f"param {name!r}: {exc}") from None
    if parse_size(values["min_bytes"]) > parse_size(values["max_bytes"]):
        raise ParamsError(f"param 'min_bytes' ({values['min_bytes']}) is above 'max_bytes' ({values['max_bytes']})")
    if values["step_factor"] < 2:
        raise ParamsError(f"param 'step_factor': must be >= 2, got {values['step_factor']}")
    for name in ("iters", "warmup_iters", "timeout_s"):
        if values[name] < (0 if name == "warmup_iters" else 1):
            raise ParamsError(f"param {name!r}: must be positive, got {values[name]}")


@dataclass
class NcclParams:
    # The nccl-tests binary: a name found on the node's PATH, or an absolute path.
    binary: str = "all_reduce_perf"
    # Sweep 8 B .. 8 GiB by x2 (the nccl-tests README example, and the 2-node H100 fixture): the
    # small sizes are cheap and draw the latency end of the curve; 8 GiB is on the plateau.
    min_bytes: str = "8"
    max_bytes: str = "8G"
    step_factor: int = 2
    # None: the node's expected GPU count, else 8 (HGX/DGX baseboards carry 8 GPUs).
    gpus: int | None = None
    # nccl-tests defaults (-n 20, -w 5); every size is timed over `iters` after `warmup_iters`.
    iters: int = 20
    warmup_iters: int = 5
    # One node, 8 B..8 GiB, 25 iterations: seconds of transfers plus NCCL init (~10-30 s on HGX);
    # 300 s leaves room for a slow init without letting a hung collective block the run for long.
    timeout_s: int = 300
    # Bandwidth is judged only on sizes >= this (see DEFAULT_PEAK_MIN_BYTES in checks/nccl/measure.py).
    peak_min_bytes: str = DEFAULT_PEAK_MIN_BYTES

    def __post_init__(self) -> None:
        _sizes_ok(self.__dict__)
        if self.gpus is not None and self.gpus < 1:
            raise ParamsError(f"param 'gpus': must be >= 1, got {self.gpus}")
        if not self.binary.strip():
            raise ParamsError("param 'binary': must name the all_reduce_perf program")


@dataclass
class NcclThresholds:
    # None = no bandwidth floor (generic hardware): busbw is still required as evidence and recorded.
    # Hardware profiles set the floor (profile_thresholds below, each with its source).
    min_busbw_gbps: float | None = None
    # nccl-tests compares every result with a reference (-c 1): any wrong element is a broken
    # collective (bad NVLink/NIC, memory corruption), never a tuning matter.
    max_wrong: int | None = 0

    def __post_init__(self) -> None:
        if self.min_busbw_gbps is not None and self.min_busbw_gbps < 0:
            raise ParamsError(f"threshold 'min_busbw_gbps': must be >= 0 or None, got {self.min_busbw_gbps}")
        if self.max_wrong is not None and self.max_wrong < 0:
            raise ParamsError(f"threshold 'max_wrong': must be >= 0 or None, got {self.max_wrong}")


@dataclass
class NcclMultiParams:
    # nccl-tests' all-reduce benchmark on the launcher's PATH; a full path where it is not.
    binary: str = "all_reduce_perf"
    # 8 B .. 8 GiB by x2, as in the 2-node H100 fixture (mpirun -np 16 -npernode 8 ... -b 8 -e 8G -f 2 -g 1).
    min_bytes: str = "8"
    max_bytes: str = "8G"
    step_factor: int = 2
    # Ranks (one GPU each) per node. None: the nodes' expected GPU count when they agree, else 8.
    gpus: int | None = None
    iters: int = 20
    warmup_iters: int = 5
    # Across nodes NCCL init (bootstrap, IB/RoCE connection setup) takes longer than on one node
    # and 8 GiB transfers run at network speed: 600 s, within the worker's 10-minute command cap.
    timeout_s: int = 600
    peak_min_bytes: str = DEFAULT_PEAK_MIN_BYTES
    # "mpirun" (Open MPI, with a hostfile) or "srun" (Slurm, -w host list).
    launcher: str = "mpirun"
    # Extra launcher arguments, split like a shell would (no shell runs them). Open MPI refuses to
    # start as root without --allow-run-as-root, and Kiln's default SSH user is root.
    launcher_args: str = "--allow-run-as-root"

    def __post_init__(self) -> None:
        _sizes_ok(self.__dict__)
        if self.launcher not in ("mpirun", "srun"):
            raise ParamsError(f"param 'launcher': expected 'mpirun' or 'srun', got {self.launcher!r}")
        if self.gpus is not None and self.gpus < 1:
            raise ParamsError(f"param 'gpus': must be >= 1, got {self.gpus}")
        try:
            shlex.split(self.launcher_args)
        except ValueError as exc:
            raise ParamsError(f"param 'launcher_args': {exc}") from None


@dataclass
class NcclAlltoallParams(NcclMultiParams):
    # The same sweep, launcher and limits as all-reduce across nodes; the program is alltoall_perf.
    binary: str = "alltoall_perf"


@dataclass
class NcclAlltoallThresholds:
    # The busbw floor of an all-to-all over many nodes, i.e. the network bandwidth each GPU must
    # get (GB/s). An N-node run is judged against this x N/(N-1): with N nodes, 1/N of each GPU's
    # data stays on its node, so busbw = N/(N-1) x the network bandwidth per GPU (nccl-tests issue
    # #130, NCCL maintainer). None = not judged (generic hardware); profiles set it.
    min_gpu_net_gbps: float | None = None
    # As all-reduce: nccl-tests validates every result (-c 1); any wrong element is a broken collective.
    max_wrong: int | None = 0

    def __post_init__(self) -> None:
        if self.min_gpu_net_gbps is not None and self.min_gpu_net_gbps < 0:
            raise ParamsError(f"threshold 'min_gpu_net_gbps': must be >= 0 or None, got {self.min_gpu_net_gbps}")
        if self.max_wrong is not None and self.max_wrong < 0:
            raise ParamsError(f"threshold 'max_wrong': must be >= 0 or None, got {self.max_wrong}")
