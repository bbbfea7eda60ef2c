"""burn_in: gpu_burn under the probe's sampling mode, judged on compute results AND telemetry.

The command is the node probe in sampling mode wrapping gpu_burn
(`python3 - --sample INTERVAL -- gpu_burn [-tc] [-d] [-m N%] DURATION`, probe on stdin), so one
command yields gpu_burn's own output, NVML telemetry over the whole burn, and full probe documents
before and after (checks/probe/SCHEMA.md, "Sampling mode").

No evidence, no pass (gpu_burn's own "OK" is never enough):
- no gpu_burn output, or none of its progress/result lines -> `error` naming what is missing;
- a GPU the driver lists but gpu_burn never mentions -> `error` (it was not tested);
- no telemetry samples, or clock-event reasons unreadable on a GPU -> `error`;
- 0 Gflop/s, or no progress line at all for a GPU, is a `fail` even when gpu_burn printed OK
  (wilicc/gpu-burn issue 124: it prints "GPU 0: OK" after doing no work): the GPU did not compute;
- compute errors, FAULTY, a dead worker, Gflop/s under the profile floor or far under the node's
  other GPUs -> `fail`;
- HW slowdown, SW/HW thermal slowdown or HW power brake in any sample -> `fail` naming the GPU,
  the reason and when (sw_power_cap is expected at full load and is not judged);
- volatile ECC counters rising during the burn, or new row remaps (before -> after) -> `fail`.
Xid events are not read here: the ECC/Xid check scans the kernel log since the run started, which
covers the burn-in window.
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass, field
from typing import Any, ClassVar

from checks.base import (
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
from checks.parsers import Parsed, register_parser
from checks.sampling import JUDGED_CLOCK_REASONS, SAMPLING_LABEL, SamplingDoc, load_sampling, probe_gpu

# ----------------------------------------------------------------------------- gpu_burn parser

# One progress record. The real tool prints "\r" before each, so captured text has many records on
# one line (tests/fixtures/gpu-burn); current builds append "  power: N W - ...".
_PROGRESS = re.compile(
    r"(?P<pct>\d+(?:\.\d+)?)%\s+proc'd:\s*"
    r"(?P<procd>(?:-?\d+\s*\(\s*(?:-?[\d.]+|-?inf|nan)\s*Gflop/s\)\s*(?:-\s+)?)+)"
    r"\s*errors:\s*(?P<errors>(?:\d+\s*(?:\((?:WARNING|DIED)!\))?\s*(?:-\s+)?)+)"
    r"(?:\s*temps:\s*(?P<temps>(?:(?:\d+\s*C|--)\s*(?:-\s+)?)+))?"
)
_PROCD_ITEM = re.compile(r"(-?\d+)\s*\(\s*(-?[\d.]+|-?inf|nan)\s*Gflop/s\)")
_ERROR_ITEM = re.compile(r"(\d+)\s*(\((?:WARNING|DIED)!\))?")
_TEMP_ITEM = re.compile(r"(\d+)\s*C|--")
_VERDICT = re.compile(r"^\s*GPU\s+(\d+):\s*(OK|FAULTY)\s*$", re.MULTILINE)
_TESTED = re.compile(r"Tested\s+(\d+)\s+GPUs:")
# `nvidia-smi -L`, which gpu_burn runs first: "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-...)".
_LISTED = re.compile(r"^GPU\s+(\d+):\s+.+\(UUID:\s*GPU-", re.MULTILINE)
NO_PROGRESS = "no progress line printed for this GPU"


@dataclass
class BurnGpu:
    index: int
    gflops: float | None = None  # last reported
    iterations: int | None = None  # last reported proc'd count; -1 = worker died
    errors: int | None = None  # total over the run (see _total_errors)
    temp_max: int | None = None
    verdict: str | None = None  # OK / FAULTY, None when not printed


@dataclass
class BurnResult:
    gpus: dict[int, BurnGpu]
    tested: int | None
    listed: int
    records: int
    warnings: list[str] = field(default_factory=list)


def _total_errors(counts: list[int]) -> int:
    """gpu_burn resets its per-GPU error counts after each "Summary at:" line (every 10%), so a
    count that drops starts a new period: the total is the sum of each period's last value."""
    total = previous = 0
    for count in counts:
        if count < previous:
            total += previous
        previous = count
    return total + previous


