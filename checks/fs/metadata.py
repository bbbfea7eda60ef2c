"""Data loading / small-file metadata performance with mdtest: fs_metadata (each node on its own).

Training input pipelines open, stat and read millions of small files; a node whose metadata rate
is a fraction of its peers' (a client mount option, a lock storm, a bad route to the metadata
servers) stalls its data loader while its streaming bandwidth (fs_throughput) looks fine.

fs_metadata runs on each node, in a directory of its own under `path` (DIR/kiln-mdtest-<node>):
    mdtest -n FILES -i ITER -u -d DIR/kiln-mdtest-<node> -w SIZE -e SIZE
every phase (directories and files: create, stat, read, remove; the tree), SIZE bytes written to
and read back from each file, so "file read" is a small-file read rate. One process by default
(mdtest without a launcher is a singleton MPI job); `tasks` > 1 runs `mpirun -np TASKS` on the node
with `launcher_args` before mdtest. A fixed `sh -c` removes the directory before (a run killed
earlier) and after the run, whatever mdtest's outcome.

Evidence (checks/fs/mdtest.py reads it): mdtest's "SUMMARY rate" table, per operation max/min/mean/
std dev over the iterations, and its closing "-- finished at" line (absent: the run was cut,
`error`). The four file operations' means are judged, each recorded again as
<operation>_rate (file_creation_rate, file_stat_rate, file_read_rate, file_removal_rate; ops/s,
what history, outliers and /metrics follow), against the floors of the filesystem class
(checks/fs/metadata_floors.py) or the site's own. small_read_mbps (file read rate x SIZE, MB/s) is
judged when min_small_read_mbps is set. A phase mdtest did not run, a missing row, NaN/inf or a
negative rate is `error`; a rate without a floor is `warn` "not judged", never a bare pass.

Across nodes: fs_metadata_aggregate (checks/fs/metadata_aggregate.py) runs one mdtest over every
node at once. mdtest prints one summary for all its ranks, so that run cannot say which node is
slow; this per-node check and the run's fleet outliers (lowest file creation/stat/read rate) do.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from dataclasses import dataclass
from typing import Any, ClassVar

from checks.core.base import (
    ERROR,
    FAIL,
    PASS,
    WARN,
    Check,
    Command,
    CommandOutput,
    EvidenceError,
    Finding,
    Measurement,
    NodeContext,
    ParamsError,
    Verdict,
    register,
)
from checks.core.evidence import COUNT, MAX_STORAGE_BYTES_S, Rule
from checks.core.parsers import parse_output
from checks.core.presentation import FleetMetric, KeyMetric, OutlierMetric, Presentation, PromMetric, lowest
from checks.fs.mdtest import RATE, SMALL_READ
from checks.fs.metadata_floors import FS_CLASSES, JUDGED, floor_for
from checks.fs.throughput import safe_name

MDTEST_LABEL = "mdtest"
DIR_PREFIX = "kiln-mdtest-"
MAX_FILE_SIZE = 16 * 1024 * 1024  # a "small file" check; bigger files are fs_throughput's business
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

# Removes the run's own directory ($1), runs the command (the rest), removes it again; keeps the
# command's exit code.
_RUN_AND_CLEAN = 'dir=$1; shift; rm -rf -- "$dir"; "$@"; rc=$?; rm -rf -- "$dir"; exit $rc'


def check_path(path: str) -> None:
    """The directory mdtest works under: absolute, no '..' (it must stay where the operator said),
    no '@' (mdtest reads "a@b" as two directories), no control characters, a sane length."""
    if not path.startswith("/"):
        raise ParamsError(f"param 'path': must be an absolute path, got {path!r}")
    if ".." in path.split("/"):
        raise ParamsError(f"param 'path': must not contain '..', got {path!r}")
    if "@" in path or _CONTROL.search(path):
        raise ParamsError(f"param 'path': '@' and control characters are not allowed, got {path!r}")
    if len(path) > 512:  # mdtest builds paths in 4 KiB buffers (MAX_PATHLEN); leave room for its own
        raise ParamsError("param 'path': longer than 512 characters")


@dataclass
class FsMetadataParams:
    # The filesystem to test (its mount or a directory on it). "/tmp" is only a default that works
    # on the simulator and any single box; an acceptance plan MUST set the real one.
    path: str = "/tmp"
    # Files (and directories) per task per iteration. 1,000 takes seconds at the floors'
    # rates, and is enough that a phase is not timed on a handful of calls. Conservative default.
    files: int = 1000
    # 3 iterations: the SJTU mdtest-3.3.0 fixture's run (mdtest -n 100 -i 3); max/min/std dev show
    # the spread.
    iterations: int = 3
    # 4 KiB written and read per file (-w/-e): the DAOS mdtest example's -w 4096 -e 4096
    # (tests/fixtures/mdtest); IO500's mdtest-hard uses 3,901 bytes.
    file_size: int = 4096
    tasks: int = 1  # mdtest processes on the node; > 1 runs them with mpirun -np
    # Extra mpirun arguments when mpirun runs (tasks > 1), split like a shell would (no shell runs
    # them). Open MPI refuses to start as root without --allow-run-as-root, and Kiln's default SSH
    # user is root (as checks/nccl/params.py).
    launcher_args: str = "--allow-run-as-root"
    # 10 min: 3 iterations of ~9 phases x 1,000 items at the lowest floor (300 ops/s) take ~90 s.
    timeout_s: int = 600

    def __post_init__(self) -> None:
        check_path(self.path)
        limits = {"files": 10_000_000, "iterations": 100, "file_size": MAX_FILE_SIZE, "tasks": 1024}
        for name, high in limits.items():
            if not 1 <= getattr(self, name) <= high:
                raise ParamsError(f"param {name!r}: must be 1..{high}, got {getattr(self, name)}")
        if self.timeout_s < 1:
            raise ParamsError("param 'timeout_s': must be >= 1")
        try:
            shlex.split(self.launcher_args)
        except ValueError as exc:
            raise ParamsError(f"param 'launcher_args': {exc}") from None


@dataclass
class FsMetadataThresholds:
    # Which floors judge (checks/fs/metadata_floors.py): "lustre", "gpfs", "weka", "nfs"; "any"
    # (per operation the lowest floor any class sets: judged whatever the filesystem, the default);
    # "none" (recorded, not judged). weka and nfs set no floor yet (no published per-client figure).
    fs_class: str = "any"
    # None = the class's floor; a number (ops/s per node, mean over the iterations) replaces it.
    min_file_creation_ops: float | None = None
    min_file_stat_ops: float | None = None
    min_file_read_ops: float | None = None
    min_file_removal_ops: float | None = None
    # file read rate x file_size, MB/s (10^6 B/s); None = recorded, not judged (no class sets one).
    min_small_read_mbps: float | None = None

    def __post_init__(self) -> None:
        if self.fs_class not in FS_CLASSES:
            raise ParamsError(f"threshold 'fs_class': expected one of {', '.join(FS_CLASSES)}, got {self.fs_class!r}")
        for name in (*(f"min_{op}_ops" for op in JUDGED), "min_small_read_mbps"):
            value = getattr(self, name)
            if value is not None and not value >= 0:
                raise ParamsError(f"threshold {name!r}: must be >= 0 or None")


def mdtest_argv(params: FsMetadataParams, directory: str) -> tuple[str, ...]:
    size = str(params.file_size)
    mdtest: tuple[str, ...] = ("mdtest", "-n", str(params.files), "-i", str(params.iterations), "-u", "-d", directory)
    mdtest += ("-w", size, "-e", size)
    if params.tasks == 1:
        return mdtest
    return ("mpirun", "-np", str(params.tasks), *shlex.split(params.launcher_args), *mdtest)


def run_directory(params: FsMetadataParams, hostname: str) -> str:
    return posixpath.join(posixpath.normpath(params.path), DIR_PREFIX + safe_name(hostname))


def words(op: str) -> str:
    return op.replace("_", " ")


def ops(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def mdtest_failure(output: CommandOutput) -> str:
    """mdtest's own diagnosis: its last ERROR/WARNING line (mdtest.c FAIL/WARN), else the last line."""
    lines = [ln.strip() for ln in (output.stdout + "\n" + output.stderr).splitlines() if ln.strip()]
    said = [ln for ln in lines if "error" in ln.lower() or "unable" in ln.lower()]
    picked = said[-1] if said else (lines[-1] if lines else "no output")
    return picked[:300]


