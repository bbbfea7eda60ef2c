"""Filesystem throughput: fs_throughput (one node) and fs_aggregate (all nodes at once).

Execution uses fio only. IOR and elbencho outputs are parse-only alternative engines (their parsers
live in checks/fs/io_benchmarks.py): a site that already benchmarks with them can feed captured outputs
to `python -m checks parse ior|elbencho FILE`.

fs_throughput runs on each node: a sequential write job, then (stonewall) a sequential read job of
the same files, in one fio invocation with `--output-format=json`. Files are named per node
(`kiln-fio.<host>.<jobnum>.<filenum>`), unlinked by fio after the read, and removed again by the
wrapping `sh -c` whatever fio's outcome (a failed write must not leave 4 GiB behind).

fs_aggregate runs once from the launcher: `fio --client=HOST,PORT JOBFILE ...` drives a
`fio --server` already listening on every node (prerequisite: start it with e.g.
`fio --server --daemonize=/run/fio.pid` or a systemd unit; the check does not start daemons).
Job options cannot be given on the command line in client mode (fio's parse_cmd_line sends only a
job file, local or --remote-config, to the servers), so a fixed `sh -c` script writes the job file
to a temp path named from the run tag, runs fio and removes the file. fio prefixes every file name
with the server's IP in client mode (HOWTO "Client/Server"), so nodes never collide on the shared
mount. The JSON then carries one `client_stats` entry per (host, reporting group), with `hostname`:
per-node attribution names the slow writer.

Measurements (public contract):
    fio: read_bw / write_bw (bytes/s; fio's `bw_bytes`, not `bw` which is KiB/s), read_iops /
         write_iops, read_clat_p99 / write_clat_p99 (ns, clat_ns percentile 99.000000; absent when
         fio ran with lat_percentiles, then read_lat_p99 / write_lat_p99 from lat_ns), read_bytes /
         write_bytes (io_bytes) - label `job` (+ `host` in client mode); sums read_bw_sum,
         write_bw_sum, read_iops_sum, write_iops_sum (no `job` label; per host with `host`).
    ior, elbencho: see checks/fs/io_benchmarks.py (fio: checks/fs/fio.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar

from checks.core.base import (
    ERROR,
    PASS,
    WARN,
    Check,
    Command,
    CommandOutput,
    EvidenceError,
    Finding,
    GroupCheck,
    GroupContext,
    GroupVerdict,
    Measurement,
    NodeContext,
    ParamsError,
    Verdict,
    register,
)
from checks.core.evidence import ERRNO, Rule
from checks.core.presentation import (
    CertificateChart,
    KeyMetric,
    OutlierMetric,
    Presentation,
    PromMetric,
    ThroughputChart,
    total_else_sum,
)
from checks.fs.fio import fio_measurements, load_fio_json
from checks.fs.judge import (
    FsAggregateThresholds,
    aggregate_finding,
    deficits,
    fio_sum,
    gbps,
    group_verdict,
    host_index,
    job_errors,
    judge_floor,
    missing_results,
    node_rates,
)

FIO_LABEL = "fio"
_SIZE = re.compile(r"^\d+(\.\d+)?[KMGTP]?(i?B)?$", re.IGNORECASE)
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]")


# --- fs_throughput -------------------------------------------------------------------------------


def _check_size(name: str, value: str) -> None:
    if not _SIZE.match(value):
        raise ParamsError(f"param {name!r}: expected a size like 1M or 4G, got {value!r}")


@dataclass
class FsParams:
    # The parallel-filesystem mount to test. "/tmp" is only a default that works on the simulator
    # and any single box; an acceptance plan MUST set the real mount (e.g. /lustre/scratch).
    path: str = "/tmp"
    # 1 MiB sequential I/O is the usual streaming-throughput block (IO500 "easy" phases, vendor
    # parallel-FS sizing guides); it matches Lustre/GPFS full-stripe RPC sizes.
    block_size: str = "1M"
    # 4 streams per node: enough to fill one client NIC on most parallel FS clients, small enough
    # to stay quick. Raise it for 400G clients. Conservative default; tune per site.
    numjobs: int = 4
    # Per job. 4 x 1 GiB written then read back; large enough to leave the client cache with
    # direct=1, small enough for a sweep.
    size: str = "1G"
    direct: bool = True  # O_DIRECT: measure the filesystem, not the page cache
    # Linux native asynchronous I/O, the fio engine that keeps several O_DIRECT requests in flight
    # (fio HOWTO, "ioengine"); 16 in flight per job keeps a parallel-filesystem client busy with
    # 1 MiB requests. Conservative default; tune per site.
    ioengine: str = "libaio"
    iodepth: int = 16
    # None = size-based (each job writes/reads `size` once); N = time_based runs of N s per phase.
    runtime_s: int | None = None
    timeout_s: int = 900
    engine: str = "fio"  # execution engine; IOR/elbencho are parse-only (python -m checks parse)

    def __post_init__(self) -> None:
        if self.engine != "fio":
            raise ParamsError(f"param 'engine': only 'fio' runs; IOR/elbencho are parse-only, got {self.engine!r}")
        if not self.path.startswith("/"):
            raise ParamsError(f"param 'path': must be an absolute path, got {self.path!r}")
        _check_size("block_size", self.block_size)
        _check_size("size", self.size)
        for name in ("numjobs", "iodepth", "timeout_s"):
            if getattr(self, name) < 1:
                raise ParamsError(f"param {name!r}: must be >= 1")
        if self.runtime_s is not None and self.runtime_s < 1:
            raise ParamsError("param 'runtime_s': must be >= 1 or None")
        if not re.fullmatch(r"[a-z0-9_]+", self.ioengine):
            raise ParamsError(f"param 'ioengine': not an fio engine name: {self.ioengine!r}")


@dataclass
class FsThresholds:
    # None = no floor (generic): recorded, not judged. Profiles set per-node floors.
    min_write_gbps: float | None = None
    min_read_gbps: float | None = None

    def __post_init__(self) -> None:
        for name in ("min_write_gbps", "min_read_gbps"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ParamsError(f"threshold {name!r}: must be >= 0 or None")


# Per-node floors for HGX/DGX nodes. Conservative default; tune per site. The per-client ceiling
# of a parallel FS is the client's storage NIC (e.g. one 200/400 Gb/s port = 25/50 GB/s line rate),
# and real clients reach a fraction of it; NVIDIA's DGX SuperPOD reference architecture storage
# table quotes per-node guidance in single-digit GB/s (its lowest tier is about 4 GB/s read and
# 2 GB/s write per node; not re-verified here). Read the site's storage contract before relying
# on these numbers.
_HGX_NODE_FLOORS = {"min_write_gbps": 2.0, "min_read_gbps": 4.0}


def _fio_common(params: FsParams, prefix: str) -> list[str]:
    argv = [
        "fio",
        "--output-format=json",
        f"--directory={params.path}",
        # Both jobs address the same files ($jobnum = clone index), so the read job reads what
        # the write job wrote; the host prefix keeps nodes apart on a shared mount.
        f"--filename_format={prefix}.$jobnum.$filenum",
        f"--bs={params.block_size}",
        f"--size={params.size}",
        f"--numjobs={params.numjobs}",
        f"--ioengine={params.ioengine}",
        f"--iodepth={params.iodepth}",
        f"--direct={1 if params.direct else 0}",
        "--group_reporting",
    ]
    if params.runtime_s is not None:
        argv += ["--time_based", f"--runtime={params.runtime_s}"]
    return argv


# Runs fio, then removes this node's files whatever happened ($1 dir, $2 file prefix, rest = fio).
_RUN_AND_CLEAN = 'dir=$1 prefix=$2; shift 2; "$@"; rc=$?; rm -f -- "$dir/$prefix".*; exit $rc'


def safe_name(hostname: str) -> str:
    """A host name as one file name component: anything but [A-Za-z0-9._-] becomes '_'."""
    return _SAFE_NAME.sub("_", hostname) or "node"


def fio_file_prefix(hostname: str) -> str:
    return "kiln-fio." + safe_name(hostname)


def _fio_failure(output: CommandOutput) -> str:
    lines = [ln.strip() for ln in (output.stderr + "\n" + output.stdout).splitlines() if ln.strip()]
    fio_lines = [ln for ln in lines if ln.startswith("fio:") or "error" in ln.lower()]
    picked = fio_lines[-1] if fio_lines else (lines[-1] if lines else "no output")
    return picked[:300]


# The node's own write/read rate (fs_throughput) and the per-node rate under the aggregate load
# (fs_aggregate) share one history chart each; stored in B/s, shown in GB/s.
FS_PROM = "kiln_fs_bandwidth_bytes_per_second"
FS_KEY_METRICS = (
    KeyMetric("fs_write", "Filesystem write bandwidth", "write_bw_sum", "GB/s", scale=1e-9, fleet_default=True),
    KeyMetric("fs_read", "Filesystem read bandwidth", "read_bw_sum", "GB/s", scale=1e-9),
)


# How the certificate names these measurements (checks/core/presentation.py measurement_labels).
FS_LABELS = (
    ("write_bw_sum", "Write bandwidth (all jobs)"),
    ("read_bw_sum", "Read bandwidth (all jobs)"),
    ("write_bw", "Write bandwidth"),
    ("read_bw", "Read bandwidth"),
)


@register
class FsThroughput(Check):
    key: ClassVar[str] = "fs_throughput"
    name: ClassVar[str] = "Filesystem (node)"
    description: ClassVar[str] = "fio sequential write and read per node."
    # 64 MiB per job, 2 jobs: the simulated fio writes nothing to disk and prints modelled rates
    # (testbed/sim/tools/fio); two jobs still make the per-job sums the judge reads.
    simulator_params: ClassVar[dict[str, Any]] = {"size": "64M", "numjobs": 2}
    Params: ClassVar[type] = FsParams

    def declared_s(self, params: Any) -> float:
        # A time-based run writes then reads for runtime_s each; a size-based one is a short check.
        return 2.0 * params.runtime_s if params.runtime_s else 0.0

    Thresholds: ClassVar[type] = FsThresholds
    presentation: ClassVar[Presentation] = Presentation(
        measurement_labels=FS_LABELS,
        chart="filesystem",
        rank=40,
        throughput=ThroughputChart(
            "write_bw_sum", "read_bw_sum", min_write="min_write_gbps", min_read="min_read_gbps"
        ),
        key_metrics=FS_KEY_METRICS,
        prometheus=(
            PromMetric("write_bw", FS_PROM, "fio sequential bandwidth", "direction", "write"),
            PromMetric("read_bw", FS_PROM, "fio sequential bandwidth", "direction", "read"),
        ),
        outliers=(
            OutlierMetric(
                "write_bw", "write", ("write_bw_sum", "write_bw"), "GB/s", True,
                total_else_sum("write_bw_sum", "write_bw"), scale=1e9,
            ),
            OutlierMetric(
                "read_bw", "read", ("read_bw_sum", "read_bw"), "GB/s", True,
                total_else_sum("read_bw_sum", "read_bw"), scale=1e9,
            ),
        ),
        certificate_charts=(
            CertificateChart(
                "Filesystem throughput per node", "bars", ("write_bw", "read_bw"), "GB/s", scale=1e9, grouped=True
            ),
        ),
    )  # fmt: skip
    evidence: ClassVar[dict[str, Rule]] = {"job_error": ERRNO}  # fio's per-job `error` is an errno
    profile_thresholds: ClassVar[dict[str, dict[str, Any]]] = {
        "H100-SXM-8": dict(_HGX_NODE_FLOORS),
        "H200-SXM-8": dict(_HGX_NODE_FLOORS),
        "A100-SXM-8": dict(_HGX_NODE_FLOORS),
    }

    def commands(self, params: Any, node: NodeContext) -> list[Command]:
        p: FsParams = params
        prefix = fio_file_prefix(node.hostname)
        argv = _fio_common(p, prefix) + [
            "--name=seqwrite",
            "--rw=write",
            "--name=seqread",
            "--stonewall",  # starts after the writes finish, and its own reporting group
            "--rw=read",
            "--unlink=1",
        ]
        return [
            Command(
                argv=("sh", "-c", _RUN_AND_CLEAN, "sh", p.path, prefix, *argv),
                timeout=float(p.timeout_s),
                label=FIO_LABEL,
            )
        ]

    def describe_failure(self, output: CommandOutput) -> str:
        return _fio_failure(output)

    def parse(self, outputs: list[CommandOutput]) -> list[Measurement]:
        if len(outputs) != 1:
            raise EvidenceError(f"expected one fio output, got {len(outputs)}")
        measurements, _ = fio_measurements(load_fio_json(outputs[0].stdout))
        return measurements

    def evaluate(self, measurements: list[Measurement], thresholds: Any, node: NodeContext) -> Verdict:
        t: FsThresholds = thresholds
        findings: list[Finding] = []
        errors = [m for m in measurements if m.name == "job_error"]
        for m in errors:
            findings.append(Finding(ERROR, f"fio job {m.labels.get('job')} failed with error {int(m.value or 0)}"))
        rates: dict[str, Measurement] = {}
        for ddir, floor in (("write", t.min_write_gbps), ("read", t.min_read_gbps)):
            bw = fio_sum(measurements, f"{ddir}_bw_sum")
            moved = fio_sum(measurements, f"{ddir}_bytes_sum")
            if bw is None or bw.value is None or not (moved and moved.value):
                findings.append(Finding(ERROR, f"fio reported no {ddir} I/O (no {ddir} job result)"))
                continue
            rates[ddir] = bw
            if floor is None:  # recorded, not judged: a rate with no floor is never a bare pass
                findings.append(
                    Finding(WARN, f"{ddir} {gbps(bw.value)} GB/s: not judged (no min_{ddir}_gbps floor set)")
                )
                continue
            bad = judge_floor(bw, floor, ddir, "per-node")
            findings.append(bad or Finding(PASS, f"{ddir} {gbps(bw.value)} GB/s"))
        summary = ", ".join(f"{d} {gbps(m.value)} GB/s" for d, m in rates.items())
        return Verdict.from_findings(findings, pass_reason=summary or "no rates")


# --- fs_aggregate --------------------------------------------------------------------------------

# $1 job file path, $2 job file text, $3 fio server port, rest = hosts. Builds
# `--client=HOST,PORT JOBFILE` per host (a job file after each --client is that client's job:
# init.c parse_cmd_line), runs fio, removes the job file, keeps fio's exit code.
_CLIENT_SCRIPT = (
    'jobfile=$1 job=$2 port=$3; shift 3; printf "%s\\n" "$job" > "$jobfile" || exit 2; '
    'for host; do set -- "$@" "--client=$host,$port" "$jobfile"; shift; done; '
    'fio --output-format=json "$@"; rc=$?; rm -f -- "$jobfile"; exit $rc'
)


@dataclass
class FsAggregateParams(FsParams):
    # fio's default server port (HOWTO "Client/Server": `fio --server` listens on 8765).
    fio_server_port: int = 8765

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 1 <= self.fio_server_port <= 65535:
            raise ParamsError(f"param 'fio_server_port': not a TCP port: {self.fio_server_port}")


def _job_file(params: FsParams) -> str:
    lines = [
        "[global]",
        f"directory={params.path}",
        # In client mode fio prefixes file names with the server's IP: unique per node.
        "filename_format=kiln-fio.$jobnum.$filenum",
        f"bs={params.block_size}",
        f"size={params.size}",
        f"numjobs={params.numjobs}",
        f"ioengine={params.ioengine}",
        f"iodepth={params.iodepth}",
        f"direct={1 if params.direct else 0}",
        "group_reporting=1",
    ]
    if params.runtime_s is not None:
        lines += ["time_based=1", f"runtime={params.runtime_s}"]
    lines += ["", "[seqwrite]", "rw=write", "", "[seqread]", "stonewall", "rw=read", "unlink=1"]
    return "\n".join(lines)


@register
class FsAggregate(GroupCheck):
    key: ClassVar[str] = "fs_aggregate"
    name: ClassVar[str] = "Filesystem (aggregate)"
    description: ClassVar[str] = "fio on every node at once (client/server); aggregate bandwidth and the slow node."
    # As fs_throughput: 64 MiB per job, 2 jobs per node.
    simulator_params: ClassVar[dict[str, Any]] = {"size": "64M", "numjobs": 2}
    Params: ClassVar[type] = FsAggregateParams
    Thresholds: ClassVar[type] = FsAggregateThresholds
    presentation: ClassVar[Presentation] = Presentation(
        measurement_labels=FS_LABELS,
        chart="filesystem",
        rank=41,
        key_metrics=FS_KEY_METRICS,
        # Each node's rates (rows labelled node) and the total of all at once, against the total's floors.
        throughput=ThroughputChart(
            "write_bw_sum",
            "read_bw_sum",
            total_write="aggregate_write_bw",
            total_read="aggregate_read_bw",
            min_write="min_aggregate_write_gbps",
            min_read="min_aggregate_read_gbps",
        ),
    )
    evidence: ClassVar[dict[str, Rule]] = {"job_error": ERRNO}
    min_nodes: ClassVar[int] = 2
    # fio exits 1 when a client failed (e.g. could not connect) but still prints the JSON of the
    # others; evaluate_group turns a node without results into `error`, so no false pass.
    ok_exit_codes: ClassVar[tuple[int, ...]] = (0, 1)

    def group_commands(self, params: Any, group: GroupContext) -> list[Command]:
        p: FsAggregateParams = params
        # Hostnames, as in NCCL's hostfile: the launcher resolves them inside the cluster; the address
        # Kiln uses to reach a node over SSH may be a management or NAT address.
        hosts = [n.hostname for n in group.nodes]
        jobfile = f"/tmp/kiln-fio-{_SAFE_NAME.sub('_', group.tag)}.fio"
        argv = ("sh", "-c", _CLIENT_SCRIPT, "sh", jobfile, _job_file(p), str(p.fio_server_port), *hosts)
        return [Command(argv=argv, timeout=float(p.timeout_s), label=FIO_LABEL)]

    def describe_failure(self, output: CommandOutput) -> str:
        return _fio_failure(output)

    def parse(self, outputs: list[CommandOutput]) -> list[Measurement]:
        if len(outputs) != 1:
            raise EvidenceError(f"expected one fio output, got {len(outputs)}")
        doc = load_fio_json(outputs[0].stdout)
        if "client_stats" not in doc:
            raise EvidenceError("fio output has no client_stats (not a --client run)")
        measurements, _ = fio_measurements(doc)
        # Connection failures are only on stderr ("fio: failed to connect to HOST:PORT").
        for line in (outputs[0].stderr + "\n" + outputs[0].stdout).splitlines():
            if line.startswith("fio: failed to connect to"):
                measurements.append(Measurement(name="client_error", text=line.strip()))
        return measurements

    def evaluate_group(self, measurements: list[Measurement], thresholds: Any, group: GroupContext) -> GroupVerdict:
        t: FsAggregateThresholds = thresholds
        by_host = host_index(group)
        node_findings: dict[str, list[Finding]] = {n.hostname: [] for n in group.nodes}
        for failed, f in job_errors(measurements, by_host):
            node_findings.setdefault(failed, []).append(f)
        findings, rates, per_node_rates = node_rates(measurements, by_host)
        for name, f in missing_results(group, rates):
            node_findings[name].append(f)
        for ddir, floor in (("write", t.min_aggregate_write_gbps), ("read", t.min_aggregate_read_gbps)):
            findings.append(aggregate_finding(measurements, t, ddir, floor, rates[ddir]))
            for name, f in deficits(t, ddir, rates[ddir], per_node_rates):
                node_findings[name].append(f)
        return group_verdict(findings, node_findings, measurements)
