"""Reading nccl-tests output (all_reduce_perf, all_gather_perf, broadcast_perf, ...).

Evidence is the result table: one row per message size with out-of-place and in-place time /
algbw / busbw / #wrong, the "# Using devices" rank lines, and the closing summary. Every 2.x
format is read, by the column names of the table's header:

- nccl-tests 2.13 and later print `size count type redop root` before the timings for every
  collective (`redop` "none" and `root` -1 where they do not apply); 2.15 and later also open with
  "# nccl-tests version ..." and "# Collective test starting: NAME_perf", and close with
  "# Collective test concluded: NAME_perf";
- before 2.13 the leading columns depend on the collective (all_gather / sendrecv:
  `size count type`; broadcast / scatter / gather: `+ root`; all_reduce / reduce_scatter /
  alltoall: `+ redop`, left blank by alltoall, so its rows are one token short; reduce:
  `+ redop root`), the last column of each placement is `error` (older versions print there the
  largest deviation as a float, `0e+00`, judged by the tool's own summary; see `Placement`),
  rank lines have no `Group`, and the footer may lack its leading '#'.

Ranks are counted by their numbers (0..n-1), not by their lines: a shared output often elides the
middle of a long "# Rank" list with a `...` line (`NcclReport.rank_count`).

What a complete run prints last is its summary, "# Out of bounds values : N OK|FAILED" and
"# Avg bus bandwidth : X" (src/util.cu writeResultFooter): without both, the run stopped early
and `require_complete` refuses it ("output incomplete").

`table_problems` holds the table to checks/core/evidence.py's rules row by row, before any peak is
taken: times, algbw and busbw finite and within the bandwidth bound, #wrong a non-negative
integer in every row (so 7 in one row and -7 in another cannot net to 0), and no message size
listed twice or out of order within one sweep (two outputs glued together, or an edited one).
Repeated 0-byte rows are the exception: nccl-tests rounds a size below one element per rank
down to 0, and prints each such row (tests/fixtures/nccl-tests, the old-format fixtures).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from checks.core import evidence
from checks.core.base import EvidenceError, Series

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB
# nccl-tests' own size parser (src/common.cu parsesize) reads K/M/G as powers of 1024.
_SUFFIX = {"": 1, "K": KIB, "M": MIB, "G": GIB, "T": 1024 * GIB}
_SIZE = re.compile(r"^\s*(\d+)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)

# A crashed test: nccl-tests' NCCLCHECK/CUDACHECK print "Test NCCL failure common.cu:..." and exit.
FAILURE_LINE = re.compile(r"(Test (?:NCCL |CUDA )?failure.*|terminate called after .*)")
# NCCL WARN lines also appear in healthy runs; they only explain a run that already failed.
_WARN_LINE = re.compile(r"(NCCL WARN .*)")
_SLOTS = re.compile(r"There are not enough slots available in the system to satisfy the (\d+)\s+slots")

INCOMPLETE = (
    "output incomplete: no closing summary ('# Out of bounds values' and '# Avg bus bandwidth' lines): "
    "the run stopped before every size was measured"
)


def parse_size(text: str | int) -> int:
    """'8G' -> 8589934592, '512M', '1K', '64', 64 -> bytes (K/M/G/T = powers of 1024, like nccl-tests)."""
    if isinstance(text, int):
        return text
    match = _SIZE.match(str(text))
    if not match:
        raise ValueError(f"not a size: {text!r} (expected bytes like 64, 512K, 1M or 8G)")
    return int(match.group(1)) * _SUFFIX[match.group(2).upper()]


def format_size(size: float) -> str:
    """8589934592 -> '8 GiB', 1048576 -> '1 MiB', 1536 -> '1.5 KiB', 8 -> '8 B'."""
    for unit, scale in (("TiB", 1024 * GIB), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if size >= scale:
            return f"{size / scale:g} {unit}"
    return f"{size:g} B"


@dataclass
class Placement:
    """One half of a row: out-of-place or in-place."""

    time_us: float | None
    algbw: float | None
    busbw: float | None
    wrong: int | None  # None: N/A (validation disabled), or a format that prints the error, not a count
    # Before 2.13 the `error` column is the largest deviation found (src/common.cu: "%5.0le" of
    # maxDelta, e.g. `0e+00`, `2e-06`), not a count: the tool judges it against its own tolerance,
    # and its verdict is the "Out of bounds values" summary. Some versions star a result past it.
    delta: float | None = None


@dataclass
class Row:
    size: int
    count: int
    dtype: str
    redop: str  # "" when the format has no redop column
    root: int | None  # None when the format has no root column
    placements: dict[str, Placement]  # "out-of-place" / "in-place"

    def best_busbw(self) -> tuple[float | None, str]:
        best: tuple[float | None, str] = (None, "")
        for name, p in self.placements.items():
            if p.busbw is not None and (best[0] is None or p.busbw > best[0]):
                best = (p.busbw, name)
        return best


@dataclass
class RankLine:
    rank: int
    host: str
    device: int
    model: str


@dataclass(frozen=True)
class Layout:
    """Where a row's fields are, from the table header: leading column name -> index, and per
    placement the indices of its time / algbw / busbw / #wrong."""

    leading: dict[str, int]
    placements: tuple[tuple[str, dict[str, int]], ...]
    # The last column is named `error` (before 2.13: the largest deviation, a float) rather than
    # `#wrong` (a count): only then is a float in it read.
    deviation: bool = False

    @property
    def width(self) -> int:
        return 1 + max([*self.leading.values(), *(i for _, cols in self.placements for i in cols.values())])


