"""rdma_bw's params and plan: which HCA of which node measures against which, over which TCP port,
with which perftest command line (checks/rdma/bw.py is the check).

Ring pairing: the run's nodes in hostname order, node i is the client of node i+1 (the last of the
first) on every rail: mlx5_k of node i writes to mlx5_k of node i+1. So every node is the server of
its predecessor and the client of its successor on every rail, every HCA port is measured twice (as
a sender and as a receiver, against two different partners), and all pairs run at once: each pair
uses its own rail's ports and TCP port, and a ring is a permutation (each port sends to one port and
receives from one), which a non-blocking rail-optimised fabric carries at full rate. Two nodes make
a ring of two: each writes to the other.

Everything that reaches a command line is validated here: HCA names, the peer's address (the node's
address, or its hostname when it has none), binary paths, ports.
"""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass
from typing import Any

from checks.core.base import GroupContext, NodeContext, ParamsError

# perftest's default TCP port for its out-of-band exchange (src/perftest_parameters.h DEF_PORT).
PERFTEST_PORT = 18515
RUNNER_SCHEMA = 1
_HCA = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")
_HOSTNAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9_]([A-Za-z0-9_-]{0,62})(\.[A-Za-z0-9_]([A-Za-z0-9_-]{0,62}))*\.?$")
_BINARY = re.compile(r"^[A-Za-z0-9_./+][A-Za-z0-9_./+-]{0,255}$")
BW, LAT = "bw", "lat"
DEFAULT_HCAS = ",".join(f"mlx5_{i}" for i in range(8))


@dataclass
class RdmaBwParams:
    # The compute fabric's HCAs, one per rail, in rail order; the same names on every node. HGX H100/
    # H200/A100 carry 8 compute HCAs, one per GPU (NVIDIA DGX H100 user guide: 8x ConnectX-7
    # "mlx5_0..mlx5_11" with the storage/in-band ones among them; set the names a site's nodes use).
    hcas: str = DEFAULT_HCAS
    # GPUDirect RDMA: perftest's --use_cuda=GPU (perftest README "GPUDirect usage"), both ends in GPU
    # memory. Needs a CUDA-enabled perftest build; the output must show the GPU buffer or the pair is
    # an error (no GPUDirect evidence, no pass).
    use_cuda: bool = False
    # The GPU index per HCA for --use_cuda, comma-separated in the order of `hcas`; empty: GPU k for
    # the k-th HCA (the NIC under the same PCIe switch on HGX boards; check `nvidia-smi topo -m`).
    gpus: str = ""
    # --use_cuda_dmabuf: map the GPU buffer through DMA-BUF instead of nvidia-peermem.
    cuda_dmabuf: bool = False
    bw_binary: str = "ib_write_bw"
    lat_binary: str = "ib_write_lat"
    measure_latency: bool = True
    # -a: every size from 2 B to 8 MiB (perftest MAX_SIZE 8388608); judged at the largest.
    sweep: bool = True
    # -s when not sweeping: perftest's default bandwidth size (DEF_SIZE_BW 65536).
    size_bytes: int = 65536
    # -n: perftest's default for bandwidth tests (DEF_ITERS_WB 5000).
    iterations: int = 5000
    # -q: one QP reaches NDR line rate for RDMA write (tests/fixtures/perftest CX7 NDR: 392 Gb/s).
    qps: int = 1
    # -x: the GID index RoCE needs (tests/fixtures/perftest RoCE captures use 2 and 5); -1: not passed.
    gid_index: int = -1
    # Rail k uses TCP ports base_port + 2k (bandwidth) and base_port + 2k + 1 (latency); perftest's
    # own default is 18515 (DEF_PORT).
    base_port: int = PERFTEST_PORT
    # Seconds one latency client may take: ib_write_lat's default 1000 x 2 B exchanges take well under
    # a second; the rest is start-up (CUDA initialisation: seconds). The bandwidth clients start after it.
    lat_timeout_s: float = 30.0
    # Seconds one bandwidth client may take: the -a sweep at 5000 iterations moves ~84 GB per pair
    # (5000 x (2 + 4 + ... + 8 MiB)): ~1.7 s at 400 Gb/s, ~34 s at 20 Gb/s; CUDA start-up adds seconds.
    bw_timeout_s: float = 120.0
    # Seconds before the common start, so that every node's servers listen by then: 10 s (perftest's
    # device and CUDA set-up) plus 0.25 s per node for the worker's parallel connects and execs
    # (paramiko as measured on 2-core machines: ~60 ms per connect, 80-125 ms per exec).
    start_slack_s: float = 10.0
    start_per_node_s: float = 0.25

    def __post_init__(self) -> None:
        rails = self.rails
        if not rails or len(set(rails)) != len(rails):
            raise ParamsError(f"param 'hcas': a comma-separated list of distinct HCA names, got {self.hcas!r}")
        bad = [h for h in rails if not _HCA.match(h)]
        if bad:
            raise ParamsError(f"param 'hcas': {bad[0]!r} is not an HCA name (e.g. mlx5_0)")
        self.gpu_indices()  # validates `gpus`
        for name in ("bw_binary", "lat_binary"):
            if not _BINARY.match(getattr(self, name)):
                raise ParamsError(f"param {name!r}: must be a program name or path, got {getattr(self, name)!r}")
        _bounded("size_bytes", self.size_bytes, 1, 8388608)
        _bounded("iterations", self.iterations, 5, 100_000_000)
        _bounded("qps", self.qps, 1, 1024)
        _bounded("gid_index", self.gid_index, -1, 255)
        _bounded("base_port", self.base_port, 1024, 65535 - 2 * len(rails))
        for name in ("lat_timeout_s", "bw_timeout_s"):
            _bounded(name, getattr(self, name), 1, 3600)
        for name in ("start_slack_s", "start_per_node_s"):
            _bounded(name, getattr(self, name), 0, 600)

    @property
    def rails(self) -> list[str]:
        return [h.strip() for h in self.hcas.split(",") if h.strip()]

    def gpu_indices(self) -> list[int]:
        if not self.gpus.strip():
            return list(range(len(self.rails)))
        parts = [g.strip() for g in self.gpus.split(",")]
        if len(parts) != len(self.rails) or not all(p.isdigit() and int(p) < 1024 for p in parts):
            raise ParamsError(f"param 'gpus': one GPU index per HCA ({len(self.rails)}), got {self.gpus!r}")
        return [int(p) for p in parts]

    def port(self, rail: int, test: str) -> int:
        return self.base_port + 2 * rail + (1 if test == LAT else 0)

    @property
    def lat_window_s(self) -> float:
        """When the bandwidth clients start, after the common start: after every latency client."""
        return self.lat_timeout_s + 2.0 if self.measure_latency else 0.0

    @property
    def limit_s(self) -> float:
        """The runner's whole time after the common start, with a margin for stopping and printing."""
        return self.lat_window_s + self.bw_timeout_s + 15.0


