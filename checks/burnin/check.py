"""burn_in: gpu_burn under the probe's sampling mode, judged on compute results AND telemetry.

The command is the node probe in sampling mode wrapping gpu_burn
(`python3 - --sample INTERVAL -- gpu_burn [-tc] [-d] [-m N%] DURATION`, probe on stdin), so one
command yields gpu_burn's own output, NVML telemetry over the whole burn, and full probe documents
before and after (checks/probe/SCHEMA.md, "Sampling mode").

No evidence, no pass (gpu_burn's own "OK" is never enough):
- no gpu_burn output, or none of its progress/result lines -> `error` naming what is missing;
- no closing "Tested N GPUs:" list (gpu_burn prints it last) -> `error` "output incomplete";
- a GPU's error count printed negative (gpu_burn's 32-bit counter wrapped, see ERRORS_WRAPPED)
  -> `fail` (errors, count unknown); an error count that cannot be read -> `error`;
- a GPU the driver lists but gpu_burn never mentions -> `error` (it was not tested);
- no telemetry samples, or clock-event reasons unreadable on a GPU -> `error`;
- 0 Gflop/s, or no progress line at all for a GPU, is a `fail` even when gpu_burn printed OK
  (wilicc/gpu-burn issue 124: it prints "GPU 0: OK" after doing no work): the GPU did not compute;
- compute errors, FAULTY, a dead worker, Gflop/s under the profile floor or far under the node's
  other GPUs -> `fail`;
- HW slowdown, SW/HW thermal slowdown or HW power brake in any sample -> `fail` naming the GPU,
  the reason and when (sw_power_cap is expected at full load and is not judged);
- volatile ECC counters rising during the burn, or new row remaps (before -> after) -> `fail`;
- with `node_power` on, the BMC's node power (checks/burnin/power.py): missing or too sparse ->
  `error`, peak or steady above the profile's node maximum -> `fail`, below the GPUs' own -> `error`.
Xid events are not read here: the ECC/Xid check scans the kernel log since the run started, which
covers the burn-in window.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from typing import Any, ClassVar

from checks.burnin.gpu_burn import burn_measurements, parse_gpu_burn_text
from checks.burnin.power import EVIDENCE as NODE_POWER_EVIDENCE
from checks.burnin.power import check_node_power_thresholds, judge_node_power, node_power_measurements
from checks.burnin.telemetry import telemetry_measurements
from checks.core.base import (
    ERROR,
    FAIL,
    PASS,
    Check,
    Command,
    CommandOutput,
    EvidenceError,
    Finding,
    Measurement,
    NodeContext,
    ParamsError,
    Series,
    Verdict,
    register,
)
from checks.core.evidence import COUNT, Rule
from checks.core.presentation import (
    REPLACE_FAULTY_GPU,
    CertificateChart,
    FleetMetric,
    KeyMetric,
    OutlierMetric,
    Presentation,
    PromMetric,
    Remedy,
    TelemetryChart,
    TelemetryPanel,
    TrendRule,
    lowest,
)
from checks.core.sampling import NODE_POWER_SERIES, SAMPLING_LABEL, load_sampling
from checks.soak.data import PROFILE_THRESHOLDS as SOAK_PROFILES

# ----------------------------------------------------------------------------- the check

MODES = ("fp32", "fp32_tc", "fp64", "fp64_tc")
# gpu_burn compares every result matrix against the first GPU's; any mismatch is a compute error.
GPU_BURN_SIGTERM_WAIT_S = 30  # gpu-burn's SIGTERM_TIMEOUT_THRESHOLD_SECS default before SIGKILL


def burn_mode(argv: list[str]) -> str:
    doubles = "-d" in argv
    tensor = "-tc" in argv
    return ("fp64" if doubles else "fp32") + ("_tc" if tensor else "")


@dataclass
class BurnInParams:
    # Short by default for sweeps; the acceptance plan sets hours (e.g. 43200 for 12 h).
    duration_s: int = 60
    use_tensor_cores: bool = False  # gpu_burn -tc
    use_doubles: bool = False  # gpu_burn -d (FP64)
    # gpu_burn -m N%; None = the tool's default (90% of free memory, gpu-burn USEMEM).
    memory_percent: int | None = None
    # None = auto: duration/2000, at least 1 s; short runs sample every second. The probe prints
    # ~26 bytes per GPU per sample (sampling schema 2, arrays per GPU): an 8-GPU 12 h burn is
    # ~0.4 MB at this default and ~9 MB at 1 s (under the transport's 16 MiB cap).
    sample_interval_s: float | None = None
    # None = duration + max(120 s, 5%): the before/after probes, gpu_burn's start-up and its
    # 30 s SIGTERM grace (gpu-burn SIGTERM_TIMEOUT_THRESHOLD_SECS) all fit.
    timeout_s: int | None = None

    # The tool on the node's PATH (gpu-burn's build names it gpu_burn); a full path where it is not.
    gpu_burn_path: str = "gpu_burn"
    # gpu_burn -c FILE: compare.ptx is looked up in the working directory unless given.
    compare_kernel: str = ""
    # Also sample the node's BMC power (probe --node-power, ipmitool in band). Off by default: many
    # nodes have no ipmitool or no IPMI device the SSH user may open (/dev/ipmi0 is root's), and
    # node power asked for and missing is `error` (never a pass), so on by default it would error
    # such nodes' burn-in. Off, nothing is read or judged; a plan item turns it on where readable.
    node_power: bool = False

    def __post_init__(self) -> None:
        if self.duration_s < 1:
            raise ParamsError(f"param 'duration_s': must be >= 1, got {self.duration_s}")
        if self.memory_percent is not None and not 1 <= self.memory_percent <= 100:
            raise ParamsError(f"param 'memory_percent': must be 1..100, got {self.memory_percent}")
        if self.sample_interval_s is not None and self.sample_interval_s <= 0:
            raise ParamsError(f"param 'sample_interval_s': must be > 0, got {self.sample_interval_s}")
        if not self.gpu_burn_path:
            raise ParamsError("param 'gpu_burn_path': must not be empty")
        # gpu_burn matches options by substring in every argument ("-d" anywhere means doubles,
        # "-h" anywhere prints help), so a kernel path containing one would silently change the run.
        for flag in ("-d", "-tc", "-h", "-l", "-i", "-m", "-c", "-stts"):
            if flag in self.compare_kernel:
                raise ParamsError(f"param 'compare_kernel': gpu_burn would read {flag!r} in the path as an option")

    @property
    def interval(self) -> float:
        if self.sample_interval_s is not None:
            return self.sample_interval_s
        return max(1.0, self.duration_s / 2000.0)

    @property
    def limit_s(self) -> int:
        if self.timeout_s is not None:
            return self.timeout_s
        return self.duration_s + max(120, int(self.duration_s * 0.05))


@dataclass
class BurnInThresholds:
    # Per-mode Gflop/s floors per GPU (gpu_burn's matmul). None = not judged against a floor;
    # the sibling comparison below still applies. Profile values in BurnIn.profile_thresholds.
    min_gflops_fp32: float | None = None
    min_gflops_fp32_tc: float | None = None
    min_gflops_fp64: float | None = None
    min_gflops_fp64_tc: float | None = None
    # A GPU this far below the node's median is out of family even when above the floor: GPUs of
    # one baseboard run the same clocks and cooling. Conservative default; tune per site.
    max_sibling_gflops_deficit_pct: float | None = 10.0
    # gpu_burn checks every result against a reference: any mismatch is a faulty GPU.
    max_compute_errors: int = 0
    # HW slowdown / thermal / power-brake clock events during the burn (NVML clock event reasons).
    allow_throttle: bool = False
    # NVIDIA GPU memory error management docs: any new uncorrectable ECC error needs attention.
    max_new_ecc_uncorrected: int | None = 0
    # None = recorded, not judged (single-bit errors are corrected in hardware).
    max_new_ecc_corrected: int | None = None
    # A row remap during the burn means memory produced errors under load (NVIDIA row remapping
    # docs); 0 allowed. Conservative default; None = record only.
    max_new_row_remaps: int | None = 0
    # Node power (param node_power), checks/burnin/power.py: the node's rated maximum, W (profile
    # values below); None = recorded, not judged.
    node_max_w: float | None = None
    # The most a node may draw beside its GPUs, W (steady node - GPU sum). None: NVIDIA publishes no
    # figure (as the heat soak's platform_overhead_w); set it per site from a known-good node.
    max_node_over_gpu_w: float | None = None
    # Share of the steady window's samples needing a node power reading: a BMC may drop a few
    # answers, not a tenth of them (the heat soak's min_coverage, checks/soak/data.py).
    node_power_min_coverage: float = 0.9

    def __post_init__(self) -> None:
        for name in ("max_sibling_gflops_deficit_pct", "max_new_ecc_uncorrected", "max_new_ecc_corrected"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ParamsError(f"threshold {name!r}: must be >= 0 or None, got {value}")
        check_node_power_thresholds(self)


# How the certificate names these measurements (checks/core/presentation.py measurement_labels).
BURN_IN_LABELS = (
    ("gflops", "Throughput per GPU"),
    ("errors", "gpu_burn errors"),
    ("ecc_new_uncorrected", "New uncorrected ECC errors"),
    ("row_remaps_new", "New row remaps"),
)


@register
class BurnIn(Check):
    key: ClassVar[str] = "burn_in"
    name: ClassVar[str] = "Burn-in"
    description: ClassVar[str] = "gpu_burn under NVML telemetry: errors, Gflop/s, throttling, new ECC errors."
    # 3 s sampled every 0.5 s: the simulated gpu_burn prints a progress record about once a second
    # and its final per-GPU verdicts however short the run (testbed/sim/tools/gpu_burn: tests burn
    # for 2-5 s), and six NVML samples a GPU cover its load.
    simulator_params: ClassVar[dict[str, Any]] = {"duration_s": 3, "sample_interval_s": 0.5}
    Params: ClassVar[type] = BurnInParams

    # The before/after probes and gpu_burn's start-up and 30 s SIGTERM grace (the timeout allows
    # 120 s for those: BurnInParams.timeout_s).
    OVERHEAD_S: ClassVar[float] = 60.0

    def declared_s(self, params: Any) -> float:
        return float(params.duration_s)

    Thresholds: ClassVar[type] = BurnInThresholds
    presentation: ClassVar[Presentation] = Presentation(
        measurement_labels=BURN_IN_LABELS,
        chart="burn_in",
        rank=20,
        telemetry=TelemetryChart(
            panels=(
                TelemetryPanel("temp_gpu", "GPU temperature", "C"),
                TelemetryPanel("power_w", "Power", "W"),
                # One curve per node, stored when the burn-in sampled node power (param node_power).
                TelemetryPanel(NODE_POWER_SERIES, "Node power (BMC)", "W", optional=True),
                TelemetryPanel("sm_clock_mhz", "SM clock", "MHz"),
            ),
            spans="throttle_event",
            spans_panel="sm_clock_mhz",  # a throttle is a clock held down
            # The NVML slowdown temperature: burn-in does not store it; the DLC and inventory checks do.
            limit=("slowdown_temp", "gpu_temp_slowdown"),
        ),
        fleet=(FleetMetric("temp_max", better="lower", gpu_agg="max"),),
        # Wrong results under load, or a worker that died: the GPU itself (Gflop/s, throttling and
        # ECC keep the general fallback: their cause may be cooling or power, not the GPU).
        remedies=(Remedy("compute", REPLACE_FAULTY_GPU, ("errors", "tool_verdict", "iterations")),),
        key_metrics=(
            KeyMetric(
                "gflops",
                "Burn-in Gflop/s per GPU",
                "gflops",
                "Gflop/s",
                per_gpu=True,
                gpu_agg="min",
                fleet_default=True,
            ),
        ),
        trends=(TrendRule("temp_max", +1, 3.0, False, "GPU temperature under load rising", "C"),),
        prometheus=(
            PromMetric("gflops", "kiln_gpu_gflops", "gpu_burn throughput per GPU, Gflop/s"),
            PromMetric("temp_max", "kiln_gpu_burn_temp_max_celsius", "Hottest GPU temperature during burn-in, C"),
        ),
        # The slowest GPU sets the node's pace in a synchronous job.
        outliers=(OutlierMetric("gflops", "slowest GPU", ("gflops",), "Gflop/s", True, lowest("gflops")),),
        certificate_charts=(
            CertificateChart(
                "Burn-in throughput per GPU", "bars", ("gflops",), "Gflop/s", x_title="node (a bar per GPU)"
            ),
        ),
    )  # fmt: skip
    evidence: ClassVar[dict[str, Rule]] = {
        "errors": COUNT,
        # gpu_burn prints -1 processed for a dead worker (gpu_burn-drv.cpp: processed = -1).
        "iterations": Rule("an iteration count (-1: worker died)", low=-1, integer=True),
        "progress_records": COUNT,
        "sample_count": COUNT,
        "clock_event_reasons_readable": COUNT,
        "ecc_new_uncorrected": COUNT,
        "ecc_new_corrected": COUNT,
        "row_remaps_new": COUNT,
        **NODE_POWER_EVIDENCE,
    }
    # Floors in Gflop/s per GPU. Datasheet dense peaks: H100 SXM5 and H200 SXM: FP64 34 TF, FP64
    # Tensor Core 67 TF, FP32 67 TF (NVIDIA H100 / H200 datasheets); A100 SXM4: FP64 9.7 TF, FP64
    # Tensor Core 19.5 TF, FP32 19.5 TF (NVIDIA A100 datasheet). gpu_burn's -tc with FLOATS is not
    # guaranteed to use TF32 (it depends on the cuBLAS math mode of the build), so the fp32_tc floor
    # is the FP32 one. Unless noted, a floor is ~45% of the dense peak: a conservative default that
    # only catches a GPU that is badly broken or clocked down; tune per site from a known-good node
    # (the sibling comparison catches the subtler outlier).
    # node_max_w is the heat soak's (checks/soak/data.py PROFILE_THRESHOLDS): NVIDIA DGX
    # H100 User Guide and DGX H200 datasheet ~10.2 kW max system power; DGX A100 User Guide 6.5 kW.
    profile_thresholds: ClassVar[dict[str, dict[str, Any]]] = {
        "H100-SXM-8": {
            "min_gflops_fp32": 30000.0,
            "min_gflops_fp32_tc": 30000.0,
            "min_gflops_fp64": 15000.0,
            "min_gflops_fp64_tc": 30000.0,
            "node_max_w": SOAK_PROFILES["H100-SXM-8"]["node_max_w"],
        },
        "H200-SXM-8": {
            "min_gflops_fp32": 30000.0,
            "min_gflops_fp32_tc": 30000.0,
            "min_gflops_fp64": 15000.0,
            "min_gflops_fp64_tc": 30000.0,
            "node_max_w": SOAK_PROFILES["H200-SXM-8"]["node_max_w"],
        },
        "A100-SXM-8": {
            "min_gflops_fp32": 9000.0,
            "min_gflops_fp32_tc": 9000.0,
            "min_gflops_fp64": 4500.0,
            # Measured: 16890-17177 Gflop/s per GPU with -d -tc on 8x A100-SXM4-80GB (microsoft/
            # superbenchmark gpu_burn.log, tests/fixtures/gpu-burn); ~18% margin below that.
            "min_gflops_fp64_tc": 14000.0,
            "node_max_w": SOAK_PROFILES["A100-SXM-8"]["node_max_w"],
        },
    }

    def commands(self, params: Any, node: NodeContext) -> list[Command]:
        from checks.probe import probe_source  # lazy: reading the script is I/O, not needed to parse

        flags: list[str] = []
        if params.use_tensor_cores:
            flags.append("-tc")
        if params.use_doubles:
            flags.append("-d")
        if params.memory_percent is not None:
            flags += ["-m", f"{params.memory_percent}%"]
        if params.compare_kernel:
            flags += ["-c", params.compare_kernel]
        power = ("--node-power",) if params.node_power else ()
        argv = ("python3", "-", "--sample", f"{params.interval:g}", *power, "--", params.gpu_burn_path, *flags)
        return [
            Command(
                argv=(*argv, str(params.duration_s)),
                stdin=probe_source(),
                timeout=float(params.limit_s),
                label=SAMPLING_LABEL,
            )
        ]

    def describe_failure(self, output: CommandOutput) -> str:
        # The probe exits with gpu_burn's exit code and keeps gpu_burn's stderr in its JSON.
        try:
            doc = json.loads(output.stdout)
        except ValueError:
            doc = None
        if isinstance(doc, dict):
            child = doc.get("child")
            if isinstance(child, dict) and child.get("exit_code") not in (0, None):
                text = str(child.get("stderr") or "") or str(child.get("stdout") or "")
                lines = [line.strip() for line in text.replace("\r", "\n").splitlines() if line.strip()]
                why = lines[-1][:200] if lines else "no output"
                return f"gpu_burn exited {child.get('exit_code')}: {why}"
            if isinstance(doc.get("errors"), list) and doc["errors"]:
                return "probe: " + "; ".join(str(e) for e in doc["errors"][:3])
        return super().describe_failure(output)

    # --- parse --------------------------------------------------------------------------------

    def parse(self, outputs: list[CommandOutput]) -> list[Measurement]:
        doc = load_sampling(outputs)
        if doc.child is None:
            raise EvidenceError("the sampling probe ran no gpu_burn (its output has no 'child')")
        if not doc.child.stdout.strip():
            lines = [line.strip() for line in doc.child.stderr.splitlines() if line.strip()]
            hint = f"; stderr: {lines[-1][:200]}" if lines else ""
            raise EvidenceError(f"gpu_burn printed nothing on stdout (exit code {doc.child.exit_code}{hint})")
        try:
            result = parse_gpu_burn_text(doc.child.stdout)
        except EvidenceError as exc:
            raise EvidenceError(f"{exc}: {doc.child.stdout.strip()[-120:]!r}") from None
        out = [Measurement(name="burn_mode", text=burn_mode(doc.child.argv))]
        if doc.child.duration_s is not None:
            out.append(Measurement(name="burn_duration_s", value=doc.child.duration_s, unit="s"))
        out += burn_measurements(result)
        out += [Measurement(name="gpu_burn_warning", text=w) for w in result.warnings]
        out += telemetry_measurements(doc)
        out += node_power_measurements(doc)
        return out

    def series(self, outputs: list[CommandOutput]) -> list[Series]:
        try:
            return load_sampling(outputs).series()
        except EvidenceError:
            return []

    # --- evaluate -----------------------------------------------------------------------------

    def evaluate(self, measurements: list[Measurement], thresholds: Any, node: NodeContext) -> Verdict:
        facts = _Facts(measurements)
        findings: list[Finding] = []
        mode = facts.text("burn_mode") or "fp32"
        burned = sorted(facts.gpus("gflops"))
        expected = facts.value("probe_gpu_count")
        if expected is None and node.expected_gpus is not None:
            expected = float(node.expected_gpus)
        if expected is not None:
            untested = [i for i in range(int(expected)) if i not in burned]
            for index in untested:
                findings.append(Finding(ERROR, f"GPU {index}: not in gpu_burn's output (it was not tested)"))
        if not burned:
            findings.append(Finding(ERROR, "gpu_burn reported no GPU"))

        findings += self._judge_compute(facts, thresholds, mode, burned)
        findings += self._judge_telemetry(facts, thresholds, burned)
        power, power_clause = judge_node_power(measurements, thresholds)
        findings += power

        if not any(f.status != PASS for f in findings):
            rates = [facts.value("gflops", i) or 0.0 for i in burned]
            temps = [v for i in burned if (v := facts.value("temp_gpu_max", i)) is not None]
            duration = facts.value("burn_duration_s")
            hot = f"; peak GPU {max(temps):g} C" if temps else ""
            hot += f"; {power_clause}" if power_clause else ""
            span = f" for {duration:.0f}s" if duration is not None else ""
            reason = (
                f"{len(burned)} GPUs burned{span} ({mode}): {min(rates):,.0f}-{max(rates):,.0f} Gflop/s, "
                f"no compute errors, no throttling, no new ECC errors{hot} (Xid: see the ECC/Xid check)"
            )
            return Verdict.from_findings(findings, pass_reason=reason)
        return Verdict.from_findings(findings)

    def _judge_compute(self, facts: _Facts, thresholds: Any, mode: str, burned: list[int]) -> list[Finding]:
        findings: list[Finding] = []
        floor = getattr(thresholds, f"min_gflops_{mode}", None)
        rates = {i: facts.value("gflops", i) for i in burned}
        positive = [r for r in rates.values() if r is not None and r > 0]
        median = statistics.median(positive) if len(positive) >= 2 else None
        for index in burned:
            findings += _judge_errors(facts, thresholds, index)
            findings += _judge_rate(facts, thresholds, mode, index, floor, median)
        return findings

    def _judge_telemetry(self, facts: _Facts, thresholds: Any, burned: list[int]) -> list[Finding]:
        findings: list[Finding] = []
        samples = facts.value("sample_count")
        if not samples:
            why = "; ".join(facts.texts("sampling_error")[:3]) or "the probe took none"
            return [Finding(ERROR, f"no telemetry samples during the burn ({why})")]
        sampled = facts.gpus("clock_event_reasons_readable")
        for index in burned:
            if index not in sampled:
                findings.append(Finding(ERROR, f"GPU {index}: not in any telemetry sample"))
        if not thresholds.allow_throttle:
            for index in sampled:
                if facts.value("clock_event_reasons_readable", index) == 0:
                    findings.append(
                        Finding(
                            ERROR, f"GPU {index}: clock event reasons unreadable in every sample (throttling unseen)"
                        )
                    )
            by_gpu: dict[int, list[str]] = {}
            for m in facts.all("throttle_event"):
                m.ok = False
                by_gpu.setdefault(m.gpu if m.gpu is not None else -1, []).append(m.labels.get("when", m.text))
            for index, events in sorted(by_gpu.items()):
                shown = "; ".join(events[:3]) + (f"; and {len(events) - 3} more" if len(events) > 3 else "")
                findings.append(Finding(FAIL, f"GPU {index}: clock slowdown during the burn: {shown}"))
        for name, limit, what in (
            ("ecc_new_uncorrected", thresholds.max_new_ecc_uncorrected, "new uncorrectable ECC errors"),
            ("ecc_new_corrected", thresholds.max_new_ecc_corrected, "new correctable ECC errors"),
            ("row_remaps_new", thresholds.max_new_row_remaps, "new row remaps"),
        ):
            if limit is None:
                continue
            for index in sampled:
                m = facts.get(name, index)
                if m.value is None:
                    if name.startswith("ecc"):  # row remap availability is ecc_health's concern
                        findings.append(Finding(ERROR, f"GPU {index}: {what}: {m.labels.get('missing', 'unreadable')}"))
                    continue
                m.threshold, m.ok = f"<= {limit}", m.value <= limit
                if not m.ok:
                    findings.append(Finding(FAIL, f"GPU {index}: {m.value:.0f} {what} during the burn"))
        return findings


def _judge_errors(facts: _Facts, thresholds: Any, index: int) -> list[Finding]:
    """One GPU's dead worker, compute error count and FAULTY verdict."""
    findings: list[Finding] = []
    verdict = facts.text("tool_verdict", index)
    errors = facts.value("errors", index)
    iterations = facts.value("iterations", index)
    if iterations == -1:
        facts.get("iterations", index).ok = False
        findings.append(Finding(FAIL, f"GPU {index}: gpu_burn worker died"))
    count = facts.get("errors", index)
    wrapped = count.labels.get("wrapped")
    count.threshold = f"<= {thresholds.max_compute_errors}"
    if errors is not None:
        count.ok = errors <= thresholds.max_compute_errors
        if not count.ok:
            findings.append(Finding(FAIL, f"GPU {index}: {errors:.0f} compute errors (gpu_burn FAULTY)"))
    elif wrapped:
        count.ok = False  # see ERRORS_WRAPPED: not zero, count unknown
        why = f"gpu_burn's error counter wrapped to {wrapped} (WARNING!): more than it can count"
        findings.append(Finding(FAIL, f"GPU {index}: compute errors ({why})"))
    elif iterations is not None:
        count.threshold = ""
        findings.append(
            Finding(ERROR, f"GPU {index}: compute error count unreadable ({facts.missing('errors', index)})")
        )
    if verdict == "FAULTY":
        said = facts.get("tool_verdict", index)
        said.threshold, said.ok = "== OK", False  # the triage's evidence and remedy for this GPU
    if verdict == "FAULTY" and not wrapped and (errors is None or errors <= thresholds.max_compute_errors):
        findings.append(Finding(FAIL, f"GPU {index}: gpu_burn verdict FAULTY"))
    return findings