def asked_tasks(command: Command) -> int | None:
    """How many mdtest tasks the command launched (mpirun's -np, else 1); None for a captured file."""
    argv = command.argv
    if "mdtest" not in argv:
        return None
    head = argv[: argv.index("mdtest")]
    if "-np" in head and head.index("-np") + 1 < len(head) and head[head.index("-np") + 1].isdigit():
        return int(head[head.index("-np") + 1])
    return 1


def check_tasks(measurements: list[Measurement], command: Command) -> None:
    """mdtest's own count of its tasks must be what was launched: fewer ranks is another test."""
    asked = asked_tasks(command)
    ran = next((m.value for m in measurements if m.name == "tasks"), None)
    if asked is not None and ran is not None and int(ran) != asked:
        raise EvidenceError(f"mdtest ran {int(ran)} task(s), {asked} were launched")


def judged_rates(measurements: list[Measurement]) -> list[Measurement]:
    """Each judged operation's mean as <operation>_rate (value None with labels["missing"] when
    mdtest has no such row or did not run the phase)."""
    means = {m.labels.get("operation"): m for m in measurements if m.name == RATE and m.labels.get("stat") == "mean"}
    out: list[Measurement] = []
    for op in JUDGED:
        mean = means.get(op)
        if mean is None:
            out.append(Measurement(name=f"{op}_rate", unit="ops/s", labels={"missing": "no row in mdtest's summary"}))
        else:
            out.append(Measurement(name=f"{op}_rate", value=mean.value, unit="ops/s", labels=dict(mean.labels)))
    return out


