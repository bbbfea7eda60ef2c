"""NCCL collectives with nccl-tests (`all_reduce_perf`): one node, and across nodes from a launcher.
`NcclGroupCheck` runs any nccl-tests program across nodes; all-to-all is checks/nccl/alltoall.py.

Evidence is the nccl-tests table, read by checks/nccl/nccl_tests.py (every 2.x format, `NCCL INFO` /
`NCCL version` lines mixed in): one row per message size with out-of-place and in-place
time / algbw / busbw / #wrong, the "# Using devices" rank lines, and the closing summary.

No evidence, no pass:
- no table, a crashed run ("Test NCCL failure ...") or a launcher error (Open MPI's "not enough
  slots") raises EvidenceError naming the error;
- no closing summary ("# Out of bounds values", "# Avg bus bandwidth"): the run stopped early,
  `error` "output incomplete";
- a cell that cannot exist (busbw NaN, inf or beyond the bandwidth bound, a negative or
  fractional #wrong in any row), an unreadable row, or a message size listed twice: `error`
  "impossible evidence: ..." naming the row (checks/core/evidence.py rules, applied per row);
- bandwidth is judged only on sizes >= `peak_min_bytes`: busbw reaches its plateau only for large
  messages, so a sweep that never got there cannot show a slow link (`error`, not `pass`);
- no bandwidth floor (`min_busbw_gbps` None, the generic profile): busbw is recorded and the
  verdict is `warn` "not judged", never a bare pass;
- `#wrong` N/A (validation off, `-c 0`) is `error` while `max_wrong` is set; wrong results are
  counted row by row and the rows are named;
- the output of another collective (all_gather_perf...) is `error`;
- the footer's "Avg bus bandwidth" averages every size, tiny ones included, so it is recorded
  (`busbw_avg_reported`) but never judged;
- all_reduce_perf exits 1 when it found wrong values: exit 1 is accepted only when the output is a
  complete run whose footer says "Out of bounds values : N FAILED" (then the verdict is `fail`).
"""

from __future__ import annotations

import re
import shlex
from typing import Any, ClassVar

from checks.core import evidence
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
    GroupCheck,
    GroupContext,
    GroupVerdict,
    Measurement,
    NodeContext,
    ParamsError,
    Series,
    Verdict,
    register,
)
from checks.core.presentation import (
    CertificateChart,
    KeyMetric,
    OutlierMetric,
    Presentation,
    PromMetric,
    SeriesThreshold,
    TrendRule,
    highest,
)
from checks.nccl.measure import DEFAULT_PEAK_MIN_BYTES, collective_of, measurements_from, parse_nccl, report_problems
from checks.nccl.nccl_tests import (
    ALGBW_RULE,
    FAILURE_LINE,
    busbw_series,
    format_size,
    infer_collective,
    launcher_error,
    parse_report,
    parse_size,
)
from checks.nccl.params import NcclMultiParams, NcclParams, NcclThresholds

__all__ = ["FAILURE_LINE", "format_size", "parse_nccl", "parse_report", "parse_size"]

# The peak floor travels to parse() in the command's environment (parse sees only outputs); the
# tool ignores it. Outputs without it (a captured file) use the default.
PEAK_ENV = "KILN_NCCL_PEAK_MIN_BYTES"
NCCL_LABEL = "all_reduce_perf"
HOSTFILE_LABEL = "hostfile"
# Writes stdin to the path in $1, readable only by us. Fixed text: the path and content are data.
WRITE_HOSTFILE_SCRIPT = 'umask 077 && cat > "$1"'


def _gbps(value: float) -> str:
    return f"{value:.1f}"


# Checks
# ---------------------------------------------------------------------------------------------


def _test_args(params: Any, gpus_per_process: int) -> list[str]:
    return [
        "-b", str(params.min_bytes), "-e", str(params.max_bytes), "-f", str(params.step_factor),
        "-g", str(gpus_per_process), "-c", "1", "-n", str(params.iters), "-w", str(params.warmup_iters),
    ]  # fmt: skip


