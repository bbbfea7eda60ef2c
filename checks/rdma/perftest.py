"""perftest outputs (linux-rdma/perftest): the bandwidth tests (ib_write_bw, ib_read_bw, ib_send_bw)
and the latency tests (ib_write_lat, ib_read_lat, ib_send_lat). Parser kind `perftest`.

What one output holds (perftest src/perftest_parameters.h and .c):
- a banner ("RDMA_Write BW Test", "RDMA_Read Latency Test") and a header of "Key : value" pairs,
  two to a line (Device, Link type, Transport type, Mtu, Number of qps...), up to a dashed line;
- with `--use_cuda=N`, before the banner, what CUDA did (src/cuda_memory.c): "initializing CUDA",
  "Picking device No. N" (or "Picking GPU number N"), "[pid = P, dev = N] device name = [NAME]",
  and the buffer: "cuMemAlloc() of a N bytes GPU buffer" / "allocated GPU buffer address at ..."
  (device memory), "using DMA-BUF for GPU buffer ..." (DMA-BUF), or, for the host-memory type,
  "Host allocation selected, calling memalign allocator ..." and "... for type CUDA_MEM_MALLOC";
- the results: a column header ("#bytes #iterations BW peak[Gb/sec] BW average[Gb/sec]
  MsgRate[Mpps]", or "t_min[usec] ... 99.9% percentile[usec]"), one row per message size, and a
  closing dashed line (RESULT_LINE, printed after the last size). Known warnings may be printed
  between the column header and the rows or between rows: get_clock.c's "Conflicting CPU frequency
  values detected: A != B. CPU Frequency is not max." (once per size, without -F), perftest's own
  "WARNING: ..." lines and libibverbs' "libibverbs: Warning: ...". They are skipped and kept as
  warnings, each saying it was skipped; any other line in the table that is not a row is refused.
- in duration mode (-D) and with --run_infinitely perftest measures no peak: it prints
  " WARNING: BW peak won't be measured in this run." (perftest_parameters.c) and 0.00 in the peak
  column. That 0.00 is not a measurement: the peak is recorded as not measured (below).

Units. Without `--report_gbits` perftest reports bandwidth in MB/sec, where a MB is 2^20 bytes
(print_report_bw: `format_factor = (report_fmt == MBS) ? 0x100000 : 125000000`, since commit
22fc42c7 of 2013; the header says "MiB/sec" since commit 1d202bb7 of 2024: "MiB=2^20 byte, while
Gb=10^9 bits"). Every bandwidth here is in Gb/s (10^9 bits/s); a value printed in MB/sec or MiB/sec
is converted (x 2^20 x 8 / 10^9) and its measurement says so (`labels["converted_from"]`).

Measurements (`perftest_measurements`):
- bandwidth tests: `bw_peak_gbps`, `bw_avg_gbps` (Gb/s) and `msg_rate_mpps` (Mpps) per size row,
  label `size_bytes`; the largest size's rows also carry `labels["largest"] = "1"`. Where perftest
  measured no peak (its "BW peak won't be measured" warning, or a 0.00 peak under a non-zero
  average, which no real peak can be), `bw_peak_gbps` is value None with `labels["not_measured"]`
  saying why, never 0;
- latency tests: `lat_min_us`, `lat_max_us`, `lat_typical_us`, `lat_avg_us`, `lat_stdev_us`,
  `lat_p99_us`, `lat_p99_9_us` (us) per size row, where printed;
- facts: `perftest_test` (the banner), `device`, `link_type`, `transport_type` (text), `mtu_bytes`,
  `qps`, and `gpu_buffer` (1: perftest printed a GPU buffer allocation; 0: it printed none, or a
  host allocation) with labels `cuda_device`, `gpu_name`, `dmabuf`, `memory`.

Unusable output is EvidenceError: no banner, no result table, a table without its closing dashed
line (the run stopped or the output was cut), a row whose fields do not match the columns, a value
that is not a finite non-negative number, latencies reported in cycles.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from checks.core.base import EvidenceError, Measurement
from checks.core.parsers import Parsed, register_parser

# MB/sec and MiB/sec are 2^20 bytes a second (see the module docstring); 1 Gb/s is 10^9 bits a second.
MIB_PER_S_IN_GBPS = 1024 * 1024 * 8 / 1e9
BW_UNITS: dict[str, float] = {"Gb/sec": 1.0, "MB/sec": MIB_PER_S_IN_GBPS, "MiB/sec": MIB_PER_S_IN_GBPS}

_BANNER = re.compile(r"^(?P<test>.+? (?P<kind>BW|Latency) Test)$")
_DASHES = re.compile(r"^-{20,}$")
# The line closing the table: RESULT_LINE (87 dashes) or RESULT_LINE_PER_PORT (longer); a shorter run of
# dashes is that line cut by the end of the output.
_CLOSING = re.compile(r"^-{87,}$")
_PAIR = re.compile(r"(?P<key>[A-Za-z][\w*./-]*(?: [\w*./-]+)*?)\s*:\s*(?P<value>\S+)")
_COLUMN = re.compile(r"#\w+|[\w.%]+(?: [\w.%]+)?\[[^\]]*\]")
_INTEGER = re.compile(r"^\d+$")
# Lines perftest and libibverbs print among the result rows that are not rows (module docstring).
_TABLE_NOTE = re.compile(
    r"^(Conflicting CPU frequency values detected: [\d.]+ != [\d.]+\. CPU Frequency is not max\.$"
    r"|(?i:warning): |libibverbs: Warning: )"
)
# perftest_parameters.c, duration mode and --run_infinitely: the peak column then holds 0.00.
_NO_PEAK = re.compile(r"^WARNING: BW peak won't be measured in this run\.$", re.MULTILINE)
NO_PEAK_WHY = "perftest measured no BW peak (duration mode -D or --run_infinitely: it prints 0.00)"

# Column header token -> column key. Bandwidth columns carry their unit in brackets.
_COLUMNS: dict[str, str] = {
    "#bytes": "bytes",
    "#iterations": "iterations",
    "#sl": "sl",
    "BW peak": "bw_peak",
    "BW average": "bw_avg",
    "MsgRate": "msg_rate",
    "BW Port1": "bw_port1",
    "MsgRate Port1": "msg_rate_port1",
    "BW Port2": "bw_port2",
    "MsgRate Port2": "msg_rate_port2",
    "CPU_Util": "cpu_util",
    "t_min": "t_min",
    "t_max": "t_max",
    "t_typical": "t_typical",
    "t_avg": "t_avg",
    "t_stdev": "t_stdev",
    "99% percentile": "p99",
    "99.9% percentile": "p99_9",
    "tps average": "tps",
}
# Latency column -> measurement name (all in microseconds).
LATENCY_NAMES: dict[str, str] = {
    "t_min": "lat_min_us",
    "t_max": "lat_max_us",
    "t_typical": "lat_typical_us",
    "t_avg": "lat_avg_us",
    "t_stdev": "lat_stdev_us",
    "p99": "lat_p99_us",
    "p99_9": "lat_p99_9_us",
}
# Bandwidth column -> measurement name and unit.
BANDWIDTH_NAMES: dict[str, tuple[str, str]] = {
    "bw_peak": ("bw_peak_gbps", "Gb/s"),
    "bw_avg": ("bw_avg_gbps", "Gb/s"),
    "msg_rate": ("msg_rate_mpps", "Mpps"),
}
# What perftest prints on its way to the GPU buffer (src/cuda_memory.c, both layouts since 2022).
_GPU_BUFFER = re.compile(
    r"^(allocated GPU buffer address at|cuMemAlloc\(\) of a \d+ bytes GPU buffer|using DMA-BUF for GPU buffer"
    r"|allocated GPU buffer of a \d+ address at \S+ for type CUDA_MEM_DEVICE)"
)
# Not device memory: the host-memory type (memalign) and managed (unified) memory.
_HOST_BUFFER = re.compile(
    r"^(Host allocation selected|allocated GPU buffer of a .* for type CUDA_MEM_(MALLOC|MANAGED))"
)
_CUDA_PICK = re.compile(r"^Picking (?:device No\.|GPU number) (?P<index>\d+)")
_CUDA_NAME = re.compile(r"device name = \[(?P<name>[^\]]*)\]")
# Lines perftest prints when it could not run the test (perftest_communication.c, perftest_resources.c).
_FAILURE = re.compile(
    r"(Couldn't|Unable to|Failed to|failed to|IB device \S+ not found|No IB devices found|Can't produce a report)"
)


@dataclass
class CudaFacts:
    """What perftest printed about CUDA (empty when it printed nothing: host memory)."""

    mentioned: bool = False
    gpu_buffer: bool = False
    host_buffer: bool = False
    dmabuf: bool = False
    index: int | None = None
    name: str = ""

    @property
    def memory(self) -> str:
        if self.gpu_buffer and not self.host_buffer:
            return "gpu-dmabuf" if self.dmabuf else "gpu"
        if self.host_buffer:
            return "host or managed (CUDA allocation not in device memory)"
        return "host" if not self.mentioned else "unknown (CUDA initialised, no GPU buffer allocated)"


@dataclass
class PerftestRun:
    """One perftest output, read: the banner, header, CUDA facts, result rows and warnings."""

    test: str
    kind: str  # "bw" | "lat"
    header: dict[str, str]
    unit: str  # the printed bandwidth unit ("Gb/sec", "MB/sec", "MiB/sec"), "usec" for latency
    columns: list[str]
    rows: list[dict[str, float]]
    cuda: CudaFacts
    warnings: list[str] = field(default_factory=list)
    # perftest said it measured no peak (duration mode): the peak column's 0.00 is no value.
    no_peak: bool = False

    @property
    def device(self) -> str:
        return self.header.get("Device", "")

    @property
    def largest(self) -> dict[str, float]:
        return max(self.rows, key=lambda r: r["bytes"])

    def gbps(self, value: float) -> float:
        return value * BW_UNITS[self.unit] if self.kind == "bw" else value


def failure_line(text: str) -> str:
    """The line where perftest said why it could not run ("Couldn't connect to 10.0.0.2:18515"), or ""."""
    for raw in text.splitlines():
        line = raw.strip()
        if _FAILURE.search(line):
            return line[:200]
    return ""


def parse_perftest(text: str) -> PerftestRun:
    """One perftest output -> PerftestRun; EvidenceError when it cannot be trusted (module docstring)."""
    lines = [raw.strip() for raw in text.splitlines()]
    start = next((i for i, line in enumerate(lines) if _BANNER.match(line)), None)
    if start is None:
        raise EvidenceError(_no_banner(text))
    banner = _BANNER.match(lines[start])
    assert banner is not None
    cuda = _cuda_facts(lines[:start])
    header, after = _header(lines, start + 1)
    table = next((i for i in range(after, len(lines)) if lines[i].startswith("#bytes")), None)
    if table is None:
        why = failure_line("\n".join(lines[after:]))
        raise EvidenceError(f"perftest printed no result table{': ' + why if why else ''}")
    columns, unit = _columns(lines[table], banner["kind"])
    rows, warnings, end = _rows(lines, table + 1, columns)
    if any(_BANNER.match(line) for line in lines[end:]):
        raise EvidenceError("more than one perftest report in one output")
    kind = "bw" if banner["kind"] == "BW" else "lat"
    run = PerftestRun(banner["test"], kind, header, unit, columns, rows, cuda, warnings)
    run.no_peak = kind == "bw" and _NO_PEAK.search("\n".join(lines)) is not None
    return run


def _no_banner(text: str) -> str:
    why = failure_line(text)
    if why:
        return f"perftest did not run: {why}"
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    if not first:
        return "perftest printed nothing"
    return f"not a perftest output (no '... BW Test' / '... Latency Test' banner): {first[:80]!r}"


def _cuda_facts(lines: list[str]) -> CudaFacts:
    facts = CudaFacts()
    for line in lines:
        if "CUDA" in line or "GPU" in line:
            facts.mentioned = True
        if _GPU_BUFFER.match(line):
            facts.gpu_buffer = True
            facts.dmabuf = facts.dmabuf or line.startswith("using DMA-BUF")
        if _HOST_BUFFER.match(line):
            facts.host_buffer = True
        if match := _CUDA_PICK.match(line):
            facts.index = int(match["index"])
        if match := _CUDA_NAME.search(line):
            facts.name = match["name"]
    return facts


def _header(lines: list[str], index: int) -> tuple[dict[str, str], int]:
    """The "Key : value" pairs up to the dashed line closing the header; the index after it."""
    header: dict[str, str] = {}
    while index < len(lines) and not _DASHES.match(lines[index]):
        line = lines[index]
        if not line.upper().startswith("WARNING"):
            for match in _PAIR.finditer(line):
                header.setdefault(match["key"].strip(), match["value"])
        index += 1
    if index >= len(lines):
        raise EvidenceError("perftest output ends inside its header (output cut?)")
    return header, index + 1


def _columns(line: str, kind: str) -> tuple[list[str], str]:
    """The column keys of a result header, and its unit (bandwidth unit, or "usec")."""
    columns: list[str] = []
    units: set[str] = set()
    for token in _COLUMN.findall(line):
        name, _, unit = token.partition("[")
        key = _COLUMNS.get(name.strip())
        if key is None:
            raise EvidenceError(f"perftest result column {token!r} is not one Kiln reads")
        columns.append(key)
        if unit and key not in ("msg_rate", "msg_rate_port1", "msg_rate_port2", "cpu_util"):
            units.add(unit.rstrip("]"))
    if line.rstrip().endswith("tps average"):
        columns.append("tps")
    if kind == "BW":
        if len(units) != 1 or next(iter(units)) not in BW_UNITS or not {"bw_peak", "bw_avg"} <= set(columns):
            raise EvidenceError(f"perftest bandwidth columns not understood: {line[:120]!r}")
    elif units != {"usec"}:
        raise EvidenceError(f"perftest latencies not reported in usec ({', '.join(sorted(units)) or 'no unit'})")
    return columns, next(iter(units))


def _rows(lines: list[str], index: int, columns: list[str]) -> tuple[list[dict[str, float]], list[str], int]:
    """The rows up to the closing dashed line, the warnings between them, and the index after it."""
    rows: list[dict[str, float]] = []
    warnings: list[str] = []
    for i in range(index, len(lines)):
        line = lines[i]
        if _CLOSING.match(line):
            if not rows:
                raise EvidenceError("perftest result table has no rows")
            return rows, warnings, i + 1
        fields = line.split()
        if not fields:
            continue
        if _INTEGER.match(fields[0]):
            rows.append(_row(fields, columns))
        elif re.fullmatch(r"-+", line):
            continue  # RESULT_LINE cut short by the end of the output: the table stays unclosed
        elif _TABLE_NOTE.match(line):
            warnings.append(f"skipped in the result table (a warning, not a row): {line[:200]}")
        else:
            raise EvidenceError(f"perftest result table: {line[:80]!r} is neither a result row nor a known warning")
    raise EvidenceError(
        f"perftest result table not closed after {len(rows)} rows (no closing dashed line: the run stopped or "
        "the output was cut)"
    )


def _row(fields: list[str], columns: list[str]) -> dict[str, float]:
    if len(fields) != len(columns):
        raise EvidenceError(f"perftest row {' '.join(fields)[:80]!r}: {len(fields)} fields for {len(columns)} columns")
    row: dict[str, float] = {}
    for key, text in zip(columns, fields, strict=True):
        try:
            value = float(text)
        except ValueError:
            raise EvidenceError(f"perftest row for {fields[0]} bytes: {key} = {text!r} is not a number") from None
        if not math.isfinite(value) or value < 0:
            raise EvidenceError(f"perftest row for {fields[0]} bytes: {key} = {text} (must be finite and >= 0)")
        row[key] = value
    return row


def perftest_measurements(run: PerftestRun) -> list[Measurement]:
    """The measurements of one parsed output (module docstring)."""
    out = _facts(run)
    largest = run.largest["bytes"]
    for row in run.rows:
        labels = {"size_bytes": str(int(row["bytes"]))}
        if row["bytes"] == largest:
            labels["largest"] = "1"
        out.extend(_row_measurements(run, row, labels))
    return out


def _row_measurements(run: PerftestRun, row: dict[str, float], labels: dict[str, str]) -> list[Measurement]:
    out: list[Measurement] = []
    if run.kind == "lat":
        for key, name in LATENCY_NAMES.items():
            if key in row:
                out.append(Measurement(name=name, value=row[key], unit="us", labels=dict(labels)))
        return out
    for key, (name, unit) in BANDWIDTH_NAMES.items():
        if key not in row:
            continue
        if key == "bw_peak" and not peak_measured(run, row):
            out.append(Measurement(name=name, value=None, unit=unit, labels={**labels, "not_measured": NO_PEAK_WHY}))
            continue
        m = Measurement(name=name, value=row[key], unit=unit, labels=dict(labels))
        if unit == "Gb/s" and run.unit != "Gb/sec":
            m.value = round(row[key] * BW_UNITS[run.unit], 4)
            m.labels["converted_from"] = run.unit
        out.append(m)
    return out


def peak_measured(run: PerftestRun, row: dict[str, float]) -> bool:
    """Whether a row's peak is a measurement: perftest said it measured none, or printed a 0.00 peak
    under a non-zero average (a peak is never below the average: that 0 is perftest's "not measured")."""
    if run.kind != "bw" or "bw_peak" not in row:
        return False
    return not run.no_peak and not (row["bw_peak"] == 0 and row.get("bw_avg", 0.0) > 0)


def _facts(run: PerftestRun) -> list[Measurement]:
    out = [Measurement(name="perftest_test", text=run.test)]
    for name, key in (("device", "Device"), ("link_type", "Link type"), ("transport_type", "Transport type")):
        m = Measurement(name=name, text=run.header.get(key, ""))
        if not m.text:
            m.labels["missing"] = f"no {key!r} in the header"
        out.append(m)
    mtu = re.match(r"^(\d+)\[B\]$", run.header.get("Mtu", ""))
    if mtu:
        out.append(Measurement(name="mtu_bytes", value=float(mtu[1]), unit="B"))
    qps = run.header.get("Number of qps", "")
    if qps.isdigit():
        out.append(Measurement(name="qps", value=float(qps)))
    cuda = run.cuda
    labels = {"memory": cuda.memory, "dmabuf": "1" if cuda.dmabuf else "0"}
    if cuda.index is not None:
        labels["cuda_device"] = str(cuda.index)
    if cuda.name:
        labels["gpu_name"] = cuda.name
    gpu = cuda.gpu_buffer and not cuda.host_buffer
    out.append(Measurement(name="gpu_buffer", value=1.0 if gpu else 0.0, labels=labels))
    return out


@register_parser("perftest")
def parse_perftest_output(text: str) -> Parsed:
    run = parse_perftest(text)
    warnings = list(run.warnings)
    if run.kind == "bw" and any(not peak_measured(run, row) for row in run.rows):
        warnings.append(f"BW peak not measured: {NO_PEAK_WHY}; recorded as missing, not 0")
    if run.kind == "bw" and run.unit != "Gb/sec":
        warnings.append(f"bandwidth printed in {run.unit} (2^20 bytes/s); converted to Gb/s (10^9 bits/s)")
    return Parsed(perftest_measurements(run), warnings)