def parse_gpu_burn_text(text: str) -> BurnResult:
    """gpu_burn stdout -> per-GPU facts. EvidenceError when it has no progress or result line."""
    text = text.replace("\r", "\n")
    gflops: dict[int, list[float | None]] = {}
    iterations: dict[int, list[int]] = {}
    errors: dict[int, list[int]] = {}
    temps: dict[int, list[int]] = {}
    warnings: list[str] = []
    records = 0
    for match in _PROGRESS.finditer(text):
        records += 1
        procd = _PROCD_ITEM.findall(match.group("procd"))
        errs = _ERROR_ITEM.findall(match.group("errors"))
        tmps = _TEMP_ITEM.findall(match.group("temps") or "")
        if len(errs) != len(procd) and not warnings:
            warnings.append(f"progress record {records}: {len(procd)} GPUs but {len(errs)} error counts")
        for index, (count, rate) in enumerate(procd):
            value = float(rate)
            gflops.setdefault(index, []).append(value if value == value and abs(value) != float("inf") else None)
            iterations.setdefault(index, []).append(int(count))
        for index, (count, note) in enumerate(errs):
            errors.setdefault(index, []).append(int(count))
            if note == "(DIED!)":
                iterations.setdefault(index, []).append(-1)
        for index, temp in enumerate(tmps):
            if temp:
                temps.setdefault(index, []).append(int(temp))
    verdicts = {int(i): v for i, v in _VERDICT.findall(text)}
    tested_match = _TESTED.search(text)
    tested = int(tested_match.group(1)) if tested_match else None
    listed = len(set(_LISTED.findall(text)))
    if not records and not verdicts and tested is None:
        raise EvidenceError("gpu_burn output has no progress line and no result ('Tested N GPUs') line")
    if "No clients are alive" in text:
        warnings.append("gpu_burn: no clients are alive (every worker died)")
    if tested is None:
        warnings.append("gpu_burn did not print its result list ('Tested N GPUs:'): cut short?")
    indices = set(gflops) | set(verdicts) | set(range(tested or 0))
    gpus: dict[int, BurnGpu] = {}
    for index in sorted(indices):
        gpu = BurnGpu(index=index, verdict=verdicts.get(index))
        if index in gflops:
            gpu.gflops = gflops[index][-1]
            gpu.iterations = iterations[index][-1]
        if index in errors:
            gpu.errors = _total_errors(errors[index])
        if index in temps:
            gpu.temp_max = max(temps[index])
        gpus[index] = gpu
    return BurnResult(gpus=gpus, tested=tested, listed=listed, records=records, warnings=warnings)


def burn_measurements(result: BurnResult) -> list[Measurement]:
    """The public measurements of one gpu_burn output (names are a contract)."""
    count = result.tested if result.tested is not None else max(len(result.gpus), result.listed)
    out = [
        Measurement(name="gpus", value=float(count), unit="GPUs"),
        Measurement(name="progress_records", value=float(result.records)),
    ]
    for gpu in result.gpus.values():
        no_progress = {} if gpu.iterations is not None else {"missing": NO_PROGRESS}
        out.append(
            Measurement(name="gflops", value=gpu.gflops, unit="Gflop/s", gpu=gpu.index, labels=dict(no_progress))
        )
        out.append(
            Measurement(
                name="iterations",
                value=None if gpu.iterations is None else float(gpu.iterations),
                gpu=gpu.index,
                labels={"died": "1"} if gpu.iterations == -1 else dict(no_progress),
            )
        )
        out.append(
            Measurement(
                name="errors",
                value=None if gpu.errors is None else float(gpu.errors),
                gpu=gpu.index,
                labels=dict(no_progress),
            )
        )
        temp = Measurement(
            name="temp_max", value=None if gpu.temp_max is None else float(gpu.temp_max), unit="C", gpu=gpu.index
        )
        if gpu.temp_max is None:
            temp.labels["missing"] = "gpu_burn printed no temperature for this GPU"
        out.append(temp)
        if gpu.verdict is not None:
            out.append(Measurement(name="tool_verdict", text=gpu.verdict, gpu=gpu.index))
    return out


