"""Reader of `nvidia-smi topo -m` (and `-mp`): the GPU and NIC link matrix. Parser kind `nvidia_smi_topo`.

The output is a square matrix over the GPUs then the NICs (a header line of device columns, then
one row per device in the same order), followed by `Legend:` and, on drivers that name NICs NIC0,
NIC1, ... in the matrix (R535 and later), a `NIC Legend:` mapping each to its RDMA device (mlx5_0).
GPU rows also carry `CPU Affinity`, `NUMA Affinity` and, on recent drivers, `GPU NUMA ID`.

Link types, nearest first, as a numeric distance rank (the measurement's value; `text` keeps the
type as printed):

    X 0 (self) < NV# 1 (NVLink) < PIX 2 < PXB 3 < PHB 4 < NODE 5 < SYS 6

The PCIe order PIX < PXB < PHB < NODE < SYS is NVML's `nvmlGpuTopologyLevel_t` (SINGLE, MULTIPLE,
HOSTBRIDGE, NODE, SYSTEM: nvml.h) and the order of nvidia-smi's own legend; a bonded set of NVLinks
is a direct link, nearer than any PCIe path. Drivers before ~R384 printed `SOC` for what is now `SYS`
(their legend: "the SMP link between CPU sockets"); SOC is read as SYS only under such a legend.

Measurements:
- `gpu_nic_link`: one per GPU x NIC pair (gpu, labels `nic` = the device name, from the NIC Legend
  when there is one, and `column` = the matrix column when it differs): value the rank, text the type;
- `gpu_nearest_nic_link`: per GPU with at least one NIC, its nearest NIC(s) (label `nic`, ties
  comma-separated in column order): value the rank, text the type;
- `gpu_numa_affinity`: per GPU, value the NUMA node when printed (text the cell as printed; labels
  `cpu_affinity`, `gpu_numa_id` when printed), else None with `labels["missing"]`;
- `nic_count`: the NIC columns.

Anything that is not such a matrix is EvidenceError: no header, a row missing or out of order (the
output was cut), a row with more or fewer cells than the header, a link type outside the legend's
vocabulary, a diagonal that is not X, a GPU-NIC pair whose two cells disagree, no `Legend:` after the
matrix, a NICn column the NIC Legend does not name, binary bytes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from checks.core.base import EvidenceError, Measurement
from checks.core.parsers import Parsed, register_parser

# Nearest first (see the module docstring); "NV" stands for every NV# (NV1 ... NV18).
LINK_RANKS: dict[str, int] = {"X": 0, "NV": 1, "PIX": 2, "PXB": 3, "PHB": 4, "NODE": 5, "SYS": 6}
MAX_RANK = max(LINK_RANKS.values())
# The PCIe link types a threshold may name, nearest first.
PCIE_LINKS = ("PIX", "PXB", "PHB", "NODE", "SYS")
# What each type means, in the words of nvidia-smi's legend, for reasons.
LINK_WORDS: dict[str, str] = {
    "X": "the device itself",
    "NV": "over NVLink",
    "PIX": "behind a single PCIe bridge",
    "PXB": "across several PCIe bridges, below the CPU's host bridge",
    "PHB": "through the CPU's PCIe host bridge",
    "NODE": "across PCIe host bridges within one NUMA node",
    "SYS": "across the CPU sockets",
    "SOC": "across the CPU sockets",
}
_NVLINK = re.compile(r"^NV\d+$")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # nvidia-smi underlines the header on a terminal
_GPU = re.compile(r"^GPU(\d+)$")
_NIC_COLUMN = re.compile(r"^NIC\d+$")
_DEVICE = re.compile(r"^[A-Za-z][\w.:-]*$")
_CPU_LIST = re.compile(r"^(N/A|\d+(-\d+)?(,\d+(-\d+)?)*)$")
_NUMA_ID = re.compile(r"^(N/A|\d+)$")
_LEGEND_ENTRY = re.compile(r"^\s*(\S+)\s*=\s*(.+?)\s*$")
_NIC_LEGEND_ENTRY = re.compile(r"^\s*(NIC\d+):\s*(\S+)\s*$")
# The columns after the devices, as words of the header.
TRAILING = (("CPU", "Affinity"), ("NUMA", "Affinity"), ("GPU", "NUMA", "ID"))


def link_rank(token: str) -> int | None:
    """A link type's distance rank (module docstring); None for a token that is no link type."""
    if _NVLINK.match(token):
        return LINK_RANKS["NV"]
    if token == "SOC":
        return LINK_RANKS["SYS"]
    return LINK_RANKS.get(token)


def link_words(token: str) -> str:
    return LINK_WORDS["NV" if _NVLINK.match(token) else token] if link_rank(token) is not None else token