_TIME = ("time", "cputime")
_WRONG = ("#wrong", "error")
_PLACEMENT_NAMES = ("out-of-place", "in-place")


def layout_of(header: list[str]) -> Layout | None:
    """The layout of a header like `size count type redop root time algbw busbw #wrong time ...`."""
    starts = [i for i, name in enumerate(header) if name in _TIME]
    if not starts or header[:2] != ["size", "count"]:
        return None
    leading = {name: i for i, name in enumerate(header[: starts[0]])}
    placements = []
    for name, start in zip(_PLACEMENT_NAMES, starts, strict=False):
        end = starts[starts.index(start) + 1] if start != starts[-1] else len(header)
        cols = {"time": start}
        for i in range(start + 1, end):
            key = "wrong" if header[i] in _WRONG else header[i]
            if key in ("algbw", "busbw", "wrong"):
                cols.setdefault(key, i)
        if set(cols) != {"time", "algbw", "busbw", "wrong"}:
            return None
        placements.append((name, cols))
    return Layout(leading=leading, placements=tuple(placements), deviation="error" in header)


def _guess_layout(tokens: list[str]) -> Layout:
    """No header seen: the new format has 5 leading columns (redop, root), the old all_reduce 4."""
    names = (
        ["size", "count", "type", "redop", "root"] if (len(tokens) - 5) % 4 == 0 else ["size", "count", "type", "redop"]
    )
    lead = len(names)
    groups = tuple(
        (name, {"time": lead + 4 * k, "algbw": lead + 4 * k + 1, "busbw": lead + 4 * k + 2, "wrong": lead + 4 * k + 3})
        for k, name in enumerate(_PLACEMENT_NAMES)
        if lead + 4 * k + 3 < len(tokens)
    )
    return Layout(leading={n: i for i, n in enumerate(names)}, placements=groups)


