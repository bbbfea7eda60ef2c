"""Shared base for checks whose evidence is the node probe's JSON (checks/probe/SCHEMA.md).

`ProbeCheck` runs the probe once (`python3 -` with the script on stdin), loads
and validates its JSON, and hands a `Probe` view to the subclass's `measure()`.
Anything that makes the JSON untrustworthy (empty stdout, not JSON, wrong
schema, malformed GPU entries) raises `EvidenceError`, which `run_check` turns
into an `error` verdict with no measurements.

Missing single facts are not errors here: the probe records null plus a reason
in the GPU's `errors` map, and `ProbeCheck` turns that into a Measurement with
value None (or text "") and `labels["missing"]` = the reason, for evaluate to
judge.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar

from checks.core.base import (
    Check,
    Command,
    CommandOutput,
    EvidenceError,
    Finding,
    Measurement,
    NodeContext,
)
from checks.core.evidence import FLAG, Rule

PROBE_SCHEMA = 1
PROBE_LABEL = "probe.py"
NO_REASON = "not reported by the probe"
# What every probe check records (ProbeCheck.parse): the driver's GPU count and, per GPU, whether
# it answered. Subclasses extend this with their own counters (checks/core/evidence.py).
PROBE_EVIDENCE: dict[str, Rule] = {"gpu_present": FLAG}


@dataclass
class ProbeParams:
    # NVML reads of 8 GPUs take a few seconds; the probe's nvidia-smi fallback
    # can take tens of seconds when a GPU is wedged. 60 s bounds both while
    # leaving room inside the worker's soft time limit.
    timeout_s: int = 60


class ProbeGpu:
    """One entry of the probe's `gpus` list, with null-aware accessors."""

    def __init__(self, raw: dict[str, Any]) -> None:
        self.raw = raw
        self.index: int = raw["index"]
        errors = raw.get("errors")
        self.errors: dict[str, str] = errors if isinstance(errors, dict) else {}

    @property
    def answered(self) -> bool:
        """False when the driver lists the GPU but it would not give a handle (fell off the bus)."""
        return "handle" not in self.errors

    def get(self, *path: str) -> Any:
        node: Any = self.raw
        for key in path:
            if not isinstance(node, dict):
                return None
            node = node.get(key)
        return node

    def reason(self, *path: str) -> str:
        """Why the value at `path` is null: the most specific probe error, else the handle error."""
        for end in range(len(path), 0, -1):
            text = self.errors.get(".".join(path[:end]))
            if text:
                return str(text)
        if not self.answered:
            return f"GPU not responding: {self.errors['handle']}"
        return NO_REASON

    def number(self, name: str, *path: str, unit: str = "") -> Measurement:
        value = self.get(*path)
        if value is None:
            return Measurement(name=name, value=None, unit=unit, gpu=self.index, labels={"missing": self.reason(*path)})
        if isinstance(value, bool):  # booleans are flags, stored 1/0
            return Measurement(name=name, value=1.0 if value else 0.0, unit=unit, gpu=self.index)
        if not isinstance(value, (int, float)):
            raise EvidenceError(f"probe GPU {self.index}: {'.'.join(path)} is {value!r}, expected a number")
        return Measurement(name=name, value=float(value), unit=unit, gpu=self.index)

    def flag(self, name: str, *path: str) -> Measurement:
        value = self.get(*path)
        if value is not None and not isinstance(value, bool):
            raise EvidenceError(f"probe GPU {self.index}: {'.'.join(path)} is {value!r}, expected true/false")
        return self.number(name, *path)

    def text(self, name: str, *path: str) -> Measurement:
        value = self.get(*path)
        if value is None or value == "":
            return Measurement(name=name, text="", gpu=self.index, labels={"missing": self.reason(*path)})
        if not isinstance(value, str):
            raise EvidenceError(f"probe GPU {self.index}: {'.'.join(path)} is {value!r}, expected a string")
        return Measurement(name=name, text=value, gpu=self.index)