@dataclass
class Topology:
    """One parsed matrix: GPU and NIC names, the GPU-NIC links, each GPU's affinity cells."""

    gpus: int
    nics: list[str]  # device names (the NIC Legend's when there is one), in column order
    nic_columns: list[str]  # as the matrix names them (NIC0 or mlx5_0)
    links: dict[tuple[int, int], str] = field(default_factory=dict)  # (gpu, nic position) -> type
    affinity: dict[int, dict[str, str]] = field(default_factory=dict)  # gpu -> trailing column -> cell
    columns: tuple[str, ...] = ()  # the trailing columns the header names


def _split_header(line: str) -> tuple[list[str], list[str]]:
    """The header's device columns, then its trailing column names."""
    words = line.split()
    devices: list[str] = []
    trailing: list[str] = []
    i = 0
    while i < len(words):
        phrase = next((p for p in TRAILING if tuple(words[i : i + len(p)]) == p), None)
        if phrase is not None:
            trailing.append(" ".join(phrase))
            i += len(phrase)
        elif trailing:
            raise EvidenceError(f"nvidia-smi topo: unknown column {words[i]!r} after {trailing[-1]!r} in the header")
        else:
            devices.append(words[i])
            i += 1
    return devices, trailing


def _check_devices(devices: list[str]) -> int:
    """How many GPU columns lead the header (GPU0, GPU1, ... in order); EvidenceError on odd names."""
    gpus = 0
    while gpus < len(devices) and _GPU.match(devices[gpus]):
        if devices[gpus] != f"GPU{gpus}":
            raise EvidenceError(f"nvidia-smi topo: header column {devices[gpus]!r} where GPU{gpus} was expected")
        gpus += 1
    if not gpus:
        raise EvidenceError("nvidia-smi topo: the header lists no GPU")
    for name in devices[gpus:]:
        if _GPU.match(name) or not _DEVICE.match(name):
            raise EvidenceError(f"nvidia-smi topo: {name!r} is not a NIC column name (after the GPUs)")
    if len(set(devices)) != len(devices):
        raise EvidenceError("nvidia-smi topo: a device column is named twice in the header")
    return gpus


def _header_index(lines: list[str]) -> int:
    for index, line in enumerate(lines):
        words = line.split()
        if words and words[0] == "GPU0" and "X" not in words:
            return index
    first = next((line.strip() for line in lines if line.strip()), "")
    raise EvidenceError(
        f"nvidia-smi topo printed no matrix header (GPU0 ... columns): {first[:80]!r}"
        if first
        else "nvidia-smi topo printed nothing"
    )


def _rows(lines: list[str], devices: list[str], gpus: int, trailing: list[str]) -> list[list[str]]:
    """Each device's cells, in header order; EvidenceError on a missing, misplaced or misshapen row."""
    rows: list[list[str]] = []
    for position, device in enumerate(devices):
        words = lines[position].split() if position < len(lines) else []
        if not words:
            raise EvidenceError(f"nvidia-smi topo: the matrix has no row for {device} (output cut?)")
        if words[0] != device:
            raise EvidenceError(f"nvidia-smi topo: matrix row {position + 1} is {words[0][:40]!r}, expected {device}")
        expected = len(devices) + (len(trailing) if position < gpus else 0)
        if len(words) - 1 != expected:
            raise EvidenceError(
                f"nvidia-smi topo: row {device} has {len(words) - 1} cells, the header {expected} (output cut?)"
            )
        rows.append(words[1:])
    return rows


def _legend(lines: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    """The Legend's entries (type -> meaning) and the NIC Legend (NICn -> device); EvidenceError
    when the matrix is not followed by its Legend."""
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == "Legend:")
    except StopIteration:
        raise EvidenceError("nvidia-smi topo: no Legend after the matrix (output cut?)") from None
    legend: dict[str, str] = {}
    nic_legend: dict[str, str] = {}
    in_nics = False
    for line in lines[start + 1 :]:
        if line.strip() == "NIC Legend:":
            in_nics = True
        elif in_nics and (match := _NIC_LEGEND_ENTRY.match(line)):
            nic_legend[match[1]] = match[2]
        elif not in_nics and (match := _LEGEND_ENTRY.match(line)):
            legend[match[1]] = match[2]
        elif in_nics and line.strip():
            break  # the NIC Legend ends at the first line that is not "NICn: name"
    return legend, nic_legend


def _check_cell(cell: str, row: str, column: str, diagonal: bool, legend: dict[str, str]) -> None:
    if diagonal != (cell == "X"):
        where = "its own diagonal cell" if diagonal else f"{column}"
        raise EvidenceError(f"nvidia-smi topo: {row} to {where} reads {cell!r}")
    rank = link_rank(cell)
    legacy = cell == "SOC" and re.search(r"socket|SMP", legend.get("SOC", ""), re.IGNORECASE)
    if rank is None or (cell == "SOC" and not legacy):
        raise EvidenceError(f"nvidia-smi topo: unknown link type {cell[:20]!r} between {row} and {column}")