def _peak_floor(outputs: list[CommandOutput]) -> int:
    for out in outputs:
        if PEAK_ENV in out.command.env:
            return parse_size(out.command.env[PEAK_ENV])
    return parse_size(DEFAULT_PEAK_MIN_BYTES)


def _pass_reason(measurements: list[Measurement], t: NcclThresholds) -> str:
    """The evidence in one line: peak busbw, where, against which floor, and #wrong."""
    facts = {m.name: m for m in measurements}
    peak, size = facts.get("busbw_peak"), facts.get("size_at_peak")
    if peak is None or peak.value is None:
        return "all within spec"
    text = f"busbw {peak.value:.1f} GB/s"
    if size is not None and size.value:
        text += f" at {_human_size(int(size.value))}"
    if t.min_busbw_gbps is not None:
        text += f" (floor {t.min_busbw_gbps:g})"
    wrong = facts.get("wrong")
    if wrong is not None and wrong.value is not None:
        text += f", #wrong {int(wrong.value)}"
    return text


def _human_size(size: int) -> str:
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= factor and size % factor == 0:
            return f"{size // factor} {unit}"
    return f"{size} B"


def _test_output(outputs: list[CommandOutput]) -> CommandOutput:
    """The nccl-tests output among a check's outputs (the last command; earlier ones set it up)."""
    return outputs[-1]


