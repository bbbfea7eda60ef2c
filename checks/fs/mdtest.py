"""mdtest's summary (IOR's metadata benchmark, hpc/ior src/mdtest.c) read into measurements, and the
`mdtest` parser kind (`python -m checks parse mdtest FILE`). checks/fs/metadata.py judges them.

mdtest prints, after all iterations, a "SUMMARY rate" table: one row per operation with the Max,
Min, Mean and Std Dev of its rate over the iterations (ops/s, summed over the tasks). Layouts read:
- 1.9.x: "SUMMARY: (of N iterations)", rows "File creation     :  max min mean sd";
- 3.x (3.3.0, 3.4.0+dev): "SUMMARY rate: (of N iterations)", names padded to a " : " column;
- 4.x: "SUMMARY rate (in ops/sec): (of N iterations)", no colon, a "Directory rename" row, and
  with per-rank statistics three more columns before the per-iteration four (the last four are read).
The "SUMMARY time" table (seconds or ms/op) that -P / -T print beside it is skipped, as are the
verbose per-iteration lines above the summary and the "File create (stonewall)" row (NA cells).

Measurements (public contract):
    ops_per_s (ops/s): labels `operation` (directory_creation, directory_stat, directory_rename,
        directory_removal, file_creation, file_stat, file_read, file_removal, tree_creation,
        tree_removal) and `stat` (max, min, mean, stddev); plus `run` (0, 1, ...) when the text
        holds several summaries. A row of zeros is a phase mdtest did not run (-C, -T, -E, -r,
        -F, -D): one ops_per_s with stat `mean`, value None and labels["missing"] saying so.
    small_read_mbps (MB/s, 10^6 bytes/s): file_read's mean rate x the bytes read per file (-e,
        from mdtest's "Command line used"), label `bytes`; absent when -e was not given.
    tasks, nodes: from "launched with N total task(s) on M node(s)"; label `version`.
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass, field

from checks.core.base import EvidenceError, Measurement
from checks.core.parsers import Parsed, register_parser

RATE = "ops_per_s"
SMALL_READ = "small_read_mbps"
STATS = ("max", "min", "mean", "stddev")
OPERATIONS = (
    "directory_creation",
    "directory_stat",
    "directory_rename",
    "directory_removal",
    "file_creation",
    "file_stat",
    "file_read",
    "file_removal",
    "tree_creation",
    "tree_removal",
)
_ROW = re.compile(
    r"^\s*(?P<op>(?:Directory|File|Tree) (?:creation|stat|read|rename|removal))\s*:?\s+(?P<cells>\S.*?)\s*$"
)
_RATE_HEADER = re.compile(r"^\s*SUMMARY(?: rate)?(?: \(in ops/sec\))?\s*:")
_OTHER_HEADER = re.compile(r"^\s*SUMMARY time\b")
_END = re.compile(r"^\s*-- (?:finished|started) at ")
_LAUNCHED = re.compile(
    r"mdtest-(?P<version>\S+) was launched with (?P<tasks>\d+) total task\(s\) on (?P<nodes>\d+) node"
)
_COMMAND = re.compile(r"^\s*Command line used:\s*(?P<argv>.+?)\s*$", re.MULTILINE)
_IO500 = re.compile(r"^\s*(?:IO500 version|\[RESULT\]\s+(?:ior|mdtest)-|\[SCORE\])", re.MULTILINE)


@dataclass
class _Table:
    """One "SUMMARY rate" table: operation -> (max, min, mean, stddev)."""

    rows: dict[str, tuple[float, ...]] = field(default_factory=dict)
    per_rank: bool = False


def _number(token: str, where: str) -> float:
    """A table cell; C's "-nan"/"inf" (a phase timed at zero) stay NaN/inf so the value is flagged,
    never read as a rate; a negative rate cannot be printed by mdtest and is refused."""
    try:
        value = float(token)
    except ValueError:
        raise EvidenceError(f"mdtest {where} is {token!r}, not a number") from None
    if value < 0:
        raise EvidenceError(f"mdtest {where} is {token}: a rate cannot be negative")
    return value


def _row(line: str, table: _Table) -> tuple[str, tuple[float, ...]] | None:
    match = _ROW.match(line)
    if match is None:
        return None
    op = match.group("op").lower().replace(" ", "_")
    cells = match.group("cells").split()
    if len(cells) < len(STATS):
        raise EvidenceError(f"mdtest summary row cut short: {line.strip()[:80]!r}")
    if table.per_rank or len(cells) > len(STATS):
        cells = cells[-len(STATS) :]  # per-rank Max/Min/Mean first, then the per-iteration four
    pretty = match.group("op")
    return op, tuple(_number(c, f"{pretty} {s}") for c, s in zip(cells, STATS, strict=True))


def summary_tables(text: str) -> list[_Table]:
    """Every "SUMMARY rate" table in the text, in order."""
    tables: list[_Table] = []
    current: _Table | None = None
    for line in text.splitlines():
        if _RATE_HEADER.match(line) and not _OTHER_HEADER.match(line):
            current = _Table()
            tables.append(current)
            continue
        if _OTHER_HEADER.match(line) or _END.match(line):
            current = None
            continue
        if current is None:
            continue
        if "per Rank" in line:
            current.per_rank = True
        row = _row(line, current)
        if row is not None:
            current.rows[row[0]] = row[1]
    return tables


def read_bytes(text: str) -> int | None:
    """The bytes read per file (-e N) on mdtest's "Command line used" line, if it says."""
    match = _COMMAND.search(text)
    if match is None:
        return None
    try:
        argv = shlex.split(match.group("argv"))
    except ValueError:
        return None
    for i, arg in enumerate(argv):
        value = argv[i + 1] if arg == "-e" and i + 1 < len(argv) else (arg[2:] if arg.startswith("-e") else "")
        if value.isdigit():
            return int(value)
    return None