@dataclass
class NcclReport:
    rows: list[Row] = field(default_factory=list)
    ranks: list[RankLine] = field(default_factory=list)
    settings: dict[str, str] = field(default_factory=dict)  # nThread, nGpus, minBytes, ... from line 1
    nccl_version: str = ""
    named: str = ""  # "all_gather" from "# Collective test starting: all_gather_perf" (2.15+)
    layout: Layout | None = None
    out_of_bounds: int | None = None
    out_of_bounds_failed: bool = False
    avg_busbw: float | None = None
    avg_failed: bool = False
    failures: list[str] = field(default_factory=list)  # "Test NCCL failure ..." lines
    unreadable: list[str] = field(default_factory=list)  # rows that look like table rows but do not parse
    warnings: list[str] = field(default_factory=list)
    ranks_elided: bool = False  # a `...` line among the rank lines

    @property
    def hosts(self) -> list[str]:
        seen: list[str] = []
        for r in self.ranks:
            if r.host not in seen:
                seen.append(r.host)
        return seen

    @property
    def rank_count(self) -> int:
        """How many ranks ran: one '# Rank' line each. Where an edited output says it left lines
        out (a `...` in place of ranks 2-125), the highest one listed counts them: nccl-tests numbers
        ranks 0..n-1 (src/common.cu: rank = proc*nThreads*nGpus + i). Without that mark a missing
        line is not inferred: a garbled rank line must not count as a rank that ran."""
        if self.ranks_elided:
            return max((r.rank for r in self.ranks), default=-1) + 1
        return len(self.ranks)

    @property
    def ranks_unlisted(self) -> int:
        """Rank numbers below the highest with no '# Rank' line: which hosts ran them is unknown."""
        return self.rank_count - len({r.rank for r in self.ranks})

    @property
    def complete(self) -> bool:
        """The run printed its closing summary: every size ran."""
        return self.out_of_bounds is not None and self.avg_busbw is not None


_RANK = re.compile(
    r"^#\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)\s+\[[^\]]*\]\s*(.*?)\s*$"
)
# Old nccl-tests print the footer without the leading '#'.
_OOB = re.compile(r"^#?\s*Out of bounds values\s*:\s*(-?\d+)\s*(\w*)")
_AVG = re.compile(r"^#?\s*Avg bus bandwidth\s*:\s*(-?nan|[-+]?inf|[-+0-9.eE]+)\s*(\w*)", re.IGNORECASE)
_VERSION = re.compile(r"NCCL version\s+(\S+)")
_SETTING = re.compile(r"(\w+):? (\d+)")
_NAMED = re.compile(r"^#\s*Collective test (?:starting|concluded):\s*(\S+)")
_NUMBER = re.compile(r"^[-+]?\d*\.?\d+(?:[eE][-+]?\d+)?$")


def collective_name(program: str) -> str:
    """'all_gather' from '/opt/nccl-tests/build/all_gather_perf' or 'all_gather_perf_mpi'."""
    base = program.rsplit("/", 1)[-1]
    for suffix in ("_perf_mpi", "_perf"):
        if base.endswith(suffix) and len(base) > len(suffix):
            return base[: -len(suffix)]
    return ""


def _number(token: str) -> float | None:
    return None if token.upper() == "N/A" else float(token)


def _wrong(token: str, deviation: bool) -> tuple[int | None, float | None]:
    """(#wrong, largest error) of one `#wrong` / `error` cell: '0' -> (0, None); in an `error` column
    '2e-06' -> (None, 2e-06) (the old format's deviation, judged by the summary) and '1e+00*' -> (1, 1.0)
    (starred: the tool counted this result wrong); 'N/A' -> (None, None). ValueError otherwise."""
    if token.upper() == "N/A":
        return None, None
    if token.lstrip("+-").isdigit() or not deviation:
        return int(token), None
    starred = token.endswith("*")
    delta = float(token.removesuffix("*"))
    return (1 if starred else None), delta