class _NcclBase(Check):
    """What the NCCL checks share: parse, series, failure description, judging one report.
    `collective` names the nccl-tests program a check runs and the only output it judges."""

    collective: ClassVar[str] = "all_reduce"
    # The threshold that sets the busbw floor, named where a run was not judged for want of one.
    floor_threshold: ClassVar[str] = "min_busbw_gbps"
    # 1 MiB to 1 GiB, 5 iterations: seconds on the simulated all_reduce_perf/alltoall_perf, and the
    # sizes from peak_min_bytes (512 MiB) up are still judged against the bus bandwidth floor (the
    # simulated curve is flat there: testbed/sim/tools/all_reduce_perf).
    simulator_params: ClassVar[dict[str, Any]] = {
        "min_bytes": "1M",
        "max_bytes": "1G",
        "peak_min_bytes": "512M",
        "iters": 5,
        "warmup_iters": 1,
    }

    # all_reduce_perf exits 1 when it found wrong values, or when NCCL_TESTS_MIN_BW is set and the
    # average is below it (nccl-tests common.cu: exit(EXIT_FAILURE)). Those are findings, not a
    # failure to measure: exit 1 is accepted here and parse() lets it through only for a complete
    # run whose footer says "FAILED".
    ok_exit_codes: ClassVar[tuple[int, ...]] = (0, 1)
    evidence: ClassVar[dict[str, evidence.Rule]] = {
        "algbw_peak": ALGBW_RULE,
        "wrong": evidence.COUNT,
        "ranks": evidence.COUNT,
        "nodes": evidence.COUNT,
    }

    def parse(self, outputs: list[CommandOutput]) -> list[Measurement]:
        out = _test_output(outputs)
        for setup in outputs[:-1]:
            if setup.exit_code != 0:
                label = setup.command.label or setup.command.argv[0]
                raise EvidenceError(f"{label} exited {setup.exit_code}: {self.describe_failure(setup)}")
        text = out.stdout + ("\n" + out.stderr if out.stderr else "")
        try:
            report = parse_report(text)
        except EvidenceError:
            if out.exit_code == 0:
                raise
            report = None
        judged_bad = report is not None and (report.out_of_bounds_failed or report.avg_failed)
        if out.exit_code != 0 and not (report and report.complete and judged_bad):
            raise EvidenceError(f"{self.program()} exited {out.exit_code}: {self.describe_failure(out)}")
        assert report is not None  # exit 0 parsed, or exit 1 with a complete FAILED run
        if report.failures:
            raise EvidenceError(f"{self.program()} crashed: {report.failures[0][:300]}")
        report_problems(report)  # "output incomplete" / "impossible evidence: ..." -> error
        collective = collective_of(out.command.argv)
        return measurements_from(report, peak_min_bytes=_peak_floor(outputs), collective=collective)

    @classmethod
    def program(cls) -> str:
        """'all_reduce_perf': the nccl-tests program of `collective`, and its commands' label."""
        return f"{cls.collective}_perf"

    def series(self, outputs: list[CommandOutput]) -> list[Series]:
        out = _test_output(outputs)
        try:
            report = parse_report(out.stdout)
        except EvidenceError:
            return []
        return busbw_series(report, report.named or collective_of(out.command.argv) or infer_collective(report))

    def describe_failure(self, output: CommandOutput) -> str:
        why = launcher_error(output.stderr + "\n" + output.stdout)
        return why or super().describe_failure(output)

    def judge(
        self, measurements: list[Measurement], t: NcclThresholds, *, where: str, floor_note: str = ""
    ) -> list[Finding]:
        """Findings on one report: collective, correctness, peak bandwidth. `where` ends reasons
        on a group (" across gpu01, gpu02"); '' on one node. `floor_note` says how the floor was
        derived ("35 GB/s per GPU x 2/1 for 2 nodes"); '' when it is the threshold as set."""
        facts = {m.name: m for m in measurements}
        findings: list[Finding] = []
        collective = facts.get("collective")
        names = [collective.labels.get("table", ""), collective.text] if collective else []
        other = next((n for n in names if n and n != self.collective), "")
        if other:
            findings.append(Finding(ERROR, f"the output is from {other}_perf, not {self.program()}"))

        wrong = facts.get("wrong")
        if t.max_wrong is not None:
            if wrong is None or wrong.value is None:
                why = wrong.labels.get("missing", "no #wrong column") if wrong else "no #wrong column"
                findings.append(Finding(ERROR, f"results not validated: {why}{where}"))
            else:
                wrong.threshold, wrong.ok = f"<= {t.max_wrong}", wrong.value <= t.max_wrong
                if not wrong.ok:
                    rows = wrong.labels.get("rows", "")
                    count = wrong.labels.get("wrong_results", "")
                    at = f"; {count} wrong, first at {rows.split('; ')[0]}" if rows else ""
                    reason = f"#wrong = {int(wrong.value)} (results differ from the reference{at}){where}"
                    findings.append(Finding(FAIL, reason))

        busbw = facts.get("busbw_peak")
        if busbw is None or busbw.value is None:
            why = busbw.labels.get("missing", "no busbw_peak") if busbw else "no busbw_peak"
            findings.append(Finding(ERROR, why))
            return findings
        size = format_size(float(busbw.labels.get("size", "0")))
        if t.min_busbw_gbps is None:
            # Recorded, not judged: a bandwidth with no floor is never a bare pass.
            unset = f"not judged (no {self.floor_threshold} floor set)"
            reason = f"busbw {_gbps(busbw.value)} GB/s at {size}: {unset}{where}"
            findings.append(Finding(WARN, reason))
            return findings
        busbw.threshold, busbw.ok = f">= {t.min_busbw_gbps:g}", busbw.value >= t.min_busbw_gbps
        if busbw.ok:
            how = f": {floor_note}" if floor_note else ""
            reason = f"busbw {_gbps(busbw.value)} GB/s at {size} (floor {t.min_busbw_gbps:g} GB/s{how}){where}"
            findings.append(Finding(PASS, reason))
        else:
            how = f" ({floor_note})" if floor_note else ""
            reason = f"busbw {_gbps(busbw.value)} GB/s at {size} below the {t.min_busbw_gbps:g} GB/s floor{how}{where}"
            findings.append(Finding(FAIL, reason))
        return findings