def judge_rate(m: Measurement, op: str, thresholds: Any, where: str, field: str = "min_{}_ops") -> Finding:
    """One operation's mean against its floor; `where` ("on gpu03") places it, `field` names the
    threshold that replaces the class floor."""
    name = field.format(op)
    floor, source = floor_for(thresholds, op, name)
    said = f"{words(op)} {ops(m.value or 0.0)} ops/s {where}"
    if floor is None:
        return Finding(WARN, f"{said}: not judged (no floor for fs_class {thresholds.fs_class!r}; set {name})")
    m.threshold = f">= {floor:g} ops/s"
    m.ok = (m.value or 0.0) >= floor
    if m.ok:
        return Finding(PASS, said)
    return Finding(FAIL, f"{said}, below the {ops(floor)} ops/s floor{source}")


def judge_small_read(measurements: list[Measurement], floor: float | None, host: str) -> Finding | None:
    found = [m for m in measurements if m.name == SMALL_READ]
    if floor is None:
        return None
    if not found or found[0].value is None:
        return Finding(ERROR, f"no small-file read bandwidth on {host} (mdtest read no bytes: -e missing?)")
    m = found[0]
    m.threshold, m.ok = f">= {floor:g} MB/s", (m.value or 0.0) >= floor
    said = f"small-file read {m.value:.1f} MB/s on {host}"
    return Finding(PASS, said) if m.ok else Finding(FAIL, f"{said}, below the {floor:g} MB/s floor")


# Metadata rates move run to run: the SJTU fixture's file creation std dev is 16% of its mean over
# 3 iterations. History calls a change worse beyond that noise.
_NOISE_PCT = 16.0
_PROM = "kiln_fs_metadata_ops_per_second"
_SHOWN = (("file_creation", "File creation"), ("file_stat", "File stat"), ("file_read", "Small-file read"))