def _openmpi_error(text: str) -> str:
    """The first paragraph of an Open MPI banner ("-----" lines), joined into one line."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith("-----") and i + 1 < len(lines) and lines[i + 1].strip():
            para: list[str] = []
            for nxt in lines[i + 1 :]:
                if not nxt.strip() or nxt.strip().startswith("-----"):
                    break
                para.append(nxt.strip())
            if para:
                return " ".join(para)
    return ""


def launcher_error(text: str) -> str:
    """A one-line diagnosis of a failed launch or a crashed test, or '' when none is visible."""
    slots = _SLOTS.search(text)
    if slots:
        program = ""
        lines = text.splitlines()
        for i, line in enumerate(lines):
            if "slots that were requested by the application" in line:
                rest = [x.strip() for x in lines[i + 1 : i + 4] if x.strip()]
                program = rest[0] if rest else ""
                break
        where = f": {program}" if program else ""
        return (
            f"mpirun: There are not enough slots available in the system to satisfy the {slots.group(1)} "
            f"slots that were requested by the application{where}"
        )
    for pattern in (FAILURE_LINE, _WARN_LINE):
        found = [m.group(1).strip() for m in map(pattern.search, text.splitlines()) if m]
        if found:
            return found[0][:300]
    banner = _openmpi_error(text)
    if banner:
        return f"mpirun: {banner[:300]}"
    return ""


def parse_report(text: str) -> NcclReport:
    """Read one nccl-tests output. Raises EvidenceError when it holds no result table."""
    report = NcclReport()
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if m := _OOB.match(line):
            report.out_of_bounds = int(m.group(1))
            report.out_of_bounds_failed = m.group(2).upper() == "FAILED"
            continue
        if m := _AVG.match(line):
            report.avg_busbw = float(m.group(1))
            # NCCL_TESTS_MIN_BW set on the node: the tool judged the average itself (and exits 1).
            report.avg_failed = m.group(2).upper() == "FAILED"
            continue
        if line.lstrip("#").strip() == "..." and report.ranks and not report.rows:
            report.ranks_elided = True  # an edited output: rank lines left out in the middle
            continue
        if line.startswith("#"):
            _header_line(report, line)
            continue
        if m := _VERSION.search(line):
            report.nccl_version = m.group(1)
            continue
        if failure := FAILURE_LINE.search(line):
            report.failures.append(failure.group(1).strip())
            continue
        tokens = line.split()
        if len(tokens) < 8 or not (tokens[0].isdigit() and tokens[1].isdigit()):
            continue  # NCCL INFO lines, launcher chatter
        row = _row(tokens, report.layout or _guess_layout(tokens))
        if row is None:
            report.unreadable.append(line[:120])
            continue
        report.rows.append(row)
    if not report.rows:
        why = launcher_error(text)
        if why:
            raise EvidenceError(f"no nccl-tests result table: {why}")
        if report.unreadable:
            raise EvidenceError(f"no readable nccl-tests result row: {report.unreadable[0]!r}")
        raise EvidenceError("no nccl-tests result table in the output (no size/busbw rows)")
    if not report.ranks:
        report.warnings.append("no '# Rank ... device' lines: the GPUs that ran are unknown")
    return report


def _header_line(report: NcclReport, line: str) -> None:
    if m := _RANK.match(line):
        report.ranks.append(RankLine(int(m.group(1)), m.group(2), int(m.group(3)), m.group(4)))
    elif m := _NAMED.match(line):
        report.named = report.named or collective_name(m.group(1))
    elif line.startswith("# nThread"):
        report.settings = dict(_SETTING.findall(line[1:]))
    else:
        cols = line.lstrip("#").split()
        if "size" in cols and "count" in cols and any(t in cols for t in _TIME):
            report.layout = layout_of(cols) or report.layout


def _row(tokens: list[str], layout: Layout) -> Row | None:
    lead = layout.leading
    blank = lead.get("redop")
    if blank is not None and "root" not in lead and len(tokens) == layout.width - 1 and _NUMBER.match(tokens[blank]):
        # Before 2.13 alltoall prints "" in its redop column (src/alltoall.cu: TimeTest(..., "", -1)).
        tokens = [*tokens[:blank], "", *tokens[blank:]]
    if len(tokens) < layout.width or not layout.placements:
        return None
    try:
        placements = {
            name: Placement(
                _number(tokens[cols["time"]]),
                _number(tokens[cols["algbw"]]),
                _number(tokens[cols["busbw"]]),
                *_wrong(tokens[cols["wrong"]], layout.deviation),
            )
            for name, cols in layout.placements
        }
        root = int(tokens[lead["root"]]) if "root" in lead else None
        redop = tokens[lead["redop"]] if "redop" in lead else ""
        dtype = tokens[lead["type"]] if "type" in lead else ""
        return Row(int(tokens[lead["size"]]), int(tokens[lead["count"]]), dtype, redop, root, placements)
    except (ValueError, IndexError, KeyError):
        return None


def require_complete(report: NcclReport) -> None:
    """EvidenceError unless the run printed its closing summary (the tool's completion marker)."""
    if not report.complete:
        raise EvidenceError(INCOMPLETE)


_TIME_RULE = evidence.UNIT_RULES["s"]
_BW_RULE = evidence.UNIT_RULES["GB/s"]
# algbw is size / time, not traffic on any link: with one rank an in-place collective is a no-op
# whose time is a kernel launch, so algbw can exceed every physical bound while busbw (the traffic,
# x 2(n-1)/n = 0) cannot. Finite and non-negative, then.
ALGBW_RULE = evidence.Rule("an algorithm bandwidth", low=0.0)
# The old format's error column: an absolute deviation, finite and non-negative.
_DELTA_RULE = evidence.Rule("a deviation", low=0.0)


def table_problems(report: NcclReport) -> list[str]:
    """Every impossible cell and every repeated or out-of-order size (see the module docstring)."""
    found = [f"unreadable table row {line!r}" for line in report.unreadable]
    seen: dict[tuple[str, str, int | None], int] = {}
    for row in report.rows:
        found.extend(_cell_problems(row))
        sweep = (row.dtype, row.redop, row.root)
        last = seen.get(sweep)
        if last is not None and row.size <= last and not row.size == last == 0:
            what = "listed twice" if row.size == last else f"after {format_size(last)} (sizes out of order)"
            found.append(f"message size {format_size(row.size)} {what}: two outputs glued together, or an edited one")
        seen[sweep] = max(row.size, last or 0)
    return found + _summary_problems(report)


def _cell_problems(row: Row) -> list[str]:
    where = f"at {format_size(row.size)}"
    found = []
    for name, p in row.placements.items():
        place = f"{where} ({name})"
        for label, value, rule, unit in (
            ("time", p.time_us, _TIME_RULE, "us"),
            ("algbw", p.algbw, ALGBW_RULE, "GB/s"),
            ("busbw", p.busbw, _BW_RULE, "GB/s"),
        ):
            if value is not None and (why := evidence.number_problem(label, value, rule, where=place, unit=unit)):
                found.append(why)
        if p.wrong is not None and (why := evidence.number_problem("#wrong", p.wrong, evidence.COUNT, where=place)):
            found.append(why)
        if p.delta is not None and (why := evidence.number_problem("error", p.delta, _DELTA_RULE, where=place)):
            found.append(why)
    return found


def _summary_problems(report: NcclReport) -> list[str]:
    found = []
    if report.out_of_bounds is not None and report.out_of_bounds < 0:
        found.append(f"'Out of bounds values' = {report.out_of_bounds} (a count must be a non-negative integer)")
    # The summary counts the tests (size x placement, per process) that found wrong values
    # (src/common.cu CheckData: errors[0]++): zero exactly when no row has #wrong > 0.
    counts = [p.wrong for r in report.rows for p in r.placements.values() if p.wrong is not None]
    if counts and report.out_of_bounds is not None and (report.out_of_bounds > 0) != any(counts):
        rows = sum(1 for c in counts if c)
        found.append(f"the summary says {report.out_of_bounds} out-of-bounds values but {rows} results have #wrong > 0")
    return found


def wrong_rows(report: NcclReport) -> list[str]:
    """'1 GiB out-of-place: 7' for every placement with wrong results, in table order."""
    return [
        f"{format_size(r.size)} {name}: {p.wrong}" for r in report.rows for name, p in r.placements.items() if p.wrong
    ]


# Bytes per element of nccl-tests' type names (src/common.cu test_typenames).
_TYPE_BYTES = {
    "int8": 1, "uint8": 1, "f8e4m3": 1, "f8e5m2": 1, "half": 2, "bfloat16": 2,
    "int32": 4, "uint32": 4, "float": 4, "int64": 8, "uint64": 8, "double": 8,
}  # fmt: skip


def infer_collective(report: NcclReport) -> str:
    """Name the collective from the table when the output does not: nccl-tests' busbw/algbw factor
    is 2(n-1)/n for all_reduce, (n-1)/n for all_gather, reduce_scatter, alltoall, scatter and gather,
    and 1 for broadcast, reduce and sendrecv (doc/PERFORMANCE.md, src/*.cu GetBw). The `redop` and
    `root` columns (which ones the old format prints, the values the new one prints) and
    size = count x type size x ranks tell most apart; before 2.13 only alltoall leaves its redop
    blank. Ties stay unnamed (''): from 2.13 all_gather and alltoall print the same columns, and
    scatter and gather always do."""
    n = report.rank_count
    layout = report.layout
    if n < 2 or layout is None:
        return ""
    row = next((r for r in reversed(report.rows) if _ratio_row(r)), None)
    if row is None:
        return ""
    p = row.placements["out-of-place"]
    ratio = (p.busbw or 0.0) / (p.algbw or 1.0)
    rooted = row.root is not None and row.root >= 0
    per_rank = _TYPE_BYTES.get(row.dtype, 0) * row.count * n == row.size
    columns = {"redop", "root"} & layout.leading.keys()
    if row.redop == "" and "redop" in columns:
        return "alltoall" if _near(ratio, (n - 1) / n) and per_rank else ""
    if row.redop not in ("", "none"):
        return _reducing_collective(ratio, n, rooted, per_rank and len(columns) == 2)
    return _plain_collective(ratio, n, rooted, per_rank and not columns)


def _reducing_collective(ratio: float, n: int, rooted: bool, scatter_shaped: bool) -> str:
    """reduce, all_reduce or reduce_scatter. `scatter_shaped`: size = count x type size x ranks in
    the new format (before 2.13 reduce_scatter and alltoall print the same columns)."""
    if rooted:
        return "reduce" if _near(ratio, 1.0) else ""
    if _near(ratio, 2 * (n - 1) / n):
        return "all_reduce"
    return "reduce_scatter" if _near(ratio, (n - 1) / n) and scatter_shaped else ""


def _plain_collective(ratio: float, n: int, rooted: bool, gather_shaped: bool) -> str:
    """broadcast or all_gather. `gather_shaped`: size = count x type size x ranks, and neither
    a redop nor a root column."""
    if rooted:
        return "broadcast" if _near(ratio, 1.0) else ""
    if _near(ratio, (n - 1) / n) and gather_shaped:
        return "all_gather"  # before 2.13 only all_gather prints neither column with this factor
    return ""


def _near(ratio: float, factor: float) -> bool:
    return abs(ratio - factor) < 0.02


def _ratio_row(row: Row) -> bool:
    p = row.placements.get("out-of-place")
    return bool(p and p.algbw and p.busbw and p.algbw >= 1)


def busbw_series(report: NcclReport, collective: str = "") -> list[Series]:
    """busbw by message size: the better of out-of-place / in-place per size (what is judged).
    A value that cannot exist (NaN, inf, negative) is left out of the curve (None)."""
    best: dict[int, float | None] = {}
    for r in report.rows:  # a size listed twice (the old format's 0-byte rows) keeps its best
        value = r.best_busbw()[0]
        if value is not None and evidence.number_problem("busbw", value, _BW_RULE):
            value = None
        values = [v for v in (best.get(r.size), value) if v is not None]
        best[r.size] = max(values) if values else None
    sizes = sorted(best)
    labels = {"collective": collective} if collective else {}
    return [Series(name="busbw", unit="GB/s", x=[float(s) for s in sizes], y=[best[s] for s in sizes],
                   x_unit="B", labels=labels)]  # fmt: skip
