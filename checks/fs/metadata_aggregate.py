"""Filesystem metadata across nodes: fs_metadata_aggregate, one mdtest over every node at once.

The group counterpart of fs_metadata (checks/fs/metadata.py), as fs_aggregate is fs_throughput's:
from the launcher, `mpirun --hostfile H -np N*T --map-by ppr:T:node mdtest ...` runs T mdtest
tasks on each of the N nodes against one directory (DIR/kiln-mdtest-<run tag>, removed before and
after, with the hostfile). mdtest's summary is then the metadata service's rate under the whole
group's load: the rates are the group's, and mdtest cannot say which node was slow (one summary
for all ranks), so no node is blamed; fs_metadata's per-node rates and the run's outliers do that.

Judged: mdtest ran on every node of the group with the expected task count ("launched with X total
task(s) on Y node(s)", else `error`), and the four file operations' means against
min_aggregate_<operation>_ops. Unset (the default), the floor is one client's floor of the
filesystem class (checks/fs/metadata_floors.py): the group must at least do what one healthy node
does alone. That catches a metadata service that collapses under load, not one short of its
contract: set the aggregate floors from the storage system's acceptance figures (an IO500 or
vendor mdtest run of the same shape), as fs_aggregate's min_aggregate_*_gbps.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any, ClassVar

from checks.core.base import (
    ERROR,
    Command,
    CommandOutput,
    EvidenceError,
    Finding,
    GroupCheck,
    GroupContext,
    GroupVerdict,
    Measurement,
    ParamsError,
    Verdict,
    register,
)
from checks.core.evidence import Rule
from checks.core.presentation import Presentation
from checks.fs.metadata import (
    MDTEST_LABEL,
    FsMetadata,
    FsMetadataParams,
    judge_rate,
    mdtest_argv,
    mdtest_failure,
    ops,
    run_directory,
    words,
)
from checks.fs.metadata_floors import FS_CLASSES, JUDGED
from checks.fs.throughput import safe_name

HOSTFILE_LABEL = "hostfile"
_HOST_FORBIDDEN = re.compile(r"[\s#,=]")
# $1 the run directory, $2 the hostfile, rest = mpirun ... mdtest ...: both removed whatever happened.
_RUN_AND_CLEAN = (
    'dir=$1 hosts=$2; shift 2; rm -rf -- "$dir"; "$@"; rc=$?; rm -rf -- "$dir"; rm -f -- "$hosts"; exit $rc'
)
_WRITE_HOSTFILE = 'umask 077 && cat > "$1"'  # as checks/nccl/allreduce.py: the hostfile comes on stdin
_FIELD = "min_aggregate_{}_ops"


def check_hostname(host: str) -> None:
    # A hostfile line is "HOST slots=N" (checks/nccl/allreduce.py has the same rule): whitespace, '#', ',' or
    # '=' in a name would change what mpirun reads, and a leading '-' would read as an option.
    if not host or _HOST_FORBIDDEN.search(host) or host.startswith("-"):
        raise ParamsError(f"hostname {host!r} cannot be passed to an MPI hostfile")


@dataclass
class FsMetadataAggregateThresholds:
    # The class whose per-client floors stand in for unset aggregate floors (module docstring):
    # as fs_metadata's fs_class ("any" by default, "none": recorded, not judged).
    fs_class: str = "any"
    # None = one client's floor of fs_class; a number (ops/s, the whole group, mean over the
    # iterations) replaces it: the storage system's acceptance figure for this shape of run.
    min_aggregate_file_creation_ops: float | None = None
    min_aggregate_file_stat_ops: float | None = None
    min_aggregate_file_read_ops: float | None = None
    min_aggregate_file_removal_ops: float | None = None

    def __post_init__(self) -> None:
        if self.fs_class not in FS_CLASSES:
            raise ParamsError(f"threshold 'fs_class': expected one of {', '.join(FS_CLASSES)}, got {self.fs_class!r}")
        for op in JUDGED:
            value = getattr(self, _FIELD.format(op))
            if value is not None and not value >= 0:
                raise ParamsError(f"threshold {_FIELD.format(op)!r}: must be >= 0 or None")


def _hostfile_path(tag: str) -> str:
    return f"/tmp/kiln-mdtest-{safe_name(tag)[:80]}.hostfile"


def _launch_findings(measurements: list[Measurement], group: GroupContext) -> list[Finding]:
    """mdtest says on how many nodes it ran: every node of the group, or `error` (the task count
    was checked against mpirun's -np when parsing)."""
    nodes = next((m for m in measurements if m.name == "nodes"), None)
    expected = len(group.nodes)
    if nodes is None or nodes.value is None:
        return [Finding(ERROR, "mdtest did not say on how many nodes it ran (no 'launched with' line)")]
    nodes.threshold, nodes.ok = f"== {expected}", int(nodes.value) == expected
    if nodes.ok:
        return []
    return [Finding(ERROR, f"mdtest ran on {int(nodes.value)} node(s), expected {expected}")]


@register
class FsMetadataAggregate(GroupCheck):
    key: ClassVar[str] = "fs_metadata_aggregate"
    name: ClassVar[str] = "Filesystem metadata (aggregate)"
    description: ClassVar[str] = (
        "One mdtest across every node at once (mpirun): the metadata service's rates under the whole load."
    )
    Params: ClassVar[type] = FsMetadataParams
    Thresholds: ClassVar[type] = FsMetadataAggregateThresholds
    # fs_metadata's history keys: the group's value stays off the node pages (group_value_on_node).
    presentation: ClassVar[Presentation] = Presentation(rank=43, key_metrics=FsMetadata.presentation.key_metrics)
    evidence: ClassVar[dict[str, Rule]] = {
        **FsMetadata.evidence,
        # fs_metadata's per-node bound (10^10 ops/s) times 10^4 nodes, more than a run spans.
        **{n: Rule("a metadata rate", low=0.0, high=1e14) for n in ("ops_per_s", *(f"{op}_rate" for op in JUDGED))},
    }
    min_nodes: ClassVar[int] = 2

    def group_commands(self, params: Any, group: GroupContext) -> list[Command]:
        p: FsMetadataParams = params
        for host in group.hostnames:
            check_hostname(host)
        hostfile = _hostfile_path(group.tag)
        directory = run_directory(p, group.tag)
        write = Command(
            argv=("sh", "-c", _WRITE_HOSTFILE, "sh", hostfile),
            timeout=30.0,
            stdin="".join(f"{host} slots={p.tasks}\n" for host in group.hostnames),
            label=HOSTFILE_LABEL,
        )
        np = str(p.tasks * len(group.nodes))
        launch: tuple[str, ...] = ("mpirun", "--hostfile", hostfile, "-np", np, "--map-by", f"ppr:{p.tasks}:node")
        launch += tuple(shlex.split(p.launcher_args))
        mdtest = mdtest_argv(FsMetadataParams(**{**p.__dict__, "tasks": 1}), directory)  # the bare mdtest argv
        argv = ("sh", "-c", _RUN_AND_CLEAN, "sh", directory, hostfile, *launch, *mdtest)
        return [write, Command(argv=argv, timeout=float(p.timeout_s), label=MDTEST_LABEL)]

    def timeout(self, params: Any) -> float:
        return sum(c.timeout for c in self.stand_in_commands(params))

    def describe_failure(self, output: CommandOutput) -> str:
        return mdtest_failure(output)

    def parse(self, outputs: list[CommandOutput]) -> list[Measurement]:
        runs = [o for o in outputs if o.command.label == MDTEST_LABEL]
        if len(runs) != 1:
            raise EvidenceError(f"expected one mdtest output, got {len(runs)}")
        return FsMetadata().parse(runs)

    def evaluate_group(self, measurements: list[Measurement], thresholds: Any, group: GroupContext) -> GroupVerdict:
        t: FsMetadataAggregateThresholds = thresholds
        where = f"over {len(group.nodes)} nodes"
        findings = _launch_findings(measurements, group)
        rates: dict[str, float] = {}
        for op in JUDGED:
            m = next((x for x in measurements if x.name == f"{op}_rate"), None)
            if m is None or m.value is None:
                why = m.labels.get("missing", "") if m is not None else "not parsed"
                findings.append(Finding(ERROR, f"mdtest reported no {words(op)} rate {where} ({why})"))
                continue
            rates[op] = m.value
            findings.append(judge_rate(m, op, t, where, _FIELD))
        said = ", ".join(f"{words(op).split()[1]} {ops(v)}" for op, v in rates.items())
        verdict = Verdict.from_findings(findings, pass_reason=f"file {said} ops/s {where} ({t.fs_class} floors)")
        # One summary for every rank: no node can be named (fs_metadata's per-node rates do that).
        return GroupVerdict(status=verdict.status, reason=verdict.reason, findings=verdict.findings)