# The busbw curve's floor is the one judged on busbw_peak, and only over the sizes it judged: sizes
# >= peak_min_bytes (the measurement's label; busbw plateaus only for large messages).
BUSBW_FLOOR = SeriesThreshold("busbw_peak", x_from="peak_min_bytes")
# One history chart for NCCL on one node and across nodes (both kinds store busbw_peak).
BUSBW_KEY_METRIC = KeyMetric(
    "busbw", "NCCL bus bandwidth (peak)", "busbw_peak", "GB/s", group_value_on_node=True, fleet_default=True
)


# How the certificate names these measurements (checks/core/presentation.py measurement_labels).
NCCL_LABELS = (
    ("busbw_peak", "Bus bandwidth (peak)"),
    ("wrong", "Wrong results (#wrong)"),
)


@register
class NcclAllReduce(_NcclBase):
    key: ClassVar[str] = "nccl_allreduce"
    name: ClassVar[str] = "NCCL all-reduce (node)"
    description: ClassVar[str] = (
        "nccl-tests all_reduce_perf over the node's GPUs: peak bus bandwidth at large sizes, #wrong."
    )
    Params: ClassVar[type] = NcclParams
    Thresholds: ClassVar[type] = NcclThresholds
    presentation: ClassVar[Presentation] = Presentation(
        measurement_labels=NCCL_LABELS,
        chart="nccl",
        rank=10,
        curves="busbw",
        key_metrics=(BUSBW_KEY_METRIC,),
        series_threshold=BUSBW_FLOOR,
        trends=(TrendRule("busbw_peak", -1, 0.03, True, "NCCL busbw falling", "GB/s"),),
        prometheus=(PromMetric("busbw_peak", "kiln_nccl_busbw_peak_gbps", "NCCL all-reduce peak bus bandwidth, GB/s"),),
        outliers=(OutlierMetric("busbw", "busbw", ("busbw_peak",), "GB/s", True, highest("busbw_peak")),),
        certificate_charts=(
            CertificateChart(
                "NCCL all-reduce bus bandwidth by message size", "curves", ("busbw",), "busbw (GB/s)",
                x_title="message size (B)", log_x=True, threshold="min_busbw_gbps",
            ),
        ),
    )  # fmt: skip
    profile_thresholds: ClassVar[dict[str, dict[str, Any]]] = {
        # Azure azurehpc-health-checks conf/nd96isr_h100_v5.conf: `check_nccl_allreduce 460.0 ... 16G`
        # (8x H100 SXM, NVLink4/NVSwitch, single-node all_reduce busbw floor in GB/s). Published
        # 8x H100 results peak at ~470-480 GB/s at 8 GiB. A site on NCCL without NVLS may need less.
        "H100-SXM-8": {"min_busbw_gbps": 460.0},
        # Azure azurehpc-health-checks conf/nd96isr_h200_v5.conf: `check_nccl_allreduce 431.0 1 16G`
        # (8x H200 SXM, same NVLink4 fabric as H100).
        "H200-SXM-8": {"min_busbw_gbps": 431.0},
        # Azure azurehpc-health-checks conf/nd96amsr_a100_v4.conf: `check_nccl_allreduce 228.0 ... 4G`
        # (8x A100 SXM4 80GB, NVLink3). The fixtures reach 231.7 (80GB, 1 GiB) and 235.3 (40GB, 8 GiB).
        "A100-SXM-8": {"min_busbw_gbps": 228.0},
    }

    def commands(self, params: Any, node: NodeContext) -> list[Command]:
        p: NcclParams = params
        gpus = p.gpus or node.expected_gpus or 8
        argv = (p.binary, *_test_args(p, gpus))
        env = {PEAK_ENV: str(parse_size(p.peak_min_bytes))}
        return [Command(argv=argv, timeout=float(p.timeout_s), env=env, label=self.program())]

    def evaluate(self, measurements: list[Measurement], thresholds: Any, node: NodeContext) -> Verdict:
        t: NcclThresholds = thresholds
        findings: list[Finding] = []
        ranks = next((m for m in measurements if m.name == "ranks"), None)
        if ranks is None or ranks.value is None:
            findings.append(Finding(ERROR, "no '# Rank ... device' lines: cannot tell which GPUs ran"))
        elif node.expected_gpus is not None:
            ranks.threshold, ranks.ok = f"== {node.expected_gpus}", int(ranks.value) == node.expected_gpus
            if not ranks.ok:
                reason = f"ran on {int(ranks.value)} GPUs, the node has {node.expected_gpus}: not every GPU measured"
                findings.append(Finding(ERROR, reason))
        findings += self.judge(measurements, t, where="")
        return Verdict.from_findings(findings, pass_reason=_pass_reason(measurements, t))