def _nic_names(columns: list[str], nic_legend: dict[str, str]) -> list[str]:
    names = []
    for column in columns:
        if _NIC_COLUMN.match(column):
            if column not in nic_legend:
                raise EvidenceError(f"nvidia-smi topo: the NIC Legend does not name {column} (output cut?)")
            names.append(nic_legend[column])
        else:
            names.append(column)
    if len(set(names)) != len(names):
        raise EvidenceError("nvidia-smi topo: the NIC Legend names one device for two columns")
    return names


def _check_affinity(device: str, cells: dict[str, str]) -> None:
    for column, pattern in (("CPU Affinity", _CPU_LIST), ("NUMA Affinity", _CPU_LIST), ("GPU NUMA ID", _NUMA_ID)):
        cell = cells.get(column)
        if cell is not None and not pattern.match(cell):
            raise EvidenceError(f"nvidia-smi topo: {device} {column} reads {cell[:40]!r}")


def parse_topology(text: str) -> Topology:
    """The matrix of `nvidia-smi topo -m` / `-mp`; EvidenceError when it is not a whole one."""
    if "\x00" in text or "\ufffd" in text:
        raise EvidenceError("nvidia-smi topo output holds binary bytes, not a topology matrix")
    lines = _ANSI.sub("", text).splitlines()
    header = _header_index(lines)
    devices, trailing = _split_header(lines[header])
    gpus = _check_devices(devices)
    rows = _rows(lines[header + 1 :], devices, gpus, trailing)
    legend, nic_legend = _legend(lines[header + 1 + len(devices) :])
    for i, (device, cells) in enumerate(zip(devices, rows, strict=True)):
        for j, column in enumerate(devices):
            _check_cell(cells[j], device, column, i == j, legend)
    topo = Topology(gpus=gpus, nics=_nic_names(devices[gpus:], nic_legend), nic_columns=devices[gpus:])
    topo.columns = tuple(trailing)
    for gpu in range(gpus):
        topo.affinity[gpu] = dict(zip(trailing, rows[gpu][len(devices) :], strict=True))
        _check_affinity(devices[gpu], topo.affinity[gpu])
        for n in range(len(topo.nics)):
            there, back = rows[gpu][gpus + n], rows[gpus + n][gpu]
            if there != back:
                raise EvidenceError(
                    f"nvidia-smi topo: GPU{gpu} to {topo.nic_columns[n]} reads {there} but back reads {back}"
                )
            topo.links[(gpu, n)] = there
    return topo


def _numa(gpu: int, topo: Topology) -> Measurement:
    cells = topo.affinity.get(gpu, {})
    labels = {"cpu_affinity": cells.get("CPU Affinity", ""), "gpu_numa_id": cells.get("GPU NUMA ID", "")}
    labels = {k: v for k, v in labels.items() if v and v != "N/A"}
    cell = cells.get("NUMA Affinity")
    m = Measurement(name="gpu_numa_affinity", gpu=gpu, text=cell or "", labels=labels)
    if cell is None:
        m.labels["missing"] = "no NUMA Affinity column (an older nvidia-smi)"
    elif cell.isdigit():
        m.value = float(cell)
    elif cell == "N/A":
        m.labels["missing"] = "nvidia-smi printed N/A"
    else:
        m.labels["missing"] = f"GPU spans NUMA nodes {cell}"
    return m


def topology_measurements(topo: Topology) -> list[Measurement]:
    """The measurements of one matrix (module docstring)."""
    out = [Measurement(name="nic_count", value=float(len(topo.nics)))]
    for gpu in range(topo.gpus):
        out.append(_numa(gpu, topo))
        pairs = []
        for n, nic in enumerate(topo.nics):
            token = topo.links[(gpu, n)]
            labels = {"nic": nic} if nic == topo.nic_columns[n] else {"nic": nic, "column": topo.nic_columns[n]}
            pairs.append(Measurement("gpu_nic_link", float(link_rank(token) or 0), gpu=gpu, text=token, labels=labels))
        out += pairs
        if pairs:
            best = min(m.value or 0.0 for m in pairs)
            nearest = [m for m in pairs if m.value == best]
            names = ",".join(m.labels["nic"] for m in nearest)
            out.append(Measurement("gpu_nearest_nic_link", best, gpu=gpu, text=nearest[0].text, labels={"nic": names}))
    return out


@register_parser("nvidia_smi_topo")
def parse_nvidia_smi_topo(text: str) -> Parsed:
    topo = parse_topology(text)
    warnings = [] if topo.nics else [f"{topo.gpus} GPUs and no NIC in the matrix"]
    return Parsed(topology_measurements(topo), warnings)
