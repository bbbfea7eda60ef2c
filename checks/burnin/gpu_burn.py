"""gpu_burn's stdout (wilicc/gpu-burn) -> per-GPU facts; parser kind `gpu_burn`.

The real tool prints "\r" before each progress record, so captured text has many records on one
line; a complete run ends with "Tested N GPUs:" and one "GPU i: OK|FAULTY" line per GPU
(gpu_burn-drv.cpp listenClients). Without that list the run was cut short: `parse_gpu_burn_text`
raises EvidenceError "output incomplete". Error counts that wrapped negative are kept out of the
evidence (see ERRORS_WRAPPED); the burn_in check (checks/burnin/check.py) judges them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from checks.core import evidence
from checks.core.base import EvidenceError, Measurement
from checks.core.parsers import Parsed, register_parser

# One progress record. The real tool prints "\r" before each, so captured text has many records on
# one line (tests/fixtures/gpu-burn); current builds append "  power: N W - ...".
# The error column holds a signed count: gpu_burn keeps it in a 32-bit int, so a count past 2^31
# prints negative, followed by "(WARNING!)" with no space before the next "- " (wilicc/gpu-burn
# issue 12: "errors: 0 - -524288000  (WARNING!)- -524288000  (WARNING!)- 0 ...").
_PROGRESS = re.compile(
    r"(?P<pct>\d+(?:\.\d+)?)%\s+proc'd:\s*"
    r"(?P<procd>(?:-?\d+\s*\(\s*(?:-?[\d.]+|-?inf|-?nan)\s*Gflop/s\)\s*(?:-\s+)?)+)"
    r"\s*errors:\s*(?P<errors>(?:-?\d+\s*(?:\((?:WARNING|DIED)!\))?\s*(?:-\s+)?)+)"
    r"(?:\s*temps:\s*(?P<temps>(?:(?:-?\d+\s*C|--)\s*(?:-\s+)?)+))?"
)
_PROCD_ITEM = re.compile(r"(-?\d+)\s*\(\s*(-?[\d.]+|-?inf|-?nan)\s*Gflop/s\)")
_ERROR_ITEM = re.compile(r"(-?\d+)\s*(\((?:WARNING|DIED)!\))?")
_TEMP_ITEM = re.compile(r"(-?\d+)\s*C|--")
_VERDICT = re.compile(r"^\s*GPU\s+(\d+):\s*(OK|FAULTY)\s*$", re.MULTILINE)
_TESTED = re.compile(r"Tested\s+(\d+)\s+GPUs:")
# `nvidia-smi -L`, which gpu_burn runs first: "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-...)".
_LISTED = re.compile(r"^GPU\s+(\d+):\s+.+\(UUID:\s*GPU-", re.MULTILINE)
NO_PROGRESS = "no progress line printed for this GPU"
# gpu_burn adds each report's errors into a 32-bit `int` per GPU (gpu_burn-drv.cpp: the child
# writes getErrors(), an unsigned long long, as an int; the parent sums into vector<int>
# clientErrors and prints it with %d), so more faulty elements than 2^31 - or a truncated 64-bit
# count - print as a negative number. gpu_burn still marks the count "(WARNING!)" and the GPU
# FAULTY: the one certain fact is that the count is not zero. Kiln records no (negative) count,
# keeps what was printed in labels["wrapped"], and judges the GPU `fail` (compute errors, count
# unknown). Never a pass, never a negative count in the evidence.
ERRORS_WRAPPED = "gpu_burn's 32-bit error counter wrapped negative: more compute errors than it can count"
INCOMPLETE = (
    "gpu_burn output incomplete: no closing 'Tested N GPUs:' list (gpu_burn prints it last, after "
    "stopping its workers): the run was cut short"
)


@dataclass
class BurnGpu:
    index: int
    gflops: float | None = None  # last reported
    iterations: int | None = None  # last reported proc'd count; -1 = worker died
    errors: int | None = None  # total over the run (see _total_errors); None when it wrapped
    errors_wrapped: int | None = None  # the first negative count printed (see ERRORS_WRAPPED)
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


@dataclass
class _Progress:
    """Each GPU's values over the progress records, in print order."""

    records: int = 0
    gflops: dict[int, list[float | None]] = field(default_factory=dict)
    iterations: dict[int, list[int]] = field(default_factory=dict)
    errors: dict[int, list[int]] = field(default_factory=dict)
    temps: dict[int, list[int]] = field(default_factory=dict)


