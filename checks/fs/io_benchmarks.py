"""Parsers of the filesystem benchmarks Kiln reads but does not run: IOR and elbencho.

`python -m checks parse ior|elbencho FILE` (checks/fs/throughput.py runs fio; a site that benchmarks
with IOR or elbencho feeds their captured outputs here). Measurements:
    ior: write_bw_max / read_bw_max (MiB/s), and write_bw_mean / read_bw_mean (MiB/s, the summary
         table's Mean(MiB) over repetitions) when IOR printed its "Summary of all tests".
    elbencho: throughput (MiB/s, LAST DONE = whole phase) and throughput_first_done, label `phase`
         (WRITE/READ/...) and `run` (n-th block of that phase in a sweep); iops likewise.
"""

from __future__ import annotations

import math
import re

from checks.core.base import EvidenceError, Measurement
from checks.core.parsers import Parsed, register_parser

# --- IOR ---------------------------------------------------------------------------------------

_IOR_MAX = re.compile(r"^Max (Write|Read):\s+(\S+)\s+MiB/sec", re.MULTILINE)
_IOR_SUMMARY = re.compile(r"^Summary of all tests:\s*$")
_IOR_RESULTS_HEADER = re.compile(r"^access\s+bw\(MiB/s\)")
_IOR_OPS = ("write", "read")


def _ior_number(token: str, what: str) -> float:
    """An IOR table number; IOR prints C's "-nan"/"inf" for a statistic over iterations that never
    ran (hpc/ior issue 542): kept as NaN/inf so the value is flagged, never read as a rate."""
    try:
        return float(token)
    except ValueError:
        raise EvidenceError(f"IOR {what} is {token!r}, not a number") from None


def _ior_tables(text: str) -> tuple[dict[str, list[dict[str, float]]], dict[str, list[float]]]:
    """The "Summary of all tests" rows (op -> [{column: value}], by the header's column names) and
    the per-iteration "Results" rows (op -> [bw MiB/s])."""
    summary: dict[str, list[dict[str, float]]] = {}
    results: dict[str, list[float]] = {}
    section, columns = "", list[str]()
    for line in text.splitlines():
        if _IOR_SUMMARY.match(line):
            section, columns = "summary", []
            continue
        if _IOR_RESULTS_HEADER.match(line):
            section = "results"
            continue
        words = line.split()
        if not words:
            continue
        if section == "summary" and words[0] == "Operation":
            columns = words
            continue
        if words[0] not in _IOR_OPS or len(words) < 2:
            continue
        if section == "summary" and columns:
            wanted = [c for c in ("Max(MiB)", "Min(MiB)", "Mean(MiB)") if c in columns]
            if len(words) < len(columns):
                raise EvidenceError(f"IOR summary row cut short: {line.strip()[:80]!r}")
            row: dict[str, float] = {c: _ior_number(words[columns.index(c)], f"summary {words[0]} {c}") for c in wanted}
            summary.setdefault(words[0], []).append(row)
        elif section == "results":
            results.setdefault(words[0], []).append(_ior_number(words[1], f"{words[0]} bw(MiB/s)"))
    return summary, results


def _peak(values: list[float]) -> float:
    """The largest value, or the first non-finite one: max() over NaN depends on the order."""
    bad = [v for v in values if not math.isfinite(v)]
    return bad[0] if bad else max(values)


@register_parser("ior")
def parse_ior(text: str) -> Parsed:
    """IOR 3.0-4.x stdout -> write_bw_max / read_bw_max (MiB/s) and, from the summary table,
    write_bw_mean / read_bw_mean. Sources, best first: the "Max Write/Read" lines (IOR < 3.3, or
    -v), the "Summary of all tests" table (its columns found by name: 3.0 has no OPs columns, 3.3+
    adds Stonewall ones), the per-iteration "Results" rows. An output that holds only the summary
    table (what a harness keeps, e.g. the JUPITER benchmark suite) parses."""
    summary, results = _ior_tables(text)
    maxima: dict[str, list[float]] = {}
    for op, value in _IOR_MAX.findall(text):
        maxima.setdefault(op.lower(), []).append(_ior_number(value, f"Max {op}"))
    if not maxima and not summary and not results and "IOR-" not in text:
        raise EvidenceError("not IOR output (no 'IOR-' banner, 'Max Write/Read' line or 'Summary of all tests' table)")
    version = re.search(r"IOR-([\d.]+\w*)", text)
    base = {"ior_version": version.group(1)} if version else {}
    out: list[Measurement] = []
    for op in _IOR_OPS:
        rows = summary.get(op, [])
        if op in maxima:
            peak, source = _peak(maxima[op]), "summary"
        elif rows and all("Max(MiB)" in r for r in rows):
            peak, source = _peak([r["Max(MiB)"] for r in rows]), "summary table"
        elif op in results:
            peak, source = _peak(results[op]), "table"
        else:
            continue
        out.append(Measurement(name=f"{op}_bw_max", value=peak, unit="MiB/s", labels={"source": source, **base}))
        means = [r["Mean(MiB)"] for r in rows if "Mean(MiB)" in r]
        if means:
            labels = {"source": "summary table", "tests": str(len(means)), **base}
            out.append(Measurement(name=f"{op}_bw_mean", value=_peak(means), unit="MiB/s", labels=labels))
    if not out:
        raise EvidenceError("IOR output has no write/read bandwidth (run aborted?)")
    return Parsed(out)


# --- elbencho ------------------------------------------------------------------------------------

_ELB_RESULT = re.compile(
    r"^(?P<phase>[A-Z][A-Z0-9_]*)?\s*(?P<kind>Elapsed time|Elapsed ms|IOPS|Throughput MiB/s|Total MiB)\s*:"
    r"\s*(?P<first>\S+)\s+(?P<last>\S+)\s*$"
)


@register_parser("elbencho")
def parse_elbencho(text: str) -> Parsed:
    """elbencho result tables: a phase line (WRITE/READ/...) and its indented continuation rows."""
    out: list[Measurement] = []
    phase = ""
    runs: dict[str, int] = {}
    for line in text.splitlines():
        m = _ELB_RESULT.match(line.rstrip())
        if not m:
            continue
        if m.group("phase"):
            phase = m.group("phase")
            runs[phase] = runs.get(phase, -1) + 1
        if not phase:
            continue
        labels = {"phase": phase, "run": str(runs[phase])}
        kind = m.group("kind")
        if kind == "Throughput MiB/s":
            out.append(Measurement(name="throughput", value=float(m.group("last")), unit="MiB/s", labels=labels))
            first = float(m.group("first"))
            out.append(Measurement(name="throughput_first_done", value=first, unit="MiB/s", labels=dict(labels)))
        elif kind == "IOPS":
            out.append(Measurement(name="iops", value=float(m.group("last")), unit="IOPS", labels=dict(labels)))
    if not any(m.name == "throughput" for m in out):
        raise EvidenceError("elbencho output has no 'Throughput MiB/s' result rows")
    return Parsed(out)
