"""nvbandwidth (github.com/NVIDIA/nvbandwidth) plain-text output, and the nvidia-smi PCIe link query
the host-bw check (checks/gpu/host_bw.py) reads beside it. Parser kind `nvbandwidth`.

The format, v0.2 to v0.10 (nvbandwidth output.cpp, inline_common.h `operator<<(PeerValueMatrix)`):

    nvbandwidth Version: v0.8
    Device 0: NVIDIA H100 80GB HBM3 (00000000:18:00)      <- "(domain:bus:device)" since v0.5
    Running host_to_device_memcpy_ce.
    memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)
               0         1
     0     55.28     55.30

    SUM host_to_device_memcpy_ce 110.58
    COEFFICIENT_OF_VARIATION host_to_device_memcpy_ce 0.00   <- v0.10

Every cell is a value printed with two decimals (GB/s, 10^9 bytes/s), or `N/A` for a pair the test
did not measure (a GPU with itself, a pair without peer access): N/A is never a measurement. Old
versions print 0.00 on the device-to-device diagonal; the diagonal is never read. A test that ran
ends with its `SUM <test> <total>` line (every version since the first): a test started ("Running X.")
without it was cut short, and the whole output is refused (EvidenceError "incomplete"). A test that
failed prints "Error: ..." (v0.5+) or "ERROR: ..." (v0.4) instead of its matrix; a waived one prints
"Waived:" (v0.5+) or "Waiving X." with no matrix and no name. The SUM is the sum of the cells as
measured: a matrix whose cells do not add up to it (a cell overwritten, a row lost) is refused too.

Measurements (GB/s as nvbandwidth prints them):
- `h2d_gbps` / `d2h_gbps` per GPU (gpu = the column) from host_to_device_memcpy_ce /
  device_to_host_memcpy_ce; labels `cpu` = the row only when the matrix has several rows;
- `d2d_gbps` per ordered pair from device_to_device_memcpy_read_ce / _write_ce, gpu None, labels
  `src`, `dst` as the matrix title's arrow reads ("GPU(row) -> GPU(column)": row to column;
  "GPU(row) <- GPU(column)": column to row) and `test` (read | write);
- an N/A cell off the diagonal: value None, labels["missing"];
- `device` per "Device N:" line: text = the name, labels `bus_id` (when printed);
- `gpus_listed`: how many devices nvbandwidth listed.
A NaN or inf cell is kept as such: run_check refuses it as impossible evidence, and
`python -m checks parse` flags it `invalid`.

The link query (`nvidia-smi --query-gpu=index,pci.bus_id,pcie.link.gen.current,pcie.link.gen.max,
pcie.link.width.current,pcie.link.width.max --format=csv,noheader,nounits`): per GPU
`pcie_gen_current`, `pcie_gen_max`, `pcie_width_current`, `pcie_width_max` (lanes), labels `bus_id`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from checks.core.base import EvidenceError, Measurement
from checks.core.parsers import Parsed, register_parser

H2D = "host_to_device_memcpy_ce"
D2H = "device_to_host_memcpy_ce"
D2D_READ = "device_to_device_memcpy_read_ce"
D2D_WRITE = "device_to_device_memcpy_write_ce"
HOST_TESTS = {H2D: "h2d_gbps", D2H: "d2h_gbps"}
PEER_TESTS = {D2D_READ: "read", D2D_WRITE: "write"}
READ_TESTS = (H2D, D2H, D2D_READ, D2D_WRITE)
NA_REASON = "nvbandwidth printed N/A (the pair was not measured: no peer access?)"

_RUNNING = re.compile(r"^Running (?:benchmark )?(?P<test>[A-Za-z0-9_]+)\.?\s*$")
_DEVICE = re.compile(
    r"^Device (?P<index>\d+): (?P<name>.*?)(?: \((?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})\))?\s*$"
)
_SUM = re.compile(r"^SUM (?P<key>\S+) (?P<total>\S+)\s*$")
_ERROR = re.compile(r"^(?:Error|ERROR): ?(?P<why>.*)$")
_TITLE = re.compile(r"\((?:GB/s|ns)\)\s*$")
_VERSION = re.compile(r"^nvbandwidth Version: (?P<version>\S+)")


@dataclass
class Matrix:
    """One result matrix: its title, column labels, and cells by row (None: N/A)."""

    title: str
    columns: list[int]
    rows: dict[int, list[float | None]]


@dataclass
class TestBlock:
    """One "Running X." block: its first matrix, the SUM lines it printed, an error line."""

    name: str
    lines: list[str] = field(default_factory=list)
    matrix: Matrix | None = None
    sums: dict[str, str] = field(default_factory=dict)
    error: str = ""

    @property
    def complete(self) -> bool:
        return any(key == self.name or key.startswith(self.name + "_") for key in self.sums)


@dataclass
class Report:
    version: str = ""
    devices: dict[int, tuple[str, str]] = field(default_factory=dict)  # index -> (name, bus id)
    tests: dict[str, TestBlock] = field(default_factory=dict)
    waived: int = 0


def parse_report(text: str) -> Report:
    """The whole output; EvidenceError when it is binary, cut short or its matrices do not add up."""
    if "\x00" in text:
        raise EvidenceError("nvbandwidth output holds binary data (NUL bytes): not a report")
    report = Report()
    block: TestBlock | None = None
    for raw in text.splitlines():
        line = raw.rstrip()
        if match := _RUNNING.match(line):
            block = TestBlock(match["test"])
            report.tests.setdefault(block.name, block)
        elif line.startswith(("Waived", "Waiving")):
            report.waived += 1
        elif block is not None:
            block.lines.append(line)
        elif match := _VERSION.match(line):
            report.version = match["version"]
        elif match := _DEVICE.match(line):
            report.devices[int(match["index"])] = (match["name"].strip(), match["bus"] or "")
    for test in report.tests.values():
        _read_block(test)
    cut = [t.name for t in report.tests.values() if not t.complete and not t.error]
    if cut:
        why = f"{cut[0]} has no closing 'SUM {cut[0]}' line (the run stopped early or was cut)"
        raise EvidenceError(f"nvbandwidth output incomplete: {why}")
    return report


def _read_block(block: TestBlock) -> None:
    for index, line in enumerate(block.lines):
        if match := _SUM.match(line):
            block.sums.setdefault(match["key"], match["total"])
        elif (match := _ERROR.match(line)) and not block.error and not block.sums:
            # After its SUM line an error belongs to what came next (a test name not found).
            block.error = match["why"].strip() or "no reason given"
        elif block.matrix is None and block.name in READ_TESTS and _TITLE.search(line):
            block.matrix = _read_matrix(block.name, line.strip(), block.lines[index + 1 :])
    if block.name in READ_TESTS and block.complete:
        if block.matrix is None:
            raise EvidenceError(f"nvbandwidth {block.name}: a SUM line but no result matrix")
        _check_sum(block.name, block.matrix, block.sums.get(block.name, ""))


def _read_matrix(test: str, title: str, lines: list[str]) -> Matrix:
    header = lines[0].split() if lines else []
    if not header or not all(token.isdigit() for token in header):
        raise EvidenceError(f"nvbandwidth {test}: unreadable matrix header {(lines[0] if lines else '')[:80]!r}")
    columns = [int(token) for token in header]
    rows: dict[int, list[float | None]] = {}
    for line in lines[1:]:
        tokens = line.split()
        if not tokens or _SUM.match(line.strip()):
            break
        if not tokens[0].isdigit():
            raise EvidenceError(f"nvbandwidth {test}: unreadable matrix row {line.strip()[:80]!r}")
        if len(tokens) - 1 != len(columns):
            raise EvidenceError(
                f"nvbandwidth {test}: row {tokens[0]} has {len(tokens) - 1} cells for {len(columns)} columns "
                "(the output was cut or corrupted)"
            )
        rows[int(tokens[0])] = [_cell(test, tokens[0], token) for token in tokens[1:]]
    if not rows:
        raise EvidenceError(f"nvbandwidth {test}: the matrix has no rows")
    return Matrix(title, columns, rows)


def _cell(test: str, row: str, token: str) -> float | None:
    if token == "N/A":
        return None
    try:
        return float(token)
    except ValueError:
        raise EvidenceError(f"nvbandwidth {test}: row {row}: {token[:20]!r} is not a bandwidth") from None


def _check_sum(test: str, matrix: Matrix, total: str) -> None:
    """The SUM line must be the sum of the cells (each printed to 0.01, so within 0.01 a cell)."""
    try:
        stated = float(total)
    except ValueError:
        raise EvidenceError(f"nvbandwidth {test}: SUM {total[:20]!r} is not a number") from None
    cells = [c for row in matrix.rows.values() for c in row if c is not None]
    if not all(math.isfinite(c) for c in cells) or not math.isfinite(stated):
        return  # a NaN/inf cell or total: judged impossible evidence downstream, by name
    if abs(sum(cells) - stated) > 0.01 * max(len(cells), 1) + 0.011:
        raise EvidenceError(
            f"nvbandwidth {test}: its cells add up to {sum(cells):.2f}, its SUM line says {stated:.2f} "
            "(a value was altered or a row lost)"
        )


def measurements_from(report: Report) -> list[Measurement]:
    out: list[Measurement] = []
    for index, (name, bus) in sorted(report.devices.items()):
        out.append(Measurement("device", gpu=index, text=name, labels={"bus_id": bus} if bus else {}))
    if report.devices:
        out.append(Measurement("gpus_listed", float(len(report.devices)), "GPUs"))
    for test, name in HOST_TESTS.items():
        block = report.tests.get(test)
        if block is not None and block.matrix is not None:
            out += _host_cells(block.matrix, name)
    for test, kind in PEER_TESTS.items():
        block = report.tests.get(test)
        if block is not None and block.matrix is not None:
            out += _peer_cells(block.matrix, kind)
    return out


def _host_cells(matrix: Matrix, name: str) -> list[Measurement]:
    out = []
    for row, cells in matrix.rows.items():
        for column, value in zip(matrix.columns, cells, strict=True):
            labels = {"cpu": str(row)} if len(matrix.rows) > 1 else {}
            if value is None:
                labels["missing"] = "nvbandwidth printed N/A"
            out.append(Measurement(name, value, "GB/s", gpu=column, labels=labels))
    return out


def _peer_cells(matrix: Matrix, kind: str) -> list[Measurement]:
    row_to_column = "<-" not in matrix.title  # "GPU(row) -> GPU(column)"; "<-": column to row
    out = []
    for row, cells in matrix.rows.items():
        for column, value in zip(matrix.columns, cells, strict=True):
            if row == column:
                continue  # a GPU with itself: N/A (0.00 before v0.5), never a measurement
            src, dst = (row, column) if row_to_column else (column, row)
            labels = {"src": str(src), "dst": str(dst), "test": kind}
            if value is None:
                labels["missing"] = NA_REASON
            out.append(Measurement("d2d_gbps", value, "GB/s", labels=labels))
    return out


@register_parser("nvbandwidth")
def parse_nvbandwidth(text: str) -> Parsed:
    report = parse_report(text)
    warnings = [f"{t.name}: {t.error}" for t in report.tests.values() if t.error]
    if report.waived:
        warnings.append(f"{report.waived} test(s) waived (not supported on this system)")
    return Parsed(measurements_from(report), warnings)


# --- nvidia-smi --query-gpu: each GPU's PCIe link -----------------------------------------------------

PCIE_FIELDS = (
    "index",
    "pci.bus_id",
    "pcie.link.gen.current",
    "pcie.link.gen.max",
    "pcie.link.width.current",
    "pcie.link.width.max",
)
_PCIE_NAMES = (
    ("pcie_gen_current", ""),
    ("pcie_gen_max", ""),
    ("pcie_width_current", "lanes"),
    ("pcie_width_max", "lanes"),
)


def parse_pcie_query(text: str) -> list[Measurement]:
    """`nvidia-smi --query-gpu=<PCIE_FIELDS> --format=csv,noheader,nounits`: one line per GPU."""
    if "\x00" in text:
        raise EvidenceError("nvidia-smi --query-gpu output holds binary data (NUL bytes)")
    out: list[Measurement] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != len(PCIE_FIELDS) or not fields[0].isdigit():
            raise EvidenceError(f"nvidia-smi --query-gpu printed an unreadable line: {line.strip()[:80]!r}")
        gpu, bus = int(fields[0]), fields[1]
        for (name, unit), value in zip(_PCIE_NAMES, fields[2:], strict=True):
            out.append(_link_fact(name, unit, gpu, bus, value))
    if not out:
        raise EvidenceError("nvidia-smi --query-gpu listed no GPU")
    return out


def _link_fact(name: str, unit: str, gpu: int, bus: str, value: str) -> Measurement:
    m = Measurement(name, None, unit, gpu=gpu, labels={"bus_id": bus})
    if value.isdigit():
        m.value = float(value)
    else:
        m.labels["missing"] = f"nvidia-smi printed {value[:30]!r}"  # [N/A], [Not Supported]
    return m


def bus_key(bus: str) -> tuple[int, int, int] | None:
    """'00000000:9A:00.0' (nvidia-smi) and '00000000:9a:00' (nvbandwidth) -> (domain, bus, device)."""
    parts = bus.split(".")[0].split(":")
    try:
        return (int(parts[0], 16), int(parts[1], 16), int(parts[2], 16)) if len(parts) == 3 else None
    except ValueError:
        return None