def parse_gpu_burn_text(text: str) -> BurnResult:
    """gpu_burn stdout -> per-GPU facts. EvidenceError when it has no progress or result line."""
    text = text.replace("\r", "\n")
    progress = _read_progress(text)
    verdicts = {int(i): v for i, v in _VERDICT.findall(text)}
    tested_match = _TESTED.search(text)
    tested = int(tested_match.group(1)) if tested_match else None
    listed = len(set(_LISTED.findall(text)))
    if not progress.records and not verdicts and tested is None:
        raise EvidenceError("gpu_burn output has no progress line and no result ('Tested N GPUs') line")
    if tested is None:
        died = " (every worker died: 'No clients are alive')" if "No clients are alive" in text else ""
        raise EvidenceError(INCOMPLETE + died)
    indices = set(progress.gflops) | set(verdicts) | set(range(tested or 0))
    gpus = {index: _burn_gpu(index, verdicts.get(index), progress) for index in sorted(indices)}
    return BurnResult(gpus=gpus, tested=tested, listed=listed, records=progress.records, warnings=[])


def _read_progress(text: str) -> _Progress:
    progress = _Progress()
    for match in _PROGRESS.finditer(text):
        progress.records += 1
        procd = _PROCD_ITEM.findall(match.group("procd"))
        errs = _ERROR_ITEM.findall(match.group("errors"))
        tmps = _TEMP_ITEM.findall(match.group("temps") or "")
        _require_whole_record(text, match, progress.records, (len(procd), len(errs), len(tmps)))
        for index, (count, rate) in enumerate(procd):
            # NaN / inf stay as printed: checks/core/evidence.py turns them into `error` by name.
            progress.gflops.setdefault(index, []).append(float(rate))
            progress.iterations.setdefault(index, []).append(int(count))
        for index, (count, note) in enumerate(errs):
            progress.errors.setdefault(index, []).append(int(count))
            if note == "(DIED!)":
                progress.iterations.setdefault(index, []).append(-1)
        for index, temp in enumerate(tmps):
            if temp:
                progress.temps.setdefault(index, []).append(int(temp))
    return progress


def _require_whole_record(text: str, match: re.Match[str], number: int, sizes: tuple[int, int, int]) -> None:
    """gpu_burn prints every column for every GPU; a column that stops short (or a "temps:" the
    pattern could not read) is a garbled record, not fewer GPUs. `sizes`: rates, errors, temps."""
    rates, errs, tmps = sizes
    garbled = text[match.end() :].lstrip(" \t").startswith("temps:")
    if errs != rates or (match.group("temps") is not None and tmps != rates) or garbled:
        shown = (match.group(0) + text[match.end() : match.end() + 40]).strip()[:200]
        raise EvidenceError(
            f"{evidence.PREFIX}: gpu_burn progress record {number} is garbled ({rates} rates, "
            f"{errs} error counts, {tmps} temperatures): {shown!r}"
        )


def _burn_gpu(index: int, verdict: str | None, progress: _Progress) -> BurnGpu:
    gpu = BurnGpu(index=index, verdict=verdict)
    if index in progress.gflops:
        gpu.gflops = progress.gflops[index][-1]
        gpu.iterations = progress.iterations[index][-1]
    if index in progress.errors:
        wrapped = [count for count in progress.errors[index] if count < 0]
        if wrapped:
            gpu.errors_wrapped = wrapped[0]
        else:
            gpu.errors = _total_errors(progress.errors[index])
    if index in progress.temps:
        gpu.temp_max = max(progress.temps[index])
    return gpu


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
        errors = Measurement(
            name="errors",
            value=None if gpu.errors is None else float(gpu.errors),
            gpu=gpu.index,
            labels=dict(no_progress),
        )
        if gpu.errors_wrapped is not None:
            errors.labels = {"wrapped": str(gpu.errors_wrapped), "missing": f"{ERRORS_WRAPPED} ({gpu.errors_wrapped})"}
        elif gpu.errors is None and gpu.iterations is not None:
            errors.labels["missing"] = "no error count printed for this GPU"
        out.append(errors)
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
