"""dcgm_diag: NVIDIA DCGM diagnostics (`dcgmi diag -r LEVEL -j`), one status per test and GPU.

Parses the JSON of DCGM 3.x ("DCGM GPU Diagnostic", results with `gpu_ids` as "0,1,.." or an
int, statuses like "Pass" or "PASS") and DCGM 4.x ("DCGM Diagnostic", results with
`entity_group`/`entity_id`, a per-test `test_summary`; NVIDIA/DCGM testing/python3/
dcgm_diag_schema.json), with any non-JSON lines before the JSON (dcgmi and nvvs print warnings
there). The text table of `dcgmi diag -r N` without -j parses too (best effort: a per-GPU
failure there reads "Fail - GPU: 3"; anything else applies to all GPUs).

No evidence, no pass: DCGM skips tests silently (a missing plugin, an unsupported GPU, a
busy GPU), so Skip and Not Run are never a pass: by default each is an `error`
("test X skipped on GPU n: DCGM did not test it"). Fail is `fail`; Warn is `warn`.
"""

from __future__ import annotations

import json
import re
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
from checks.core.parsers import Parsed, register_parser

STATUSES = ("Pass", "Fail", "Warn", "Skip", "Not Run")
_STATUS_BY_KEY = {
    "pass": "Pass",
    "fail": "Fail",
    "warn": "Warn",
    "warning": "Warn",
    "skip": "Skip",
    "skipped": "Skip",
    "notrun": "Not Run",
    "not run": "Not Run",
    "not_run": "Not Run",
}
DCGMI_LABEL = "dcgmi diag"


def normalise_status(text: str) -> str:
    """'PASS' / 'Pass' / 'Not Run' / 'NOT_RUN' -> the canonical spelling; unknown text kept as is."""
    key = text.strip().lower()
    return _STATUS_BY_KEY.get(key, _STATUS_BY_KEY.get(key.replace(" ", ""), text.strip()))


def _status(test: str, category: str, status: str, gpu: int | None, detail: str = "") -> Measurement:
    labels = {"test": test, "category": category}
    if detail:
        labels["detail"] = detail[:500]
    return Measurement(name="test_status", text=normalise_status(status), gpu=gpu, labels=labels)


def _gpu_ids(value: Any) -> list[int | None]:
    """3.x `gpu_ids`: "0,1,2" or 3; absent -> one node-level entry (None)."""
    if isinstance(value, bool) or value is None:
        return [None]
    if isinstance(value, int):
        return [value]
    if isinstance(value, str):
        ids = [int(p) for p in re.split(r"[,\s]+", value.strip()) if p.isdigit()]
        return list(ids) if ids else [None]
    if isinstance(value, list):
        return [int(v) for v in value if isinstance(v, int) and not isinstance(v, bool)] or [None]
    return [None]


def _detail(result: dict[str, Any]) -> str:
    """Warning / info text of one result, across schema generations."""
    parts: list[str] = []
    for key in ("warnings", "warning", "errors", "info"):
        value = result.get(key)
        if isinstance(value, str):
            parts.append(value)
        elif isinstance(value, list):
            for item in value:
                if isinstance(item, dict):
                    text = item.get("warning") or item.get("error") or item.get("message")
                    if text:
                        parts.append(str(text))
                elif isinstance(item, str):
                    parts.append(item)
    return "; ".join(parts)