def _bounded(name: str, value: float, low: float, high: float) -> None:
    if not low <= value <= high:
        raise ParamsError(f"param {name!r}: must be in {low:g}..{high:g}, got {value!r}")


def peer_address(node: NodeContext) -> str:
    """What a client connects to: the node's address, else its hostname; validated, never an option."""
    target = (node.address or node.hostname).strip()
    try:
        ipaddress.ip_address(target)
        return target
    except ValueError:
        pass
    if not _HOSTNAME.match(target) or target.startswith("-"):
        raise ParamsError(f"node {node.hostname!r}: {target!r} is not an IP address or hostname a client can reach")
    return target


@dataclass(frozen=True)
class Pair:
    """One measurement: `client` writes to `server` from HCA `hca` (rail `rail`) to the same HCA."""

    rail: int
    hca: str
    client: str
    server: str

    @property
    def name(self) -> str:
        return f"{self.client} {self.hca} -> {self.server} {self.hca}"


def ring(hostnames: list[str]) -> list[tuple[str, str]]:
    """(client, server) of every ring edge: each node to the next in hostname order, the last to the first."""
    order = sorted(hostnames)
    if len(order) < 2:
        return []
    return [(order[i], order[(i + 1) % len(order)]) for i in range(len(order))]


def plan_pairs(params: RdmaBwParams, hostnames: list[str]) -> list[Pair]:
    """Every pair of the run: every ring edge on every rail."""
    return [Pair(k, hca, c, s) for k, hca in enumerate(params.rails) for c, s in ring(hostnames)]


def neighbours(hostnames: list[str], host: str) -> tuple[str, str]:
    """(predecessor, successor) of `host` on the ring."""
    edges = ring(hostnames)
    succ = next(s for c, s in edges if c == host)
    pred = next(c for c, s in edges if s == host)
    return pred, succ


def perftest_argv(params: RdmaBwParams, test: str, rail: int, peer: str | None) -> list[str]:
    """One perftest command line: a server (peer None) or a client of `peer`."""
    hca = params.rails[rail]
    binary = params.lat_binary if test == LAT else params.bw_binary
    argv = [binary, "-d", hca, "-p", str(params.port(rail, test)), "-F"]
    if test == BW:
        argv += ["--report_gbits", "-q", str(params.qps), "-n", str(params.iterations)]
        argv += ["-a"] if params.sweep else ["-s", str(params.size_bytes)]
    if params.gid_index >= 0:
        argv += ["-x", str(params.gid_index)]
    if params.use_cuda:
        argv.append(f"--use_cuda={params.gpu_indices()[rail]}")
        if params.cuda_dmabuf:
            argv.append("--use_cuda_dmabuf")
    if peer is not None:
        argv.append(peer)
    return argv


def runner_spec(params: RdmaBwParams, group: GroupContext, node: NodeContext) -> dict[str, Any]:
    """The processes `node` runs (checks/probe/rdma_pairs.py SPEC)."""
    hosts = group.hostnames
    if node.hostname not in hosts or len(hosts) < 2:
        raise ParamsError(f"node {node.hostname!r} has no ring partner in {hosts}")
    pred, succ = neighbours(hosts, node.hostname)
    contexts = {n.hostname: n for n in group.nodes}
    address = peer_address(contexts[succ])
    peer_address(contexts[pred])  # the predecessor's address is validated where it is a client
    tests = ([LAT] if params.measure_latency else []) + [BW]
    processes = []
    for rail, hca in enumerate(params.rails):
        for test in tests:
            offset = 0.0 if test == LAT else params.lat_window_s
            timeout = params.lat_timeout_s if test == LAT else params.bw_timeout_s
            common = {"rail": hca, "deadline_s": offset + timeout}
            server = perftest_argv(params, test, rail, None)
            client = perftest_argv(params, test, rail, address)
            processes.append({"role": f"{test}_server", "peer": pred, "argv": server, "offset_s": None, **common})
            processes.append({"role": f"{test}_client", "peer": succ, "argv": client, "offset_s": offset, **common})
    return {"schema": RUNNER_SCHEMA, "start_at": group.start_at, "processes": processes}


def runner_argv(spec: dict[str, Any]) -> tuple[str, ...]:
    return ("python3", "-", json.dumps(spec, separators=(",", ":"), allow_nan=False))
