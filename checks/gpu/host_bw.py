"""host_bw: each GPU's copy bandwidth to and from host memory, and between GPU pairs (nvbandwidth).

A GPU seated in a riser that trained at x8, a slot stuck at Gen4 or a retimer fault halves (or
quarters) its host transfers while every functional check passes: data loading, checkpointing and
NCCL's PCIe paths slow down on that one GPU. nvbandwidth (NVIDIA) measures it directly with copy
engine memcpys, one GPU at a time.

Commands: `nvbandwidth -t host_to_device_memcpy_ce -t device_to_host_memcpy_ce -t
device_to_device_memcpy_read_ce` (the `tests` param), with CUDA_DEVICE_ORDER=PCI_BUS_ID so CUDA
numbers GPUs as nvidia-smi does; then the read-only `nvidia-smi --query-gpu=...` of each GPU's PCIe
link (checks/gpu/nvbandwidth.py PCIE_FIELDS), read right after the copies (an idle GPU lowers its link
generation; its width is what a seating fault changes). Evidence is parsed by checks/gpu/nvbandwidth.py
(parser kind `nvbandwidth`).

Judging:
- every GPU the node should have (its expected count, else the devices nvbandwidth listed) must
  have a host-to-device and device-to-host value, and every ordered pair a peer-copy value: a GPU
  missing from a matrix, or an N/A cell, is `error` naming the GPU or pair;
- a requested test that did not run (waived, failed, or cut short) is `error` naming it;
- `h2d_gbps` >= `min_h2d_gbps`, `d2h_gbps` >= `min_d2h_gbps` per GPU: a GPU below fails, and the
  reason compares it with its peers' median and names its PCIe link as nvidia-smi reads it
  ("GPU 5 host-to-device 13.8 GB/s (floor 48), 25% of its peers' median 55.3; its PCIe link runs x8
  of x16 (Gen4) at 00000000:9A:00.0");
- `d2d_gbps` >= `min_d2d_gbps` per pair; a GPU whose every pair is below is named once;
- a quantity without a floor (the generic profile) is recorded and the verdict is `warn` "not judged".
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, ClassVar

from checks.core.base import (
    ERROR,
    FAIL,
    WARN,
    Check,
    Command,
    CommandOutput,
    EvidenceError,
    Finding,
    Measurement,
    NodeContext,
    ParamsError,
    Verdict,
    register,
)
from checks.core.evidence import Rule
from checks.core.presentation import KeyMetric, MatrixChart, OutlierMetric, Presentation, PromMetric, lowest
from checks.gpu.nvbandwidth import (
    D2D_READ,
    D2D_WRITE,
    D2H,
    H2D,
    PCIE_FIELDS,
    Report,
    bus_key,
    measurements_from,
    parse_pcie_query,
    parse_report,
)

NVBW_LABEL = "nvbandwidth"
PCIE_LABEL = "nvidia-smi pcie"
ALLOWED_TESTS = (H2D, D2H, D2D_READ, D2D_WRITE)
DEFAULT_TESTS = f"{H2D},{D2H},{D2D_READ}"
# A program name or path: no whitespace, quotes or shell syntax, and no leading '-' (an option).
_BINARY = re.compile(r"^[A-Za-z0-9_./+][A-Za-z0-9_./+-]*$")
# nvidia-smi answers a field query from NVML in about a second on 8 GPUs; 30 s leaves room for a
# slow driver (conservative default; tune per site).
PCIE_TIMEOUT_S = 30.0
WORDS = {"h2d_gbps": "host-to-device", "d2h_gbps": "device-to-host", "d2d_gbps": "peer copies"}
FLOORS = {"h2d_gbps": "min_h2d_gbps", "d2h_gbps": "min_d2h_gbps", "d2d_gbps": "min_d2d_gbps"}


def split_tests(text: str) -> list[str]:
    return [t.strip() for t in str(text).split(",") if t.strip()]


@dataclass
class HostBwParams:
    # The nvbandwidth program: a name found on the node's PATH, or an absolute path.
    binary: str = "nvbandwidth"
    # nvbandwidth testcases to run, comma separated, among ALLOWED_TESTS.
    tests: str = DEFAULT_TESTS
    # nvbandwidth's defaults (512 MiB buffers, 3 samples, median): 8 host-to-device, 8
    # device-to-host and 56 peer copies take about a minute on an HGX node; 600 s leaves room for a
    # slow node without letting a hung driver block the run for long (conservative; tune per site).
    timeout_s: int = 600

    def __post_init__(self) -> None:
        if not _BINARY.match(self.binary):
            raise ParamsError(f"param 'binary': {self.binary!r} is not a program name or path")
        tests = split_tests(self.tests)
        unknown = [t for t in tests if t not in ALLOWED_TESTS]
        if not tests or unknown:
            raise ParamsError(
                f"param 'tests': {', '.join(unknown) or 'none given'}; allowed: {', '.join(ALLOWED_TESTS)}"
            )
        if len(set(tests)) != len(tests):
            raise ParamsError("param 'tests': a test is listed twice")
        if self.timeout_s < 1:
            raise ParamsError(f"param 'timeout_s': must be positive, got {self.timeout_s}")


@dataclass
class HostBwThresholds:
    # GB/s as nvbandwidth prints them. None = not judged (generic hardware): the values are still
    # required as evidence and recorded, and the verdict is warn. Profiles set them (sources below).
    min_h2d_gbps: float | None = None
    min_d2h_gbps: float | None = None
    min_d2d_gbps: float | None = None

    def __post_init__(self) -> None:
        for name in ("min_h2d_gbps", "min_d2h_gbps", "min_d2d_gbps"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ParamsError(f"threshold {name!r}: must be >= 0 or None, got {value}")


def requested_tests(argv: tuple[str, ...]) -> list[str]:
    """The testcases an nvbandwidth argv asks for (each after a -t)."""
    return [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "-t"]


@register
class HostBandwidth(Check):
    key: ClassVar[str] = "host_bw"
    name: ClassVar[str] = "Host and peer copy bandwidth"
    description: ClassVar[str] = (
        "nvbandwidth copy-engine memcpy: host-to-device and device-to-host per GPU (a slow one is named "
        "with its PCIe link), and GPU-to-GPU copies per pair."
    )
    Params: ClassVar[type] = HostBwParams
    Thresholds: ClassVar[type] = HostBwThresholds
    evidence: ClassVar[dict[str, Rule]] = {
        # PCIe 1.0 to 7.0 (PCI-SIG released PCIe 7.0 in June 2025): nvidia-smi prints the number.
        "pcie_gen_current": Rule("a PCIe generation", low=1, high=7, integer=True),
        "pcie_gen_max": Rule("a PCIe generation", low=1, high=7, integer=True),
        # x1 to x32: the widths the PCIe base specification defines.
        "pcie_width_current": Rule("a PCIe link width", low=1, high=32, integer=True),
        "pcie_width_max": Rule("a PCIe link width", low=1, high=32, integer=True),
    }
    profile_thresholds: ClassVar[dict[str, dict[str, Any]]] = {
        # Azure azurehpc-health-checks conf/nd96isr_h100_v5.conf: `check_gpu_bw 48 335`, run by
        # customTests/azure_gpu_bandwidth.nhc as nvbandwidth host_to_device_memcpy_ce /
        # device_to_host_memcpy_ce >= 48 GB/s per GPU and device_to_device_memcpy_read_ce >= 335 GB/s
        # per pair (8x H100 SXM5: PCIe Gen5 x16, 64 GB/s raw per direction; NVLink4 900 GB/s).
        # Measured: 55.2-55.4 GB/s per GPU on 8x H100 (tests/fixtures/nvbandwidth v0.10 H100
        # capture), 370.3-373.0 GB/s per pair (the 8x H100 v0.4 capture).
        "H100-SXM-8": {"min_h2d_gbps": 48.0, "min_d2h_gbps": 48.0, "min_d2d_gbps": 335.0},
        # Azure azurehpc-health-checks conf/nd96isr_h200_v5.conf: `check_gpu_bw 48 335` (8x H200
        # SXM: the same PCIe Gen5 x16 host link and NVLink4 fabric as H100).
        "H200-SXM-8": {"min_h2d_gbps": 48.0, "min_d2h_gbps": 48.0, "min_d2d_gbps": 335.0},
        # Azure azurehpc-health-checks conf/nd96amsr_a100_v4.conf: `check_gpu_bw 21 238` (8x A100
        # SXM4 80GB: PCIe Gen4 x16, 32 GB/s raw per direction, ~25-26 GB/s measured (the nvbandwidth
        # README's 26.03); NVLink3 600 GB/s).
        "A100-SXM-8": {"min_h2d_gbps": 21.0, "min_d2h_gbps": 21.0, "min_d2d_gbps": 238.0},
    }
    presentation: ClassVar[Presentation] = Presentation(
        chart="matrix",
        rank=15,
        matrices=(
            MatrixChart(
                "Host copy bandwidth per GPU", ("h2d_gbps", "d2h_gbps"), "gpu", unit="GB/s", text_field=False,
                rows_title="GPU", column_titles=("host to device", "device to host"),
            ),
            MatrixChart(
                "GPU peer copy bandwidth", ("d2d_gbps",), "src", "dst", unit="GB/s", text_field=False,
                rows_title="source GPU", cols_title="destination GPU",
            ),
        ),
        key_metrics=(
            KeyMetric("h2d", "Host-to-device bandwidth (slowest GPU)", "h2d_gbps", "GB/s", per_gpu=True),
            KeyMetric("d2h", "Device-to-host bandwidth (slowest GPU)", "d2h_gbps", "GB/s", per_gpu=True),
            KeyMetric("d2d", "GPU peer copy bandwidth (slowest pair)", "d2d_gbps", "GB/s"),
        ),
        prometheus=(
            PromMetric("h2d_gbps", "kiln_gpu_host_to_device_gbps", "nvbandwidth host-to-device copy bandwidth, GB/s"),
            PromMetric("d2h_gbps", "kiln_gpu_device_to_host_gbps", "nvbandwidth device-to-host copy bandwidth, GB/s"),
        ),
        outliers=(
            OutlierMetric("h2d", "lowest host-to-device GPU", ("h2d_gbps",), "GB/s", True, lowest("h2d_gbps")),
            OutlierMetric("d2h", "lowest device-to-host GPU", ("d2h_gbps",), "GB/s", True, lowest("d2h_gbps")),
        ),
    )  # fmt: skip

    def commands(self, params: Any, node: NodeContext) -> list[Command]:
        p: HostBwParams = params
        argv: tuple[str, ...] = (p.binary,)
        for test in split_tests(p.tests):
            argv += ("-t", test)
        env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
        query = ("nvidia-smi", f"--query-gpu={','.join(PCIE_FIELDS)}", "--format=csv,noheader,nounits")
        return [
            Command(argv=argv, timeout=float(p.timeout_s), env=env, label=NVBW_LABEL),
            Command(argv=query, timeout=PCIE_TIMEOUT_S, label=PCIE_LABEL, read_only=True),
        ]

    def describe_failure(self, output: CommandOutput) -> str:
        said = [s.strip() for s in (output.stdout + "\n" + output.stderr).splitlines() if s.strip()]
        errors = [s for s in said if s.lower().startswith("error") or "CUDA_ERROR" in s or "NVML" in s]
        return (errors or said or ["no output"])[-1][:300]

    def parse(self, outputs: list[CommandOutput]) -> list[Measurement]:
        nvbw = next((o for o in outputs if o.command.label == NVBW_LABEL), None)
        pcie = next((o for o in outputs if o.command.label == PCIE_LABEL), None)
        if nvbw is None:
            raise EvidenceError("no nvbandwidth output to judge")
        if not nvbw.stdout.strip():
            raise EvidenceError("nvbandwidth printed nothing")
        report = parse_report(nvbw.stdout)
        wanted = requested_tests(nvbw.command.argv) or [H2D, D2H, D2D_READ]
        for test in wanted:
            _require(report, test, nvbw.stdout)
        links = parse_pcie_query(pcie.stdout) if pcie is not None else []
        return measurements_from(report) + links

    def evaluate(self, measurements: list[Measurement], thresholds: Any, node: NodeContext) -> Verdict:
        t: HostBwThresholds = thresholds
        gpus = _expected_gpus(measurements, node)
        if not gpus:
            return Verdict(ERROR, "nvbandwidth measured no GPU")
        links = LinkBook(measurements)
        findings = _missing(measurements, gpus)
        for name in ("h2d_gbps", "d2h_gbps", "d2d_gbps"):
            findings += _unjudged(measurements, name, getattr(t, FLOORS[name]))
        findings += _judge_host(measurements, t, links)
        findings += _judge_peers(measurements, t.min_d2d_gbps, gpus)
        return Verdict.from_findings(findings, pass_reason=_pass_reason(measurements, t, len(gpus)))


def _require(report: Report, test: str, text: str) -> None:
    block = report.tests.get(test)
    if block is not None and block.error:
        raise EvidenceError(f"nvbandwidth {test} failed: {block.error[:200]}")
    if block is None or block.matrix is None:
        if report.waived:
            why = f"it printed {report.waived} 'Waived' line(s): the test is not supported here (no peer access?)"
        else:
            said = [line.strip() for line in text.splitlines() if line.strip()]
            errors = [line for line in said if line.lower().startswith("error")]
            why = f"it said {errors[0][:100]!r}" if errors else f"its output starts {(said or [''])[0][:60]!r}"
        raise EvidenceError(f"nvbandwidth printed no {test} result ({why})")


def _expected_gpus(measurements: list[Measurement], node: NodeContext) -> list[int]:
    if node.expected_gpus is not None:
        return list(range(node.expected_gpus))
    listed = [m.gpu for m in measurements if m.name == "device" and m.gpu is not None]
    if listed:
        return sorted(listed)
    return sorted({m.gpu for m in measurements if m.name in ("h2d_gbps", "d2h_gbps") and m.gpu is not None})


def _missing(measurements: list[Measurement], gpus: list[int]) -> list[Finding]:
    """`error` for each GPU absent from a matrix (one finding naming every matrix it is absent from),
    then for N/A cells: a GPU's host copy, a GPU N/A with every peer, the other N/A pairs."""
    absent: dict[int, list[str]] = defaultdict(list)
    findings = _host_gaps(measurements, gpus, absent)
    for test, pairs in _peer_matrices(measurements).items():
        seen = {g for pair in pairs for g in pair}
        for gpu in gpus:
            if gpu not in seen:
                absent[gpu].append(test)
        findings += _unmeasured_pairs(pairs, [g for g in gpus if g in seen], test)
    missing = [
        Finding(ERROR, f"GPU {g}: not in the {_listed(tests)} {'matrix' if len(tests) == 1 else 'matrices'}")
        for g, tests in absent.items()
    ]
    return missing + findings