class Probe:
    """A validated probe document."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc
        self.gpus = [ProbeGpu(g) for g in doc["gpus"]]
        self.errors: list[str] = [str(e) for e in doc.get("errors") or []]

    def top_text(self, name: str, key: str) -> Measurement:
        value = self.doc.get(key)
        if value is None or value == "":
            return Measurement(name=name, text="", labels={"missing": self.why_missing()})
        if not isinstance(value, str):
            raise EvidenceError(f"probe field {key!r} is {value!r}, expected a string")
        return Measurement(name=name, text=value)

    def why_missing(self) -> str:
        return "; ".join(self.errors[:3]) if self.errors else NO_REASON


def load_probe(outputs: list[CommandOutput]) -> Probe:
    """The probe document from the outputs, validated; EvidenceError says what is wrong."""
    doc = _probe_json(_probe_output(outputs))
    _validate_probe(doc)
    return Probe(doc)


def _probe_json(out: CommandOutput) -> dict[str, Any]:
    """The probe's stdout as a JSON object."""
    text = out.stdout.strip()
    if not text:
        hint = _last_line(out.stderr)
        raise EvidenceError("probe printed nothing on stdout" + (f" (stderr: {hint})" if hint else ""))
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise EvidenceError(f"probe output is not JSON ({exc.msg} at line {exc.lineno}): {text[:80]!r}") from None
    if not isinstance(doc, dict):
        raise EvidenceError(f"probe output is JSON but not an object: {type(doc).__name__}")
    return doc


def _validate_probe(doc: dict[str, Any]) -> None:
    """The document's schema, GPU list, errors and count, and that it read something."""
    if doc.get("schema") != PROBE_SCHEMA:
        raise EvidenceError(
            f"probe schema {doc.get('schema')!r}, expected {PROBE_SCHEMA} (probe and portal out of step?)"
        )
    gpus = doc.get("gpus")
    if not isinstance(gpus, list):
        raise EvidenceError("probe output has no 'gpus' list")
    errors = doc.get("errors", [])
    if errors is not None and not isinstance(errors, list):
        raise EvidenceError(f"probe 'errors' is {type(errors).__name__}, expected a list")
    _validate_gpu_indexes(gpus)
    count = doc.get("gpu_count")
    if count is not None and (not isinstance(count, int) or isinstance(count, bool) or count < 0):
        raise EvidenceError(f"probe gpu_count is {count!r}, expected a non-negative integer")
    if doc.get("source") == "none":
        # Exit code 0 with nothing read should not happen, but never judge an empty reading.
        why = "; ".join(str(e) for e in (errors or [])[:3]) or "no reason given"
        raise EvidenceError(f"probe could not read the GPUs: {why}")


def _validate_gpu_indexes(gpus: list[Any]) -> None:
    """Every GPU entry has its own non-negative integer index."""
    seen: set[int] = set()
    for pos, gpu in enumerate(gpus):
        index = gpu.get("index") if isinstance(gpu, dict) else None
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise EvidenceError(f"probe GPU entry #{pos} has no valid 'index'")
        if index in seen:
            raise EvidenceError(f"probe lists GPU {index} twice")
        seen.add(index)


def _probe_output(outputs: list[CommandOutput]) -> CommandOutput:
    labelled = [o for o in outputs if o.command.label == PROBE_LABEL]
    if len(labelled) == 1:
        return labelled[0]
    if len(outputs) == 1:
        return outputs[0]
    raise EvidenceError(f"expected one probe output, got {len(outputs)}")


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