@register
class FsMetadata(Check):
    key: ClassVar[str] = "fs_metadata"
    name: ClassVar[str] = "Filesystem metadata (node)"
    description: ClassVar[str] = (
        "mdtest per node: small-file create, stat, read and remove rates against the filesystem class's floors."
    )
    Params: ClassVar[type] = FsMetadataParams
    Thresholds: ClassVar[type] = FsMetadataThresholds
    presentation: ClassVar[Presentation] = Presentation(
        chart="",  # the "filesystem" family's selector reads fio bandwidths only
        rank=42,
        key_metrics=tuple(
            KeyMetric(f"fs_md_{op}", f"{label} rate", f"{op}_rate", "ops/s", tolerance_pct=_NOISE_PCT)
            for op, label in _SHOWN
        ),
        prometheus=tuple(
            PromMetric(f"{op}_rate", _PROM, "mdtest mean rate of one node", "operation", op) for op in JUDGED
        ),
        outliers=tuple(
            OutlierMetric(f"md_{op}", words(op), (f"{op}_rate",), "ops/s", True, lowest(f"{op}_rate"))
            for op, _ in _SHOWN
        ),
        # Every judged rate is a floor: the slowest node is the worst.
        fleet=tuple(FleetMetric(f"{op}_rate") for op in JUDGED),
    )
    # A cached stat() is a system call of at least ~100 ns, so a core serves at most ~10^7 ops/s and
    # a node of a few hundred cores a few 10^9: 10^10 ops/s from one node is not a reading.
    evidence: ClassVar[dict[str, Rule]] = {
        **{name: Rule("a metadata rate", low=0.0, high=1e10) for name in (RATE, *(f"{op}_rate" for op in JUDGED))},
        SMALL_READ: Rule("a throughput", low=0.0, high=MAX_STORAGE_BYTES_S / 1e6),
        "tasks": COUNT,
        "nodes": COUNT,
    }

    def commands(self, params: Any, node: NodeContext) -> list[Command]:
        p: FsMetadataParams = params
        directory = run_directory(p, node.hostname)
        argv = ("sh", "-c", _RUN_AND_CLEAN, "sh", directory, *mdtest_argv(p, directory))
        return [Command(argv=argv, timeout=float(p.timeout_s), label=MDTEST_LABEL)]

    def describe_failure(self, output: CommandOutput) -> str:
        return mdtest_failure(output)

    def parse(self, outputs: list[CommandOutput]) -> list[Measurement]:
        if len(outputs) != 1:
            raise EvidenceError(f"expected one mdtest output, got {len(outputs)}")
        measurements = parse_output(MDTEST_LABEL, outputs[0].stdout).measurements
        runs = {m.labels["run"] for m in measurements if "run" in m.labels}
        if runs:
            raise EvidenceError(f"expected one mdtest summary, found {len(runs)}")
        check_tasks(measurements, outputs[0].command)
        return measurements + judged_rates(measurements)

    def evaluate(self, measurements: list[Measurement], thresholds: Any, node: NodeContext) -> Verdict:
        t: FsMetadataThresholds = thresholds
        host = node.hostname
        findings: list[Finding] = []
        judged: dict[str, float] = {}
        for op in JUDGED:
            m = next((x for x in measurements if x.name == f"{op}_rate"), None)
            if m is None or m.value is None:
                why = m.labels.get("missing", "") if m is not None else "not parsed"
                findings.append(Finding(ERROR, f"mdtest reported no {words(op)} rate on {host} ({why})"))
                continue
            judged[op] = m.value
            findings.append(judge_rate(m, op, t, f"on {host}"))
        small = judge_small_read(measurements, t.min_small_read_mbps, host)
        findings += [small] if small is not None else []
        said = ", ".join(f"{words(op).split()[1]} {ops(v)}" for op, v in judged.items())
        return Verdict.from_findings(findings, pass_reason=f"file {said} ops/s on {host} ({t.fs_class} floors)")
