"""The public measurements of one nccl-tests run (checks/nccl/allreduce.py's docstring says which and why),
and the `nccl` parser. The table itself is read by checks/nccl/nccl_tests.py."""

from __future__ import annotations

from checks.core import evidence
from checks.core.base import EvidenceError, Measurement
from checks.core.parsers import Parsed, register_parser
from checks.nccl.nccl_tests import (
    NcclReport,
    collective_name,
    format_size,
    infer_collective,
    parse_report,
    parse_size,
    require_complete,
    table_problems,
    wrong_rows,
)

# Default floor for "large enough to judge bandwidth". busbw plateaus only for large messages: in
# the fixtures the 2-node H100 run reaches 298 GB/s at 1 GiB (339 at 8 GiB) and 8x A100 230 GB/s at
# 1 GiB (235 at 8 GiB), while at 32 MiB both are below 60% of their peak. 1 GiB is also the largest
# size Meta GCM's check-nccl sweeps (-e 1G), so such outputs remain judgeable.
DEFAULT_PEAK_MIN_BYTES = "1G"


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
    """The public measurements of one nccl-tests run (see checks/nccl/allreduce.py's docstring). `collective`
    names the program that ran (from its argv); the output's own "Collective test starting" line
    wins over it, and the table's numbers name it when neither does."""
    out = _peak(report, peak_min_bytes)
    out.append(Measurement(name="size_max", value=float(max(r.size for r in report.rows)), unit="B"))
    if report.avg_busbw is not None:
        out.append(Measurement(name="busbw_avg_reported", value=report.avg_busbw, unit="GB/s"))
    else:
        missing = {"missing": "no '# Avg bus bandwidth' footer"}
        out.append(Measurement(name="busbw_avg_reported", value=None, unit="GB/s", labels=missing))
    out.append(_wrong(report))
    deltas = [p.delta for r in report.rows for p in r.placements.values() if p.delta is not None]
    if deltas:  # recorded, not judged: the tool judged it against its tolerance (the summary)
        out.append(Measurement(name="error_max", value=max(deltas)))
    out += _ranks(report)
    out.append(_collective(report, collective))
    if report.nccl_version:
        out.append(Measurement(name="nccl_version", text=report.nccl_version))
    return out


def _peak(report: NcclReport, peak_min_bytes: int) -> list[Measurement]:
    """busbw, algbw and size at the best size >= `peak_min_bytes`; missing when no size got there."""
    eligible = [r for r in report.rows if r.size >= peak_min_bytes and r.best_busbw()[0] is not None]
    floor_label = {"peak_min_bytes": str(peak_min_bytes)}
    if not eligible:
        largest = max(r.size for r in report.rows)
        why = (
            f"largest size {format_size(largest)} is below peak_min_bytes ({format_size(peak_min_bytes)}): "
            "cannot judge peak bandwidth"
        )
        return [
            Measurement(name=name, value=None, unit=unit, labels={**floor_label, "missing": why})
            for name, unit in (("busbw_peak", "GB/s"), ("algbw_peak", "GB/s"), ("size_at_peak", "B"))
        ]
    peak_row = max(eligible, key=lambda r: r.best_busbw()[0] or 0.0)
    busbw, placement = peak_row.best_busbw()
    algbw = peak_row.placements[placement].algbw
    labels = {**floor_label, "size": str(peak_row.size), "placement": placement}
    return [
        Measurement(name="busbw_peak", value=busbw, unit="GB/s", labels=dict(labels)),
        Measurement(name="algbw_peak", value=algbw, unit="GB/s", labels=dict(labels)),
        Measurement(name="size_at_peak", value=float(peak_row.size), unit="B", labels=dict(labels)),
    ]


def _wrong(report: NcclReport) -> Measurement:
    """#wrong summed row by row (table_problems refused negative counts, so none can cancel
    another, and a summary that disagrees with the rows); missing when results were not validated."""
    counts = [p.wrong for r in report.rows for p in r.placements.values() if p.wrong is not None]
    deltas = [p.delta for r in report.rows for p in r.placements.values() if p.delta is not None]
    if not counts and deltas:
        return _wrong_from_summary(report)
    if not counts:
        why = "#wrong is N/A: results were not validated (run with -c 1)"
        return Measurement(name="wrong", value=None, labels={"missing": why})
    rows = wrong_rows(report)
    labels = {"rows": "; ".join(rows[:10]), "wrong_results": str(len(rows))} if rows else {}
    return Measurement(name="wrong", value=float(sum(counts)), labels=labels)


def _wrong_from_summary(report: NcclReport) -> Measurement:
    """Before 2.13 the rows print the largest deviation, not a count (checks/nccl/nccl_tests.py Placement):
    the tool's own count against its tolerance is the "Out of bounds values" summary."""
    labels = {"source": "Out of bounds values summary"}
    if report.out_of_bounds is None:
        labels["missing"] = "the rows print the largest error, not a count, and the summary is missing"
        return Measurement(name="wrong", value=None, labels=labels)
    return Measurement(name="wrong", value=float(report.out_of_bounds), labels=labels)


def _ranks(report: NcclReport) -> list[Measurement]:
    """Ranks, nodes, hosts and GPU models from the "# Rank ... device" lines. Ranks are counted by
    their numbers (the highest + 1); when some lines are left out, the hosts that ran them are
    unknown, so `nodes` is missing rather than the count of the hosts that happen to be listed."""
    if not report.ranks:
        return [Measurement(name="ranks", value=None, labels={"missing": "no '# Rank ... device' lines"})]
    count, unlisted = report.rank_count, report.ranks_unlisted
    if unlisted:
        why = f"{unlisted} of {count} ranks have no '# Rank' line (left out of the output): which hosts ran is unknown"
        ranks = Measurement(name="ranks", value=float(count), labels={"listed": str(len(report.ranks))})
        nodes = Measurement(name="nodes", value=None, labels={"missing": why, "listed": str(len(report.hosts))})
    else:
        ranks = Measurement(name="ranks", value=float(count))
        nodes = Measurement(name="nodes", value=float(len(report.hosts)))
    out = [ranks, nodes, Measurement(name="hosts", text=",".join(report.hosts))]
    models = sorted({r.model for r in report.ranks if r.model})
    if models:
        out.append(Measurement(name="gpu_models", text=",".join(models)))
    return out


def _collective(report: NcclReport, collective: str) -> Measurement:
    inferred = infer_collective(report)
    name = report.named or collective or inferred
    labels = {} if name else {"missing": "the output does not name its collective"}
    if inferred and inferred != name:
        labels["table"] = inferred  # the numbers name another collective than the program did
    return Measurement(name="collective", text=name, labels=labels)


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
