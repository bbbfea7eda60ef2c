"""NCCL collectives with nccl-tests (`all_reduce_perf`): one node, and across nodes from a launcher.

Evidence is the nccl-tests table, read by checks/nccl_tests.py (every 2.x format, `NCCL INFO` /
`NCCL version` lines mixed in): one row per message size with out-of-place and in-place
time / algbw / busbw / #wrong, the "# Using devices" rank lines, and the closing summary.

No evidence, no pass:
- no table, a crashed run ("Test NCCL failure ...") or a launcher error (Open MPI's "not enough
  slots") raises EvidenceError naming the error;
- no closing summary ("# Out of bounds values", "# Avg bus bandwidth"): the run stopped early,
  `error` "output incomplete";
- a cell that cannot exist (busbw NaN, inf or beyond the bandwidth bound, a negative or
  fractional #wrong in any row), an unreadable row, or a message size listed twice: `error`
  "impossible evidence: ..." naming the row (checks/evidence.py rules, applied per row);
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
from dataclasses import dataclass
from typing import Any, ClassVar

from checks import evidence
from checks.base import (
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
from checks.nccl_pairs import localise_slow_pairs
from checks.nccl_tests import (
    ALGBW_RULE,
    FAILURE_LINE,
    NcclReport,
    busbw_series,
    collective_name,
    format_size,
    infer_collective,
    launcher_error,
    parse_report,
    parse_size,
    require_complete,
    table_problems,
    wrong_rows,
)
from checks.parsers import Parsed, register_parser
from checks.presentation import (
    CertificateChart,
    KeyMetric,
    OutlierMetric,
    Presentation,
    PromMetric,
    TrendRule,
    highest,
)

__all__ = ["FAILURE_LINE", "format_size", "localise_slow_pairs", "parse_nccl", "parse_report", "parse_size"]

# Default floor for "large enough to judge bandwidth". busbw plateaus only for large messages: in
# the fixtures the 2-node H100 run reaches 298 GB/s at 1 GiB (339 at 8 GiB) and 8x A100 230 GB/s at
# 1 GiB (235 at 8 GiB), while at 32 MiB both are below 60% of their peak. 1 GiB is also the largest
# size Meta GCM's check-nccl sweeps (-e 1G), so such outputs remain judgeable.
DEFAULT_PEAK_MIN_BYTES = "1G"
# The peak floor travels to parse() in the command's environment (parse sees only outputs); the
# tool ignores it. Outputs without it (a captured file) use the default.
PEAK_ENV = "KILN_NCCL_PEAK_MIN_BYTES"
NCCL_LABEL = "all_reduce_perf"
HOSTFILE_LABEL = "hostfile"
# Writes stdin to the path in $1, readable only by us. Fixed text: the path and content are data.
WRITE_HOSTFILE_SCRIPT = 'umask 077 && cat > "$1"'


def _gbps(value: float) -> str:
    return f"{value:.1f}"


def collective_of(argv: tuple[str, ...]) -> str:
    """'all_reduce' from an argv naming .../all_reduce_perf (directly or under mpirun/srun)."""
    for arg in argv:
        name = collective_name(arg)
        if name:
            return name
    return ""


def report_problems(report: NcclReport) -> None:
    """EvidenceError for a run that did not finish or holds impossible cells (nccl_tests.py)."""
    require_complete(report)
    found = table_problems(report)
    if found:
        raise EvidenceError(evidence.reason(found))


def measurements_from(report: NcclReport, *, peak_min_bytes: int, collective: str = "") -> list[Measurement]:
    """The public measurements of one nccl-tests run (see the module docstring). `collective`
    names the program that ran (from its argv); the output's own "Collective test starting" line
    wins over it, and the table's numbers name it when neither does."""
    out: list[Measurement] = []
    largest = max(r.size for r in report.rows)
    eligible = [r for r in report.rows if r.size >= peak_min_bytes and r.best_busbw()[0] is not None]
    floor_label = {"peak_min_bytes": str(peak_min_bytes)}
    if eligible:
        peak_row = max(eligible, key=lambda r: r.best_busbw()[0] or 0.0)
        busbw, placement = peak_row.best_busbw()
        algbw = peak_row.placements[placement].algbw
        labels = {**floor_label, "size": str(peak_row.size), "placement": placement}
        out += [
            Measurement(name="busbw_peak", value=busbw, unit="GB/s", labels=dict(labels)),
            Measurement(name="algbw_peak", value=algbw, unit="GB/s", labels=dict(labels)),
            Measurement(name="size_at_peak", value=float(peak_row.size), unit="B", labels=dict(labels)),
        ]
    else:
        why = (
            f"largest size {format_size(largest)} is below peak_min_bytes ({format_size(peak_min_bytes)}): "
            "cannot judge peak bandwidth"
        )
        for name, unit in (("busbw_peak", "GB/s"), ("algbw_peak", "GB/s"), ("size_at_peak", "B")):
            out.append(Measurement(name=name, value=None, unit=unit, labels={**floor_label, "missing": why}))
    out.append(Measurement(name="size_max", value=float(largest), unit="B"))

    if report.avg_busbw is not None:
        out.append(Measurement(name="busbw_avg_reported", value=report.avg_busbw, unit="GB/s"))
    else:
        missing = {"missing": "no '# Avg bus bandwidth' footer"}
        out.append(Measurement(name="busbw_avg_reported", value=None, unit="GB/s", labels=missing))

    counts = [p.wrong for r in report.rows for p in r.placements.values() if p.wrong is not None]
    if counts:
        # Row by row: table_problems refused negative counts (none can cancel another) and a
        # summary that disagrees with the rows.
        wrong = sum(counts)
        rows = wrong_rows(report)
        labels = {"rows": "; ".join(rows[:10]), "wrong_results": str(len(rows))} if rows else {}
        out.append(Measurement(name="wrong", value=float(wrong), labels=labels))
    else:
        why = "#wrong is N/A: results were not validated (run with -c 1)"
        out.append(Measurement(name="wrong", value=None, labels={"missing": why}))

    if report.ranks:
        out.append(Measurement(name="ranks", value=float(len(report.ranks))))
        out.append(Measurement(name="nodes", value=float(len(report.hosts))))
        out.append(Measurement(name="hosts", text=",".join(report.hosts)))
        models = sorted({r.model for r in report.ranks if r.model})
        if models:
            out.append(Measurement(name="gpu_models", text=",".join(models)))
    else:
        out.append(Measurement(name="ranks", value=None, labels={"missing": "no '# Rank ... device' lines"}))
    inferred = infer_collective(report)
    name = report.named or collective or inferred
    labels = {} if name else {"missing": "the output does not name its collective"}
    if inferred and inferred != name:
        labels["table"] = inferred  # the numbers name another collective than the program did
    out.append(Measurement(name="collective", text=name, labels=labels))
    if report.nccl_version:
        out.append(Measurement(name="nccl_version", text=report.nccl_version))
    return out