class ProbeCheck(Check):
    """Base for checks judged from the probe JSON. Subclasses implement
    `measure(probe)` and `evaluate(...)`; commands, loading and validation,
    and exit-code diagnosis live here once."""

    Params: ClassVar[type] = ProbeParams
    evidence: ClassVar[dict[str, Rule]] = PROBE_EVIDENCE

    def commands(self, params: Any, node: NodeContext) -> list[Command]:
        from checks.probe import probe_source  # lazy: reading the script is I/O, not needed to parse

        return [
            Command(
                argv=("python3", "-"),
                stdin=probe_source(),
                timeout=float(params.timeout_s),
                label=PROBE_LABEL,
                read_only=True,  # NVML and nvidia-smi reads only: shared by the checks that read it
            )
        ]

    def describe_failure(self, output: CommandOutput) -> str:
        # The probe prints JSON with `errors` even when it exits 3 (nothing readable);
        # that list says far more than stderr does.
        try:
            doc = json.loads(output.stdout)
        except ValueError:
            doc = None
        if isinstance(doc, dict) and isinstance(doc.get("errors"), list) and doc["errors"]:
            return "probe could not read the GPUs: " + "; ".join(str(e) for e in doc["errors"][:3])
        return super().describe_failure(output)

    def parse(self, outputs: list[CommandOutput]) -> list[Measurement]:
        probe = load_probe(outputs)
        count = probe.doc.get("gpu_count")
        common = [
            Measurement(name="gpu_count", value=None if count is None else float(count), unit="GPUs"),
            Measurement(name="probe_source", text=str(probe.doc.get("source") or "")),
        ]
        if count is None:
            common[0].labels["missing"] = probe.why_missing()
        common += [Measurement(name="probe_error", text=e) for e in probe.errors]
        for gpu in probe.gpus:
            present = Measurement(name="gpu_present", value=1.0 if gpu.answered else 0.0, gpu=gpu.index)
            if not gpu.answered:
                present.text = gpu.errors["handle"]
            common.append(present)
        return common + self.measure(probe)

    def measure(self, probe: Probe) -> list[Measurement]:
        raise NotImplementedError


# --- helpers for evaluate(): measurements -> findings -------------------------------------------


class Facts:
    """Index of measurements by (name, gpu) for evaluate()."""

    def __init__(self, measurements: list[Measurement]) -> None:
        self.by_key: dict[tuple[str, int | None], Measurement] = {}
        for m in measurements:
            self.by_key.setdefault((m.name, m.gpu), m)
        self.probe_errors = [m.text for m in measurements if m.name == "probe_error"]
        self.listed = sorted({m.gpu for m in measurements if m.name == "gpu_present" and m.gpu is not None})
        self.answered = [i for i in self.listed if self.value("gpu_present", i) == 1.0]
        self.silent = {i: self.get("gpu_present", i).text for i in self.listed if i not in self.answered}

    def get(self, name: str, gpu: int | None = None) -> Measurement:
        found = self.by_key.get((name, gpu))
        if found is None:
            # Evaluate was given measurements from elsewhere: absent is missing, never zero.
            found = Measurement(name=name, gpu=gpu, labels={"missing": "measurement absent"})
            self.by_key[(name, gpu)] = found
        return found

    def value(self, name: str, gpu: int | None = None) -> float | None:
        return self.get(name, gpu).value

    def missing(self, name: str, gpu: int | None = None) -> str:
        m = self.get(name, gpu)
        return m.labels.get("missing") or NO_REASON

    def unlisted(self) -> list[int] | None:
        """GPU indices the driver counts but the probe did not list; None when the count is unknown."""
        count = self.value("gpu_count")
        if count is None:
            return None
        return [i for i in range(int(count)) if i not in self.listed]


def gpu_list(indices: list[int]) -> str:
    """'GPU 3' or 'GPUs 1, 2, 3' for reasons."""
    if len(indices) == 1:
        return f"GPU {indices[0]}"
    return "GPUs " + ", ".join(str(i) for i in indices)


def judge_max(m: Measurement, limit: int | float | None, finding: str) -> Finding | None:
    """Annotate `m` with `<= limit` and return a fail finding when exceeded (value must be present)."""
    if limit is None or m.value is None:
        return None
    m.threshold = f"<= {limit:g}"
    m.ok = m.value <= limit
    return None if m.ok else Finding(status="fail", reason=finding)