def _json_start(text: str) -> dict[str, Any] | None:
    """The JSON object in `text`, skipping non-JSON preamble lines; None when there is none."""
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\{", text):
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except json.JSONDecodeError:
            continue
        except RecursionError:  # nesting no real report has; trying every later '{' would be quadratic
            raise EvidenceError("dcgmi diag output holds JSON nested too deeply to be a real report") from None
        if isinstance(value, dict) and ("DCGM GPU Diagnostic" in value or "DCGM Diagnostic" in value):
            return value
    return None


def parse_json_doc(doc: dict[str, Any]) -> tuple[list[Measurement], list[str]]:
    root = _diagnostic_root(doc)
    categories = root.get("test_categories")
    if not isinstance(categories, list):
        raise EvidenceError("dcgmi JSON has no 'test_categories' list")
    out: list[Measurement] = []
    warnings: list[str] = []
    for category in categories:
        if not isinstance(category, dict):
            continue
        cat_name = str(category.get("category") or "")
        for test in category.get("tests") or []:
            if isinstance(test, dict):  # DCGM 3.1 prints literal nulls between tests
                out.extend(_test_statuses(test, cat_name, warnings))
    version = root.get("version") or (doc.get("metadata") or {}).get("version")
    if version:
        out.append(Measurement(name="dcgm_version", text=str(version)))
    return out, warnings


def _diagnostic_root(doc: dict[str, Any]) -> dict[str, Any]:
    """The report object of either schema generation; EvidenceError when absent or the run failed."""
    root = doc.get("DCGM Diagnostic") or doc.get("DCGM GPU Diagnostic")
    if not isinstance(root, dict):
        raise EvidenceError("dcgmi JSON has no 'DCGM Diagnostic' / 'DCGM GPU Diagnostic' object")
    runtime_error = root.get("runtime_error")
    if runtime_error:
        raise EvidenceError(f"DCGM diagnostic did not run: {runtime_error}")
    return root


def _test_statuses(test: dict[str, Any], category: str, warnings: list[str]) -> list[Measurement]:
    """One test's statuses: per result, or its 4.x `test_summary` when it has no results."""
    name = str(test.get("name") or "")
    results = [r for r in test.get("results") or [] if isinstance(r, dict)]
    summary = test.get("test_summary")
    if not results and isinstance(summary, dict) and summary.get("status"):
        return [_status(name, category, str(summary["status"]), None, _detail(summary))]
    if not results:
        warnings.append(f"test {name!r} has no results")
    out: list[Measurement] = []
    for result in results:
        status = str(result.get("status") or "")
        if not status:
            warnings.append(f"test {name!r}: a result without a status")
            continue
        out.extend(_result_statuses(name, category, status, result))
    return out


def _result_statuses(test: str, category: str, status: str, result: dict[str, Any]) -> list[Measurement]:
    detail = _detail(result)
    if "entity_id" not in result:  # 3.x: one result for the GPUs in `gpu_ids`
        return [_status(test, category, status, gpu, detail) for gpu in _gpu_ids(result.get("gpu_ids"))]
    # 4.x: one entity per result; only GPUs carry an index
    group = str(result.get("entity_group") or "GPU")
    entity = result.get("entity_id")
    gpu = entity if group.upper() == "GPU" and isinstance(entity, int) else None
    m = _status(test, category, status, gpu, detail)
    if group.upper() != "GPU":
        m.labels["entity"] = f"{group} {entity}"
    return [m]


# Text table: "|-----  Deployment  --------+----|", "| Blacklist | Pass |", "| SM Stress | Fail - GPU: 3 |".
_CATEGORY_ROW = re.compile(r"^[|+]-+\s+(\S[^-]*?)\s+-+\+")
_TEST_ROW = re.compile(r"^\|\s*(?P<name>[^|]*?)\s*\|\s*(?P<result>[^|]*?)\s*\|\s*$")
_RESULT = re.compile(r"^(?P<status>Pass|Fail|Warn|Warning|Skip|Skipped|Not Run)\b(?:\s*-\s*(?P<rest>.*))?$", re.I)


_BORDER = re.compile(r"^\+[-=]+\+[-=]+\+$")  # the table's closing line: "+-----+-----+"


def parse_text_table(text: str) -> tuple[list[Measurement], list[str]]:
    """dcgmi diag's result table. A table that does not end with its closing border was cut (the
    run was killed mid-print or the output truncated): EvidenceError, never a shorter pass."""
    _require_closing_border(text)
    out: list[Measurement] = []
    category = ""
    last: Measurement | None = None
    for line in text.splitlines():
        line = line.strip()
        header = _CATEGORY_ROW.match(line)
        if header:
            category = header.group(1).strip()
            continue
        row = _TEST_ROW.match(line)
        if not row or row.group("name") in ("Diagnostic",) and row.group("result") == "Result":
            continue
        name, result = row.group("name"), row.group("result")
        if not name and last is not None:  # continuation: the previous test's warning text
            last.labels["detail"] = (last.labels.get("detail", "") + " " + result).strip()[:500]
            continue
        statuses = _row_statuses(name, category, result)
        if statuses:
            last = statuses[-1]
            out.extend(statuses)
    return out, ["text table (no -j): per-GPU detail only where a row names a GPU"] if out else []


def _require_closing_border(text: str) -> None:
    table = [line.strip() for line in text.splitlines() if line.strip().startswith(("|", "+"))]
    if table and not _BORDER.match(table[-1]) and any(_TEST_ROW.match(line) for line in table):
        raise EvidenceError(f"dcgmi diag table incomplete: it ends at {table[-1][:80]!r}, not its closing border")


def _row_statuses(name: str, category: str, result: str) -> list[Measurement]:
    """A test row's statuses: one per GPU the result names ("Fail - GPU: 3"), else one for all."""
    parsed = _RESULT.match(result)
    if not name or not parsed:
        return []
    rest = parsed.group("rest") or ""
    gpus: list[int | None] = [int(g) for g in re.findall(r"GPU:?\s*(\d+)", rest)] or [None]
    return [_status(name, category, parsed.group("status"), gpu) for gpu in gpus]


def parse_dcgmi_diag_text(text: str) -> tuple[list[Measurement], list[str]]:
    doc = _json_start(text)
    if doc is not None:
        measurements, warnings = parse_json_doc(doc)
    else:
        measurements, warnings = parse_text_table(text)
    if not any(m.name == "test_status" for m in measurements):
        first = next((line.strip() for line in text.splitlines() if line.strip()), "")
        raise EvidenceError(f"dcgmi diag output has no test results (neither JSON nor a result table): {first[:120]!r}")
    return measurements, warnings


@register_parser("dcgmi_diag")
def parse_dcgmi_diag(text: str) -> Parsed:
    measurements, warnings = parse_dcgmi_diag_text(text)
    return Parsed(measurements, warnings)


# ----------------------------------------------------------------------------- the check

# NVIDIA DCGM diagnostics docs, run levels: r1 quick (seconds), r2 medium (~2 min), r3 long
# (~30 min), r4 extended (1-2 h). Limits leave room over those.
DEFAULT_TIMEOUTS_S = {1: 300, 2: 900, 3: 3600, 4: 10800}
# How long each run level usually takes, from the DCGM user guide's run levels: r1 "quick"
# (seconds), r2 "medium" (~2 min), r3 "long" (~30 min), r4 "extra long" (1-2 h: 90 min here).
EXPECTED_S = {1: 30, 2: 120, 3: 1800, 4: 5400}


@dataclass
class DcgmDiagParams:
    level: int = 1  # quick sweeps; acceptance plans use 3 (or 4)
    timeout_s: int | None = None  # None = by level (DEFAULT_TIMEOUTS_S)
    dcgmi_path: str = "dcgmi"  # DCGM's command-line tool on the node's PATH; a full path where it is not

    def __post_init__(self) -> None:
        if self.level not in DEFAULT_TIMEOUTS_S:
            raise ParamsError(f"param 'level': must be 1, 2, 3 or 4, got {self.level}")


@dataclass
class DcgmDiagThresholds:
    # DCGM skips tests it cannot run (missing plugin, unsupported SKU, GPU busy): a skipped test
    # proves nothing, so by default it is an `error`. True = record skips without judging them
    # (the check still needs at least one test that ran).
    allow_skipped: bool = False
    # DCGM "Warn" means the test ran and found something short of a failure (e.g. a slow PCIe
    # link); `warn` by default, `fail` when set.
    warn_is_fail: bool = False


@register
class DcgmDiag(Check):
    key: ClassVar[str] = "dcgm_diag"
    name: ClassVar[str] = "DCGM diagnostics"
    description: ClassVar[str] = "dcgmi diag; Skip and Not Run are never a pass."
    Params: ClassVar[type] = DcgmDiagParams

    # The run level's usual time (EXPECTED_S) already includes dcgmi's start-up.
    OVERHEAD_S: ClassVar[float] = 0.0

    def declared_s(self, params: Any) -> float:
        return float(EXPECTED_S[params.level])

    Thresholds: ClassVar[type] = DcgmDiagThresholds
    # dcgmi diag exits non-zero when a test fails, yet still prints its full JSON. Exit codes are
    # therefore not judged here: parse() demands the results and says what is missing if absent.
    ok_exit_codes: ClassVar[tuple[int, ...]] = tuple(range(256))

    def commands(self, params: Any, node: NodeContext) -> list[Command]:
        timeout = params.timeout_s if params.timeout_s is not None else DEFAULT_TIMEOUTS_S[params.level]
        return [
            Command(
                argv=(params.dcgmi_path, "diag", "-r", str(params.level), "-j"),
                timeout=float(timeout),
                label=DCGMI_LABEL,
            )
        ]

    def parse(self, outputs: list[CommandOutput]) -> list[Measurement]:
        if len(outputs) != 1:
            raise EvidenceError(f"expected one dcgmi output, got {len(outputs)}")
        out = outputs[0]
        if not out.stdout.strip():
            lines = [line.strip() for line in out.stderr.splitlines() if line.strip()]
            hint = f": {lines[-1][:200]}" if lines else ""
            raise EvidenceError(f"dcgmi diag printed nothing (exit code {out.exit_code}){hint}")
        try:
            measurements, warnings = parse_dcgmi_diag_text(out.stdout)
        except EvidenceError as exc:
            raise EvidenceError(f"{exc} (exit code {out.exit_code})") from None
        return measurements + [Measurement(name="parse_warning", text=w) for w in warnings]

    def evaluate(self, measurements: list[Measurement], thresholds: Any, node: NodeContext) -> Verdict:
        findings: list[Finding] = []
        statuses = [m for m in measurements if m.name == "test_status"]
        ran = 0
        for m in statuses:
            test = m.labels.get("test", "?")
            where = f"GPU {m.gpu}" if m.gpu is not None else m.labels.get("entity", "all GPUs")
            detail = f": {m.labels['detail']}" if m.labels.get("detail") else ""
            m.threshold = "Pass"
            m.ok = m.text == "Pass"
            if m.text in ("Pass", "Fail", "Warn"):
                ran += 1
            if m.text == "Fail":
                findings.append(Finding(FAIL, f"test {test} failed on {where}{detail}"))
            elif m.text == "Warn":
                findings.append(
                    Finding(FAIL if thresholds.warn_is_fail else WARN, f"test {test} warned on {where}{detail}")
                )
            elif m.text in ("Skip", "Not Run"):
                if thresholds.allow_skipped:
                    m.ok = None  # recorded, not judged
                    continue
                verb = "skipped" if m.text == "Skip" else "not run"
                findings.append(Finding(ERROR, f"test {test} {verb} on {where}: DCGM did not test it"))
            elif m.text != "Pass":
                findings.append(Finding(ERROR, f"test {test} on {where}: unknown status {m.text!r}"))
        if not ran:
            findings.append(Finding(ERROR, "DCGM ran no test (every test skipped or not run)"))
        passed = sum(1 for m in statuses if m.text == "Pass")
        return Verdict.from_findings(
            findings,
            pass_reason=f"{passed} DCGM test results passed ({len({m.labels.get('test') for m in statuses})} tests)",
        )