@register_parser("nccl")
def parse_nccl(text: str) -> Parsed:
    """`python -m checks parse nccl FILE`: one complete nccl-tests output of any collective
    (all_reduce_perf, all_gather_perf, broadcast_perf...), peak over sizes >= 1 GiB. A crashed,
    unfinished or impossible output raises EvidenceError (the CLI exits 2 with the reason)."""
    report = parse_report(text)
    if report.failures:
        raise EvidenceError(f"the test crashed: {report.failures[0][:300]}")
    report_problems(report)
    measurements = measurements_from(report, peak_min_bytes=parse_size(DEFAULT_PEAK_MIN_BYTES))
    return Parsed(measurements=measurements, warnings=list(report.warnings))


# Checks
# ---------------------------------------------------------------------------------------------


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
    # Bandwidth is judged only on sizes >= this (see DEFAULT_PEAK_MIN_BYTES above).
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
    """What both NCCL checks share: parse, series, failure description, judging one report."""

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
            raise EvidenceError(f"{NCCL_LABEL} exited {out.exit_code}: {self.describe_failure(out)}")
        assert report is not None  # exit 0 parsed, or exit 1 with a complete FAILED run
        if report.failures:
            raise EvidenceError(f"{NCCL_LABEL} crashed: {report.failures[0][:300]}")
        report_problems(report)  # "output incomplete" / "impossible evidence: ..." -> error
        collective = collective_of(out.command.argv)
        return measurements_from(report, peak_min_bytes=_peak_floor(outputs), collective=collective)

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

    def judge(self, measurements: list[Measurement], t: NcclThresholds, *, where: str) -> list[Finding]:
        """Findings on one report: collective, correctness, peak bandwidth. `where` ends reasons
        on a group (" across gpu01, gpu02"); '' on one node."""
        facts = {m.name: m for m in measurements}
        findings: list[Finding] = []
        collective = facts.get("collective")
        names = [collective.labels.get("table", ""), collective.text] if collective else []
        other = next((n for n in names if n and n != "all_reduce"), "")
        if other:
            findings.append(Finding(ERROR, f"the output is from {other}_perf, not all_reduce_perf"))

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
            reason = f"busbw {_gbps(busbw.value)} GB/s at {size}: not judged (no min_busbw_gbps floor set){where}"
            findings.append(Finding(WARN, reason))
            return findings
        busbw.threshold, busbw.ok = f">= {t.min_busbw_gbps:g}", busbw.value >= t.min_busbw_gbps
        if busbw.ok:
            reason = f"busbw {_gbps(busbw.value)} GB/s at {size} (floor {t.min_busbw_gbps:g} GB/s){where}"
            findings.append(Finding(PASS, reason))
        else:
            reason = f"busbw {_gbps(busbw.value)} GB/s at {size} below the {t.min_busbw_gbps:g} GB/s floor{where}"
            findings.append(Finding(FAIL, reason))
        return findings