_HOST_FORBIDDEN = re.compile(r"[\s#,=]")
_TAG_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


def _check_hostname(host: str) -> None:
    # A hostfile line is "HOST slots=N" and srun takes "-w a,b": whitespace, '#', ',' or '=' in a
    # name would change what the launcher reads, and a leading '-' would read as an option.
    if not host or _HOST_FORBIDDEN.search(host) or host.startswith("-"):
        raise ParamsError(f"hostname {host!r} cannot be passed to an MPI hostfile or a Slurm node list")


def hostfile_path(tag: str) -> str:
    return f"/tmp/kiln-nccl-{_TAG_SAFE.sub('_', tag)[:80]}.hostfile"


class NcclGroupCheck(GroupCheck, _NcclBase):
    """An nccl-tests program across nodes from a launcher (mpirun with a hostfile, or srun), one GPU
    per rank; one result for the group, a slow group bisected to the node (`pairwise`). Subclasses
    set `collective`, the registry attributes and their thresholds."""

    Params: ClassVar[type] = NcclMultiParams
    pairwise: ClassVar[bool] = True

    def group_commands(self, params: Any, group: GroupContext) -> list[Command]:
        p: NcclMultiParams = params
        hosts = group.hostnames
        for host in hosts:
            _check_hostname(host)
        gpus = p.gpus or _common_gpus(group) or 8
        env = {PEAK_ENV: str(parse_size(p.peak_min_bytes))}
        extra = shlex.split(p.launcher_args)
        test = (p.binary, *_test_args(p, 1))
        if p.launcher == "srun":
            argv = ("srun", "-N", str(len(hosts)), f"--ntasks-per-node={gpus}", "-w", ",".join(hosts), *extra, *test)
            return [Command(argv=argv, timeout=float(p.timeout_s), env=env, label=self.program())]
        path = hostfile_path(group.tag)
        content = "".join(f"{host} slots={gpus}\n" for host in hosts)
        write = Command(
            argv=("sh", "-c", WRITE_HOSTFILE_SCRIPT, "sh", path), timeout=30.0, stdin=content, label=HOSTFILE_LABEL
        )
        run = ("mpirun", "--hostfile", path, "-np", str(len(hosts) * gpus), "--map-by", f"ppr:{gpus}:node", *extra)
        return [write, Command(argv=(*run, *test), timeout=float(p.timeout_s), env=env, label=self.program())]

    def judged_thresholds(self, thresholds: Any, group: GroupContext) -> tuple[NcclThresholds, str]:
        """The thresholds one run over `group` is judged on, and how its floor was derived ('' when
        it is the threshold as set): the same for any number of nodes here."""
        return thresholds, ""

    def timeout(self, params: Any) -> float:
        return sum(c.timeout for c in self.stand_in_commands(params))

    def evaluate_group(self, measurements: list[Measurement], thresholds: Any, group: GroupContext) -> GroupVerdict:
        t, floor_note = self.judged_thresholds(thresholds, group)
        hosts = group.hostnames
        where = f" across {_names(hosts)}"
        findings = _coverage({m.name: m for m in measurements}, group, where)
        if findings:
            # The run spanned other nodes than the group's, or no one can tell which: its numbers
            # prove nothing of the group (the floor is the group's), so they are not judged.
            findings.append(Finding(ERROR, f"results not judged: the run's span is not the group's{where}"))
        else:
            findings += self.judge(measurements, t, where=where, floor_note=floor_note)
        verdict = Verdict.from_findings(findings, pass_reason=_pass_reason(measurements, t) + where)
        # One run over the whole group cannot say which node is slow: node_verdicts stays empty and
        # the executor's localisation by halves (checks/core/localise.py) names the node.
        return GroupVerdict(status=verdict.status, reason=verdict.reason, findings=verdict.findings)