@register_parser("gpu_burn")
def parse_gpu_burn(text: str) -> Parsed:
    result = parse_gpu_burn_text(text)
    return Parsed(burn_measurements(result), result.warnings)


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
    # None = auto: duration/2000, at least 1 s. ~200 bytes per GPU per sample, so an 8-GPU 12 h
    # burn stays near 3 MB of JSON; short runs sample every second.
    sample_interval_s: float | None = None
    # None = duration + max(120 s, 5%): the before/after probes, gpu_burn's start-up and its
    # 30 s SIGTERM grace (gpu-burn SIGTERM_TIMEOUT_THRESHOLD_SECS) all fit.
    timeout_s: int | None = None
    gpu_burn_path: str = "gpu_burn"
    # gpu_burn -c FILE: compare.ptx is looked up in the working directory unless given.
    compare_kernel: str = ""

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

    def __post_init__(self) -> None:
        for name in ("max_sibling_gflops_deficit_pct", "max_new_ecc_uncorrected", "max_new_ecc_corrected"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ParamsError(f"threshold {name!r}: must be >= 0 or None, got {value}")


@register
class BurnIn(Check):
    key: ClassVar[str] = "burn_in"
    name: ClassVar[str] = "GPU burn-in (gpu_burn + telemetry)"
    description: ClassVar[str] = (
        "gpu_burn on every GPU under NVML sampling: compute errors, Gflop/s per GPU against the profile "
        "and the node's other GPUs, thermal/power throttling, new ECC errors and row remaps."
    )
    Params: ClassVar[type] = BurnInParams
    Thresholds: ClassVar[type] = BurnInThresholds
    # Floors in Gflop/s per GPU. Datasheet dense peaks: H100 SXM5 and H200 SXM: FP64 34 TF, FP64
    # Tensor Core 67 TF, FP32 67 TF (NVIDIA H100 / H200 datasheets); A100 SXM4: FP64 9.7 TF, FP64
    # Tensor Core 19.5 TF, FP32 19.5 TF (NVIDIA A100 datasheet). gpu_burn's -tc with FLOATS is not
    # guaranteed to use TF32 (it depends on the cuBLAS math mode of the build), so the fp32_tc floor
    # is the FP32 one. Unless noted, a floor is ~45% of the dense peak: a conservative default that
    # only catches a GPU that is badly broken or clocked down; tune per site from a known-good node
    # (the sibling comparison catches the subtler outlier).
    profile_thresholds: ClassVar[dict[str, dict[str, Any]]] = {
        "H100-SXM-8": {
            "min_gflops_fp32": 30000.0,
            "min_gflops_fp32_tc": 30000.0,
            "min_gflops_fp64": 15000.0,
            "min_gflops_fp64_tc": 30000.0,
        },
        "H200-SXM-8": {
            "min_gflops_fp32": 30000.0,
            "min_gflops_fp32_tc": 30000.0,
            "min_gflops_fp64": 15000.0,
            "min_gflops_fp64_tc": 30000.0,
        },
        "A100-SXM-8": {
            "min_gflops_fp32": 9000.0,
            "min_gflops_fp32_tc": 9000.0,
            "min_gflops_fp64": 4500.0,
            # Measured: 16890-17177 Gflop/s per GPU with -d -tc on 8x A100-SXM4-80GB (microsoft/
            # superbenchmark gpu_burn.log, tests/fixtures/gpu-burn); ~18% margin below that.
            "min_gflops_fp64_tc": 14000.0,
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
        argv = ("python3", "-", "--sample", f"{params.interval:g}", "--", params.gpu_burn_path, *flags)
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

        if not any(f.status != PASS for f in findings):
            rates = [facts.value("gflops", i) or 0.0 for i in burned]
            temps = [v for i in burned if (v := facts.value("temp_gpu_max", i)) is not None]
            duration = facts.value("burn_duration_s")
            hot = f"; peak GPU {max(temps):g} C" if temps else ""
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
            rate = rates[index]
            verdict = facts.text("tool_verdict", index)
            errors = facts.value("errors", index)
            iterations = facts.value("iterations", index)
            said_ok = " (gpu_burn printed OK but made no progress)" if verdict == "OK" else ""
            if iterations == -1:
                findings.append(Finding(FAIL, f"GPU {index}: gpu_burn worker died"))
            if errors is not None:
                m = facts.get("errors", index)
                m.threshold = f"<= {thresholds.max_compute_errors}"
                m.ok = errors <= thresholds.max_compute_errors
                if not m.ok:
                    findings.append(Finding(FAIL, f"GPU {index}: {errors:.0f} compute errors (gpu_burn FAULTY)"))
            if verdict == "FAULTY" and (errors is None or errors <= thresholds.max_compute_errors):
                findings.append(Finding(FAIL, f"GPU {index}: gpu_burn verdict FAULTY"))
            m = facts.get("gflops", index)
            if rate is None:
                m.ok = False
                findings.append(Finding(FAIL, f"GPU {index}: no Gflop/s reported{said_ok or ' (no progress line)'}"))
                continue
            if rate <= 0:
                m.threshold, m.ok = "> 0", False
                findings.append(Finding(FAIL, f"GPU {index}: 0 Gflop/s{said_ok}"))
                continue
            limits = []
            ok = True
            if floor is not None:
                limits.append(f">= {floor:g}")
                if rate < floor:
                    ok = False
                    findings.append(Finding(FAIL, f"GPU {index}: {rate:,.0f} Gflop/s < {floor:,.0f} ({mode} floor)"))
            deficit = thresholds.max_sibling_gflops_deficit_pct
            if median is not None and deficit is not None:
                least = median * (1 - deficit / 100.0)
                limits.append(f">= {least:.0f} (median - {deficit:g}%)")
                if rate < least:
                    ok = False
                    below = (1 - rate / median) * 100
                    findings.append(
                        Finding(
                            FAIL,
                            f"GPU {index}: {rate:,.0f} Gflop/s is {below:.0f}% below the node's median {median:,.0f}",
                        )
                    )
            m.threshold = ", ".join(limits)
            m.ok = ok
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


def telemetry_measurements(doc: SamplingDoc) -> list[Measurement]:
    """Per-GPU summaries of the samples and before/after probes (the full curves go to Series)."""
    before_count = doc.before.get("gpu_count") if doc.before else None
    count = Measurement(name="probe_gpu_count", unit="GPUs")
    if isinstance(before_count, int) and not isinstance(before_count, bool):
        count.value = float(before_count)
    else:
        count.labels["missing"] = "no GPU count in the probe taken before the burn"
    out = [
        count,
        Measurement(name="sample_count", value=float(len(doc.samples))),
        Measurement(name="sample_interval_s", value=doc.interval_s, unit="s"),
    ]
    out += [Measurement(name="sampling_error", text=e) for e in doc.errors]
    steady_from = doc.steady_start()
    for index in doc.gpu_indices():
        for name, unit in (("temp_gpu", "C"), ("temp_memory", "C"), ("power_w", "W")):
            stats = doc.stats(index, name)
            m = Measurement(name=f"{name}_max", value=stats.max, unit=unit, gpu=index)
            if stats.max is None:
                m.labels["missing"] = f"{name} unreadable in every sample"
            out.append(m)
        power = doc.stats(index, "power_w", since_t=steady_from)
        out.append(Measurement(name="power_w_steady_mean", value=_round(power.mean), unit="W", gpu=index))
        clock = doc.stats(index, "sm_clock_mhz", since_t=steady_from)
        out.append(Measurement(name="sm_clock_mhz_steady_min", value=clock.min, unit="MHz", gpu=index))
        out.append(Measurement(name="sm_clock_mhz_steady_mean", value=_round(clock.mean), unit="MHz", gpu=index))
        reasons = doc.stats(index, "clock_event_reasons")
        out.append(Measurement(name="clock_event_reasons_readable", value=float(reasons.count), gpu=index))
        for name, field_name in (
            ("ecc_new_uncorrected", "ecc_volatile_uncorrected"),
            ("ecc_new_corrected", "ecc_volatile_corrected"),
        ):
            new = doc.ecc_increase(index, field_name)
            m = Measurement(name=name, value=None if new is None else float(new), gpu=index)
            if new is None:
                m.labels["missing"] = "volatile ECC count unreadable before, during and after the burn"
            out.append(m)
        out.append(_remap_delta(doc, index))
    for event in doc.throttle_events(JUDGED_CLOCK_REASONS):
        out.append(
            Measurement(
                name="throttle_event",
                value=round(event.end_t - event.start_t, 3),
                unit="s",
                gpu=event.gpu,
                text=event.reason,
                labels={"start_t": f"{event.start_t:g}", "end_t": f"{event.end_t:g}", "when": event.describe()},
            )
        )
    return out


def _remap_delta(doc: SamplingDoc, index: int) -> Measurement:
    def total(probe: dict[str, Any] | None) -> int | None:
        rows = probe_gpu(probe, index).get("remapped_rows")
        if not isinstance(rows, dict):
            return None
        values = [rows.get("correctable"), rows.get("uncorrectable")]
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            return None
        return int(values[0]) + int(values[1])

    first, last = total(doc.before), total(doc.after)
    m = Measurement(name="row_remaps_new", gpu=index)
    if first is None or last is None:
        m.labels["missing"] = "remapped rows not reported before and after the burn"
    else:
        m.value = float(max(0, last - first))
    return m


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


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

    def text(self, name: str, gpu: int | None = None) -> str:
        return self.get(name, gpu).text

    def texts(self, name: str) -> list[str]:
        return [m.text for m in self.measurements if m.name == name]

    def all(self, name: str) -> list[Measurement]:
        return [m for m in self.measurements if m.name == name]

    def gpus(self, name: str) -> set[int]:
        return {m.gpu for m in self.measurements if m.name == name and m.gpu is not None}