def _judge_rate(
    facts: _Facts, thresholds: Any, mode: str, index: int, floor: float | None, median: float | None
) -> list[Finding]:
    """One GPU's Gflop/s: none or 0 is a fail; then the profile floor and the node's median."""
    rate = facts.value("gflops", index)
    said_ok = " (gpu_burn printed OK but made no progress)" if facts.text("tool_verdict", index) == "OK" else ""
    m = facts.get("gflops", index)
    if rate is None:
        m.ok = False
        return [Finding(FAIL, f"GPU {index}: no Gflop/s reported{said_ok or ' (no progress line)'}")]
    if rate <= 0:
        m.threshold, m.ok = "> 0", False
        return [Finding(FAIL, f"GPU {index}: 0 Gflop/s{said_ok}")]
    findings: list[Finding] = []
    limits = []
    if floor is not None:
        limits.append(f">= {floor:g}")
        if rate < floor:
            findings.append(Finding(FAIL, f"GPU {index}: {rate:,.0f} Gflop/s < {floor:,.0f} ({mode} floor)"))
    deficit = thresholds.max_sibling_gflops_deficit_pct
    if median is not None and deficit is not None:
        least = median * (1 - deficit / 100.0)
        limits.append(f">= {least:.0f} (median - {deficit:g}%)")
        if rate < least:
            below = (1 - rate / median) * 100
            findings.append(
                Finding(FAIL, f"GPU {index}: {rate:,.0f} Gflop/s is {below:.0f}% below the node's median {median:,.0f}")
            )
    m.threshold = ", ".join(limits)
    m.ok = not findings
    return findings


class _Facts:
    """Measurements by (name, gpu) for evaluate; absent is missing, never zero."""

    def __init__(self, measurements: list[Measurement]) -> None:
        self.measurements = measurements
        self.by_key: dict[tuple[str, int | None], Measurement] = {}
        for m in measurements:
            self.by_key.setdefault((m.name, m.gpu), m)

    def get(self, name: str, gpu: int | None = None) -> Measurement:
        found = self.by_key.get((name, gpu))
        if found is None:
            found = Measurement(name=name, gpu=gpu, labels={"missing": "measurement absent"})
        return found

    def value(self, name: str, gpu: int | None = None) -> float | None:
        return self.get(name, gpu).value

    def missing(self, name: str, gpu: int | None = None) -> str:
        return self.get(name, gpu).labels.get("missing") or "not reported"

    def text(self, name: str, gpu: int | None = None) -> str:
        return self.get(name, gpu).text

    def texts(self, name: str) -> list[str]:
        return [m.text for m in self.measurements if m.name == name]

    def all(self, name: str) -> list[Measurement]:
        return [m for m in self.measurements if m.name == name]

    def gpus(self, name: str) -> set[int]:
        return {m.gpu for m in self.measurements if m.name == name and m.gpu is not None}
