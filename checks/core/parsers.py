"""Parsers of captured tool outputs, by kind, for `python -m checks parse KIND FILE`.

Each check module registers the parsers of the tools it reads. A parser takes the whole text of
one output and returns its measurements and warnings; it raises EvidenceError when the text cannot
be parsed at all (the CLI then exits 2 with that one-line reason).

`PARSERS[kind]` is the registered function itself; `parse_output(kind, text)` runs it behind one
guard, the same for every kind (the CLI goes through it):
- no measurements at all is EvidenceError ("no evidence"): a parser that recognised nothing
  must never look like a clean result. Event logs (`EVENT_LOGS`) are the exception: their parser
  returns one measurement per event, has already refused a text that is not such a log, and a
  recognised log with no event in it is the evidence that nothing happened;
- a tool that prints a completion marker (`COMPLETION_MARKERS`) must have printed it: without it
  the output was cut or the run stopped early, and the parse is EvidenceError ("incomplete");
- a value that is not a finite number (NaN, inf) stays in the measurement, flagged with
  `labels["invalid"]` naming it, so that nothing downstream mistakes it for a reading.
The guard raises nothing but EvidenceError; a crash in a parser is a bug and is not hidden here
(the CLI still turns it into one line and exit 2).

JSON inputs go through `load_json`, which turns any nesting too deep for the decoder into
EvidenceError instead of a RecursionError.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from checks.core.base import EvidenceError, Measurement

# The largest input `python -m checks parse|judge` reads, in bytes. 64 MiB is four times the
# transport's per-stream cap (worker/ssh.py DEFAULT_OUTPUT_CAP, 16 MiB) and ~7x the largest
# output a check expects (an 8-GPU 12 h burn-in's sampling JSON sampled at 1 Hz, ~9 MB,
# checks/burnin/check.py); a bigger file is refused without being read, so memory stays bounded.
MAX_INPUT_BYTES = 64 * 1024 * 1024


@dataclass
class Parsed:
    measurements: list[Measurement]
    warnings: list[str] = field(default_factory=list)


Parser = Callable[[str], Parsed]
PARSERS: dict[str, Parser] = {}

# kind -> (pattern that must occur, what it is): the lines these tools print only when a run
# finished. nccl-tests prints "# Avg bus bandwidth" after its last size (nccl-tests
# src/common.cu); gpu_burn prints "Tested N GPUs:" and the per-GPU verdicts after the run
# (gpu-burn gpu_burn-drv.cpp); IOR prints its "Summary of all tests" (or, before 3.3, the
# "Max Write/Read" lines) once every test is done (hpc/ior src/ior-output.c); mdtest prints
# "-- finished at DATE --" as its last line, after the summary (hpc/ior src/mdtest.c mdtest_run).
COMPLETION_MARKERS: dict[str, tuple[re.Pattern[str], str]] = {
    "nccl": (re.compile(r"^#\s*Avg bus bandwidth", re.MULTILINE), "the closing '# Avg bus bandwidth' summary"),
    "gpu_burn": (re.compile(r"^\s*Tested \d+ GPUs", re.MULTILINE), "the closing 'Tested N GPUs' list"),
    "ior": (
        re.compile(r"^(Summary of all tests:|Max (Write|Read):)", re.MULTILINE),
        "the 'Summary of all tests' table or a 'Max Write/Read' line",
    ),
    "mdtest": (re.compile(r"^\s*-- finished at .*--\s*$", re.MULTILINE), "the closing '-- finished at ... --' line"),
}


# Parser kinds whose measurements are events (dmesg: one `xid` per Xid, one `sxid` per SXid event).
EVENT_LOGS = frozenset({"dmesg"})


def register_parser(kind: str) -> Callable[[Parser], Parser]:
    def wrap(func: Parser) -> Parser:
        if kind in PARSERS:
            raise ValueError(f"parser kind {kind!r} registered twice")
        PARSERS[kind] = func
        return func

    return wrap


def parse_output(kind: str, text: str) -> Parsed:
    """`PARSERS[kind](text)` behind the guard described in the module docstring."""
    parsed = PARSERS[kind](text)
    if not parsed.measurements and kind not in EVENT_LOGS:
        why = f" ({'; '.join(parsed.warnings[:2])})" if parsed.warnings else ""
        raise EvidenceError(f"no {kind} evidence: the output holds no measurements{why}")
    marker = COMPLETION_MARKERS.get(kind)
    if marker is not None and not marker[0].search(text):
        raise EvidenceError(f"{kind} output incomplete: {marker[1]} is missing (the run stopped early or was cut)")
    flag_non_finite(parsed.measurements)
    return parsed


def flag_non_finite(measurements: list[Measurement]) -> int:
    """Label every measurement whose value is NaN or infinite with `labels["invalid"]`; how many."""
    flagged = 0
    for m in measurements:
        value = m.value
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isfinite(value):
            m.labels["invalid"] = f"not a finite number: {value!r}"
            flagged += 1
    return flagged


def load_json(text: str, what: str) -> Any:
    """`json.loads`, with every failure (bad syntax, nesting too deep to decode) as EvidenceError."""
    try:
        return json.loads(text)
    except RecursionError:
        raise EvidenceError(f"{what} is nested too deeply to be a real document") from None
    except json.JSONDecodeError as exc:
        raise EvidenceError(f"{what} is not JSON ({exc.msg}): {text.strip()[:80]!r}") from None