def _host_gaps(measurements: list[Measurement], gpus: list[int], absent: dict[int, list[str]]) -> list[Finding]:
    """Host matrices: GPUs absent (added to `absent`), and `error` for each N/A cell."""
    findings = []
    for name, test in (("h2d_gbps", H2D), ("d2h_gbps", D2H)):
        rows = [m for m in measurements if m.name == name]
        if not rows:
            continue  # not asked for (the tests param)
        for gpu in gpus:
            mine = [m for m in rows if m.gpu == gpu]
            if not mine:
                absent[gpu].append(test)
            elif any(m.value is None for m in mine):
                findings.append(Finding(ERROR, f"GPU {gpu}: {WORDS[name]} not measured (nvbandwidth printed N/A)"))
    return findings


def _peer_matrices(measurements: list[Measurement]) -> dict[str, dict[tuple[int, int], Measurement]]:
    """Test name -> (src, dst) -> its d2d_gbps cell, for the peer tests present."""
    out: dict[str, dict[tuple[int, int], Measurement]] = {}
    for test, kind in ((D2D_READ, "read"), (D2D_WRITE, "write")):
        pairs = {
            (int(m.labels["src"]), int(m.labels["dst"])): m
            for m in measurements
            if m.name == "d2d_gbps" and m.labels.get("test") == kind
        }
        if pairs:
            out[test] = pairs
    return out