def _rates(table: _Table, run: str | None) -> list[Measurement]:
    out: list[Measurement] = []
    for op, values in table.rows.items():
        base = {"operation": op, **({"run": run} if run is not None else {})}
        if all(v == 0 for v in values):
            missing = "mdtest printed 0 for every statistic: the phase did not run"
            out.append(
                Measurement(name=RATE, value=None, unit="ops/s", labels={**base, "stat": "mean", "missing": missing})
            )
            continue
        out += [
            Measurement(name=RATE, value=v, unit="ops/s", labels={**base, "stat": s})
            for s, v in zip(STATS, values, strict=True)
        ]
    return out


def _small_read(table: _Table, size: int | None, run: str | None) -> list[Measurement]:
    read = table.rows.get("file_read")
    if size is None or size <= 0 or read is None or all(v == 0 for v in read):
        return []
    labels = {"bytes": str(size), "stat": "mean", **({"run": run} if run is not None else {})}
    mean = read[STATS.index("mean")]
    value = mean * size / 1e6 if math.isfinite(mean) else mean
    return [Measurement(name=SMALL_READ, value=value, unit="MB/s", labels=labels)]


def _launch(text: str) -> list[Measurement]:
    match = _LAUNCHED.search(text)
    if match is None:
        return []
    labels = {"version": match.group("version")}
    return [
        Measurement(name="tasks", value=float(match.group("tasks")), labels=dict(labels)),
        Measurement(name="nodes", value=float(match.group("nodes")), labels=dict(labels)),
    ]


def mdtest_measurements(text: str) -> list[Measurement]:
    """Every measurement of one mdtest output (the module docstring lists them)."""
    if _IO500.search(text):
        raise EvidenceError(
            "an IO500 summary, not mdtest output: its mdtest-easy/hard phases are kIOPS totals of whole "
            "IO500 phases, with no per-operation max/min/mean; parse the output of an mdtest run instead"
        )
    tables = [t for t in summary_tables(text) if t.rows]
    if not tables:
        if "SUMMARY" in text:
            raise EvidenceError("mdtest summary table has no operation rows (the run stopped early?)")
        raise EvidenceError("not mdtest output: no 'SUMMARY rate' table")
    size = read_bytes(text)
    out = _launch(text)
    for index, table in enumerate(tables):
        run = str(index) if len(tables) > 1 else None
        out += _rates(table, run) + _small_read(table, size, run)
    return out


@register_parser("mdtest")
def parse_mdtest(text: str) -> Parsed:
    return Parsed(mdtest_measurements(text))