@register
class NcclAllReduceMulti(NcclGroupCheck):
    key: ClassVar[str] = "nccl_allreduce_multi"
    name: ClassVar[str] = "NCCL all-reduce (across nodes)"
    description: ClassVar[str] = (
        "all_reduce_perf across the run's nodes from a launcher; a slow run is bisected to the node at fault."
    )
    Thresholds: ClassVar[type] = NcclThresholds
    presentation: ClassVar[Presentation] = Presentation(
        measurement_labels=NCCL_LABELS,
        chart="nccl",
        rank=11,
        key_metrics=(BUSBW_KEY_METRIC,),
        curves="busbw",
        series_threshold=BUSBW_FLOOR,
    )
    profile_thresholds: ClassVar[dict[str, dict[str, Any]]] = {
        # Conservative default; tune per site. 2-node all_reduce busbw is bound by the nodes' NICs:
        # the GCP A3 Mega 2x8 H100 fixture (8x 200G GPUDirect-TCPXO) peaks at 338.8 GB/s at 8 GiB,
        # and 8x 400G NDR H100 clusters publish ~330-390 GB/s (e.g. 330.9 on 4 nodes, Voltage Park
        # benchmark). 300 passes those and fails a node running well below its rails' rate.
        "H100-SXM-8": {"min_busbw_gbps": 300.0},
        # Conservative default; tune per site: H200 HGX uses the same 8x 400G NDR / ConnectX-7 rails.
        "H200-SXM-8": {"min_busbw_gbps": 300.0},
        # Conservative default; tune per site: the Meta GCM pairwise 2x8 A100 fixture (8x 200G HDR)
        # peaks at 182.8 GB/s at 1 GiB.
        "A100-SXM-8": {"min_busbw_gbps": 150.0},
    }


def _coverage(facts: dict[str, Measurement], group: GroupContext, where: str) -> list[Finding]:
    """Did the run cover the group: its hosts (from the rank lines) and one rank per GPU."""
    hosts = group.hostnames
    findings: list[Finding] = []
    ranks, nodes = facts.get("ranks"), facts.get("nodes")
    if ranks is None or ranks.value is None:
        return [Finding(ERROR, f"no '# Rank ... device' lines: cannot tell which nodes ran{where}")]
    if nodes is None or nodes.value is None:
        why = (nodes.labels.get("missing") if nodes is not None else None) or "no hosts in the rank lines"
        findings.append(Finding(ERROR, f"{why}: cannot tell which nodes ran{where}"))
    else:
        nodes.threshold, nodes.ok = f"== {len(hosts)}", int(nodes.value) == len(hosts)
        if not nodes.ok:
            seen = facts["hosts"].text if "hosts" in facts else ""
            findings.append(Finding(ERROR, f"ran on {int(nodes.value)} node(s) ({seen}), expected {len(hosts)}{where}"))
    expected = _expected_ranks(group)
    if expected is not None:
        ranks.threshold, ranks.ok = f"== {expected}", int(ranks.value) == expected
        if not ranks.ok:
            findings.append(Finding(ERROR, f"ran {int(ranks.value)} ranks, expected {expected} (one per GPU){where}"))
    return findings


def _common_gpus(group: GroupContext) -> int | None:
    counts = {n.expected_gpus for n in group.nodes}
    return counts.pop() if len(counts) == 1 else None


def _expected_ranks(group: GroupContext) -> int | None:
    counts = [n.expected_gpus for n in group.nodes]
    return sum(c for c in counts if c is not None) if all(c is not None for c in counts) else None


def _names(hosts: list[str], limit: int = 8) -> str:
    shown = ", ".join(hosts[:limit])
    return shown + (f" and {len(hosts) - limit} more" if len(hosts) > limit else "")