def _listed(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _unmeasured_pairs(pairs: dict[tuple[int, int], Measurement], present: list[int], test: str) -> list[Finding]:
    """A GPU whose every pair is N/A (named once), then the other N/A pairs."""
    unmeasured = [
        (s, d) for s in present for d in present if s != d and getattr(pairs.get((s, d)), "value", None) is None
    ]
    isolated = [g for g in present if len(present) > 1 and sum(g in p for p in unmeasured) == 2 * (len(present) - 1)]
    findings = [
        Finding(ERROR, f"GPU {gpu}: no peer copy measured in {test} (N/A with every other GPU: no peer access)")
        for gpu in isolated
    ]
    rest = [f"GPU {s} -> GPU {d}" for s, d in unmeasured if s not in isolated and d not in isolated]
    if rest:
        more = f" and {len(rest) - 4} more" if len(rest) > 4 else ""
        findings.append(Finding(ERROR, f"peer copies not measured in {test} (N/A): {', '.join(rest[:4])}{more}"))
    return findings


def _unjudged(measurements: list[Measurement], name: str, floor: float | None) -> list[Finding]:
    values = [m for m in measurements if m.name == name and m.value is not None]
    if floor is not None or not values:
        return []
    worst = min(values, key=lambda m: m.value or 0.0)
    return [Finding(WARN, f"{WORDS[name]} lowest {worst.value:.1f} GB/s: not judged (no {FLOORS[name]} floor set)")]


def _judge_host(measurements: list[Measurement], t: HostBwThresholds, links: LinkBook) -> list[Finding]:
    slow: dict[int, list[Measurement]] = defaultdict(list)
    for name in ("h2d_gbps", "d2h_gbps"):
        floor = getattr(t, FLOORS[name])
        for m in measurements:
            if m.name != name or m.value is None or floor is None or m.gpu is None:
                continue
            m.threshold, m.ok = f">= {floor:g}", m.value >= floor
            if not m.ok:
                slow[m.gpu].append(m)
    return [Finding(FAIL, _slow_gpu_reason(gpu, bad, measurements, links)) for gpu, bad in sorted(slow.items())]


def _slow_gpu_reason(gpu: int, bad: list[Measurement], measurements: list[Measurement], links: LinkBook) -> str:
    parts = [f"{WORDS[m.name]} {m.value:.1f} GB/s (floor {m.threshold[3:]})" for m in bad]
    worst = min(bad, key=lambda m: m.value or 0.0)
    peers = [m.value for m in measurements if m.name == worst.name and m.gpu != gpu and m.value is not None]
    text = f"GPU {gpu} " + ", ".join(parts)
    if len(peers) >= 2:
        median = statistics.median(peers)
        ratio = (worst.value or 0.0) / median if median > 0 else 1.0
        if 0.4 <= ratio <= 0.6:
            text += f", about half its peers (median {median:.1f})"
        else:
            text += f", {ratio:.0%} of its peers' median {median:.1f}"
    link = links.describe(gpu)
    return text + (f"; {link}" if link else "")


def _judge_peers(measurements: list[Measurement], floor: float | None, gpus: list[int]) -> list[Finding]:
    if floor is None:
        return []
    pairs = [m for m in measurements if m.name == "d2d_gbps" and m.value is not None]
    for m in pairs:
        m.threshold, m.ok = f">= {floor:g}", (m.value or 0.0) >= floor
    slow = [m for m in pairs if not m.ok]
    if not slow:
        return []
    culprits = [g for g in gpus if _all_slow(pairs, g)]
    if len(culprits) == len(gpus):
        worst = min(slow, key=lambda m: m.value or 0.0)
        return [Finding(FAIL, f"every peer copy below the {floor:g} GB/s floor (lowest {_pair(worst)})")]
    return [_culprit(gpu, slow, floor) for gpu in culprits] + _other_slow_pairs(slow, culprits, floor)


def _other_slow_pairs(slow: list[Measurement], culprits: list[int], floor: float) -> list[Finding]:
    """The slow pairs no named GPU explains, slowest first (four shown)."""
    named = {str(g) for g in culprits}
    rest = sorted((m for m in slow if not {m.labels["src"], m.labels["dst"]} & named), key=lambda m: m.value or 0.0)
    if not rest:
        return []
    more = f" and {len(rest) - 4} more" if len(rest) > 4 else ""
    listed = ", ".join(_pair(m) for m in rest[:4])
    return [Finding(FAIL, f"peer copies below the {floor:g} GB/s floor: {listed}{more}")]


def _culprit(gpu: int, slow: list[Measurement], floor: float) -> Finding:
    """A GPU whose every peer copy, both ways, is below the floor: named once."""
    mine = [m for m in slow if str(gpu) in (m.labels["src"], m.labels["dst"])]
    worst = min(mine, key=lambda m: m.value or 0.0)
    return Finding(
        FAIL, f"GPU {gpu}: all {len(mine)} peer copies below the {floor:g} GB/s floor (lowest {_pair(worst)})"
    )


def _all_slow(pairs: list[Measurement], gpu: int) -> bool:
    mine = [m for m in pairs if str(gpu) in (m.labels["src"], m.labels["dst"])]
    return bool(mine) and not any(m.ok for m in mine)


def _pair(m: Measurement) -> str:
    return f"GPU {m.labels['src']} -> GPU {m.labels['dst']} {m.value:.1f} GB/s"


def _pass_reason(measurements: list[Measurement], t: HostBwThresholds, count: int) -> str:
    parts = []
    for name in ("h2d_gbps", "d2h_gbps", "d2d_gbps"):
        values = [m.value for m in measurements if m.name == name and m.value is not None]
        floor = getattr(t, FLOORS[name])
        if values:
            parts.append(
                f"{WORDS[name]} >= {min(values):.1f} GB/s" + (f" (floor {floor:g})" if floor is not None else "")
            )
    return f"{count} GPUs: " + ", ".join(parts)


class LinkBook:
    """Each GPU's PCIe link as nvidia-smi read it, found for an nvbandwidth GPU by its PCI bus id
    when nvbandwidth printed one (v0.5+), else by index (CUDA_DEVICE_ORDER=PCI_BUS_ID numbers CUDA
    devices in nvidia-smi's order)."""

    NAMES = ("pcie_width_current", "pcie_width_max", "pcie_gen_current", "pcie_gen_max")

    def __init__(self, measurements: list[Measurement]) -> None:
        self.links: dict[int, dict[str, Measurement]] = defaultdict(dict)
        for m in measurements:
            if m.name in self.NAMES and m.gpu is not None:
                self.links[m.gpu][m.name] = m
        self.by_bus = {
            bus_key(f["pcie_width_max"].labels.get("bus_id", "")): gpu
            for gpu, f in self.links.items()
            if "pcie_width_max" in f
        }
        self.device_bus = {m.gpu: m.labels.get("bus_id", "") for m in measurements if m.name == "device"}

    def describe(self, gpu: int) -> str:
        """'its PCIe link runs x8 of x16 (Gen4) at 00000000:9A:00.0', or '' when it was not read."""
        bus = bus_key(self.device_bus.get(gpu, ""))
        facts = self.links.get(self.by_bus[bus] if bus in self.by_bus else gpu, {})
        values = [facts[n].value if n in facts else None for n in self.NAMES]
        if any(v is None for v in values):
            return ""
        width, width_max, gen, gen_max = (int(v or 0) for v in values)
        at = facts["pcie_width_max"].labels.get("bus_id", "")
        if width < width_max:
            return f"its PCIe link runs x{width} of x{width_max} (Gen{gen}) at {at}"
        if gen < gen_max:
            return f"its PCIe link runs Gen{gen} of Gen{gen_max} (x{width}) at {at}"
        return f"its PCIe link reads Gen{gen} x{width}, full width and speed, at {at}"