# One history chart for NCCL on one node and across nodes (both kinds store busbw_peak).
BUSBW_KEY_METRIC = KeyMetric(
    "busbw", "NCCL bus bandwidth (peak)", "busbw_peak", "GB/s", group_value_on_node=True, fleet_default=True
)


@register
class NcclAllReduce(_NcclBase):
    key: ClassVar[str] = "nccl_allreduce"
    name: ClassVar[str] = "NCCL all-reduce (one node)"
    description: ClassVar[str] = (
        "nccl-tests all_reduce_perf over the node's GPUs (NVLink/NVSwitch): peak bus bandwidth on "
        "large messages and zero wrong results."
    )
    Params: ClassVar[type] = NcclParams
    Thresholds: ClassVar[type] = NcclThresholds
    presentation: ClassVar[Presentation] = Presentation(
        chart="nccl",
        rank=10,
        key_metrics=(BUSBW_KEY_METRIC,),
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
        return [Command(argv=argv, timeout=float(p.timeout_s), env=env, label=NCCL_LABEL)]

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


@dataclass
class NcclMultiParams:
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


_HOST_FORBIDDEN = re.compile(r"[\s#,=]")
_TAG_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


def _check_hostname(host: str) -> None:
    # A hostfile line is "HOST slots=N" and srun takes "-w a,b": whitespace, '#', ',' or '=' in a
    # name would change what the launcher reads, and a leading '-' would read as an option.
    if not host or _HOST_FORBIDDEN.search(host) or host.startswith("-"):
        raise ParamsError(f"hostname {host!r} cannot be passed to an MPI hostfile or a Slurm node list")


def hostfile_path(tag: str) -> str:
    return f"/tmp/kiln-nccl-{_TAG_SAFE.sub('_', tag)[:80]}.hostfile"


@register
class NcclAllReduceMulti(GroupCheck, _NcclBase):
    key: ClassVar[str] = "nccl_allreduce_multi"
    name: ClassVar[str] = "NCCL all-reduce (across nodes)"
    description: ClassVar[str] = (
        "nccl-tests all_reduce_perf across nodes from a launcher (mpirun with a hostfile, or srun), "
        "one GPU per rank: inter-node bus bandwidth and zero wrong results; slow pairs localise a node."
    )
    Params: ClassVar[type] = NcclMultiParams
    Thresholds: ClassVar[type] = NcclThresholds
    pairwise: ClassVar[bool] = True
    presentation: ClassVar[Presentation] = Presentation(chart="nccl", rank=11, key_metrics=(BUSBW_KEY_METRIC,))
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
            return [Command(argv=argv, timeout=float(p.timeout_s), env=env, label=NCCL_LABEL)]
        path = hostfile_path(group.tag)
        content = "".join(f"{host} slots={gpus}\n" for host in hosts)
        write = Command(
            argv=("sh", "-c", WRITE_HOSTFILE_SCRIPT, "sh", path), timeout=30.0, stdin=content, label=HOSTFILE_LABEL
        )
        run = ("mpirun", "--hostfile", path, "-np", str(len(hosts) * gpus), "--map-by", f"ppr:{gpus}:node", *extra)
        return [write, Command(argv=(*run, *test), timeout=float(p.timeout_s), env=env, label=NCCL_LABEL)]

    def timeout(self, params: Any) -> float:
        return sum(c.timeout for c in self.stand_in_commands(params))

    def evaluate_group(self, measurements: list[Measurement], thresholds: Any, group: GroupContext) -> GroupVerdict:
        t: NcclThresholds = thresholds
        hosts = group.hostnames
        where = f" across {_names(hosts)}"
        findings: list[Finding] = []
        facts = {m.name: m for m in measurements}
        ranks, nodes = facts.get("ranks"), facts.get("nodes")
        if ranks is None or ranks.value is None or nodes is None or nodes.value is None:
            findings.append(Finding(ERROR, f"no '# Rank ... device' lines: cannot tell which nodes ran{where}"))
        else:
            nodes.threshold, nodes.ok = f"== {len(hosts)}", int(nodes.value) == len(hosts)
            if not nodes.ok:
                seen = facts["hosts"].text if "hosts" in facts else ""
                reason = f"ran on {int(nodes.value)} node(s) ({seen}), expected {len(hosts)}{where}"
                findings.append(Finding(ERROR, reason))
            expected = _expected_ranks(group)
            if expected is not None:
                ranks.threshold, ranks.ok = f"== {expected}", int(ranks.value) == expected
                if not ranks.ok:
                    reason = f"ran {int(ranks.value)} ranks, expected {expected} (one per GPU){where}"
                    findings.append(Finding(ERROR, reason))
        findings += self.judge(measurements, t, where=where)
        verdict = Verdict.from_findings(findings, pass_reason=_pass_reason(measurements, t) + where)
        # One run over the whole group cannot say which node is slow: node_verdicts stays empty and
        # the executor's pairwise runs (localise) name the node.
        return GroupVerdict(status=verdict.status, reason=verdict.reason, findings=verdict.findings)

    def localise(self, pair_verdicts: dict[tuple[str, str], Verdict]) -> GroupVerdict:
        return localise_slow_pairs(pair_verdicts)


def _common_gpus(group: GroupContext) -> int | None:
    counts = {n.expected_gpus for n in group.nodes}
    return counts.pop() if len(counts) == 1 else None


def _expected_ranks(group: GroupContext) -> int | None:
    counts = [n.expected_gpus for n in group.nodes]
    return sum(c for c in counts if c is not None) if all(c is not None for c in counts) else None


def _names(hosts: list[str], limit: int = 8) -> str:
    shown = ", ".join(hosts[:limit])
    return shown + (f" and {len(hosts) - limit} more" if len(hosts) > limit else "")
