"""Command line: `python -m checks parse|judge|list`.

`parse KIND FILE` parses one captured tool output (KIND: nccl, gpu_burn, nvidia_smi_xml, dmesg, ibstat,
fio, ior, elbencho, dcgmi_diag, redfish_thermal, ipmitool_sdr, ...) and prints
{"kind", "measurements": [{"name", "value", "unit", "gpu", "labels"}], "warnings"}. A value that is not
a finite number prints as null with `labels.invalid` naming it.

`judge KIND FILE [--profile P]` runs a check's evaluation on a captured output and prints
{"kind", "check", "measurements", "verdict": {"status", "reason"}}. KIND is a check key (FILE is probe
JSON, or nvidia-smi -q -x XML, detected by content), `nvidia_smi_xml` (FILE is nvidia-smi XML, judged by
every probe-based check, or just `--check KEY`), or any parser kind: the raw output is judged by the
check that consumes that tool (checks/core/raw_outputs.py; e.g. gpu_burn -> burn_in, ibstat -> ib_ports); a parser
kind that no check consumes yet (the power and cooling readings, checks/power/readings.py) is refused in one line.
A check that needs more than that one output says `error`, never pass; the parser's own view is then
printed under "parsed". `parse CHECK_KEY FILE` is the same as judge.

Exit codes: 0 printed a result; 2 anything else, with exactly one line on stderr and nothing on stdout:
unknown kind or profile, an unreadable file, a file over MAX_INPUT_BYTES (64 MiB; refused before it is
read), an output that holds no evidence, is incomplete or cannot be parsed, and any internal error (never
a traceback).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
from typing import Any

from checks import REGISTRY, get_check
from checks.core.base import Command, CommandOutput, EvidenceError, NodeContext, ParamsError, run_check
from checks.core.parsers import MAX_INPUT_BYTES, PARSERS, flag_non_finite, parse_output
from checks.core.probe_check import PROBE_LABEL, ProbeCheck
from checks.core.profiles import PROFILES, resolve_thresholds
from checks.core.raw_outputs import RAW_JUDGES, fio_check

XML_KIND = "nvidia_smi_xml"


class UsageError(Exception):
    pass


def _xml_to_probe_json(text: str) -> str:
    try:
        from checks.probe.probe import parse_nvidia_smi_xml  # lazy: the node-side module
    except ImportError as exc:
        raise UsageError(f"nvidia-smi XML support is unavailable: {exc}") from None
    try:
        return json.dumps(parse_nvidia_smi_xml(text))
    except ValueError as exc:
        raise UsageError(f"not nvidia-smi XML: {exc}") from None


def _looks_like_xml(text: str) -> bool:
    head = text.lstrip()[:200]
    return head.startswith("<?xml") or head.startswith("<nvidia_smi_log")


def judge(
    kind: str,
    stdout: str,
    *,
    profile: str | None,
    hostname: str = "-",
    outputs: list[CommandOutput] | None = None,
) -> dict[str, Any]:
    """One check's measurements and verdict on a captured output, as a JSON-ready dict."""
    check = get_check(kind)
    thresholds = resolve_thresholds(kind, profile)
    if outputs is None:
        label = PROBE_LABEL if isinstance(check, ProbeCheck) else "file"
        command = Command(argv=("file",), timeout=0, label=label)
        outputs = [CommandOutput(command=command, stdout=stdout, stderr="", exit_code=0)]
    measurements, verdict = run_check(check, None, thresholds, outputs, NodeContext(hostname=hostname))
    flag_non_finite(measurements)
    return {
        "kind": kind,
        "check": kind,
        "profile": profile,
        "thresholds": thresholds,
        "measurements": [m.as_dict() for m in measurements],
        "verdict": {
            "status": verdict.status,
            "reason": verdict.reason,
            "findings": [dataclasses.asdict(f) for f in verdict.findings],
        },
    }


def cmd_parse(args: argparse.Namespace) -> dict[str, Any]:
    if args.kind in PARSERS and args.command == "parse":
        text = _read(args.file)
        try:
            parsed = parse_output(args.kind, text)
        except EvidenceError as exc:
            raise UsageError(f"cannot parse {args.file} as {args.kind}: {exc}") from None
        return {
            "kind": args.kind,
            "measurements": [_public(m) for m in parsed.measurements],
            "warnings": parsed.warnings,
        }
    return cmd_judge(args)


def _public(m: Any) -> dict[str, Any]:
    value = m.value if m.value is not None else (m.text if m.text != "" else None)
    return {"name": m.name, "value": value, "unit": m.unit or None, "gpu": m.gpu, "labels": m.labels}


def _read(path: str) -> str:
    """The file's text (UTF-8, undecodable bytes replaced), read with a size cap: a file over
    MAX_INPUT_BYTES is refused before it is read (regular files), or once the cap is passed."""
    limit_mib = MAX_INPUT_BYTES // (1024 * 1024)
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size > MAX_INPUT_BYTES:
                raise UsageError(f"{path}: input larger than {limit_mib} MiB ({size} bytes); Kiln reads at most that")
            data = handle.read(MAX_INPUT_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_INPUT_BYTES:
        raise UsageError(f"{path}: input larger than {limit_mib} MiB; Kiln reads at most that")
    return data.decode("utf-8", errors="replace")


def _known_kinds() -> str:
    return ", ".join(sorted({*REGISTRY, *PARSERS, XML_KIND}))


def cmd_judge(args: argparse.Namespace) -> dict[str, Any]:
    raw = RAW_JUDGES.get(args.kind)
    _refuse_unjudged(args)
    if args.kind != XML_KIND and args.kind not in REGISTRY and raw is None:
        raise UsageError(f"unknown kind {args.kind!r}; known: {_known_kinds()}")
    if args.profile and args.profile not in PROFILES:
        raise UsageError(f"unknown profile {args.profile!r}; known: {', '.join(sorted(PROFILES))}")
    text = _read(args.file)
    if raw is not None:
        return _judge_raw(args.kind, text, profile=args.profile)
    if args.kind == XML_KIND or (_looks_like_xml(text) and isinstance(get_check(args.kind), ProbeCheck)):
        text = _xml_to_probe_json(text)
    if args.kind != XML_KIND:
        return judge(args.kind, text, profile=args.profile)
    kinds = [args.check] if args.check else sorted(k for k, c in REGISTRY.items() if issubclass(c, ProbeCheck))
    unknown = [k for k in kinds if k not in REGISTRY]
    if unknown:
        raise UsageError(f"unknown check {unknown[0]!r}; known: {', '.join(sorted(REGISTRY))}")
    results = [judge(k, text, profile=args.profile) for k in kinds]
    if args.check:
        return results[0]
    return {"kind": XML_KIND, "probe": json.loads(text), "checks": results}


def _refuse_unjudged(args: argparse.Namespace) -> None:
    """A parser kind that no check consumes yet: one line, after the file's own problems (the
    size cap, an unreadable path), as for every kind."""
    if args.kind in PARSERS and args.kind not in RAW_JUDGES and args.kind not in REGISTRY and args.kind != XML_KIND:
        _read(args.file)
        raise UsageError(f"no check judges {args.kind} outputs yet; `parse {args.kind} FILE` prints its measurements")


def _judge_raw(kind: str, text: str, *, profile: str | None) -> dict[str, Any]:
    """A parser kind's raw output judged by the check that consumes that tool (checks/core/raw_outputs.py)."""
    raw = RAW_JUDGES[kind]
    check = fio_check(text) if raw.check == "fs_throughput" and kind == "fio" else raw.check
    result = judge(check, text, profile=profile, outputs=raw.build(text))
    result["kind"] = kind
    if raw.note:
        result["note"] = raw.note
    if not result["measurements"]:
        try:
            parsed = parse_output(kind, text)
        except EvidenceError as exc:
            result["parsed"] = {"error": str(exc)}
        else:
            result["parsed"] = {"measurements": [_public(m) for m in parsed.measurements], "warnings": parsed.warnings}
    return result


def cmd_list(args: argparse.Namespace) -> dict[str, Any]:
    kinds = {}
    for key in sorted(REGISTRY):
        check = get_check(key)
        kinds[key] = {
            "name": check.name,
            "description": check.description,
            "params": check.default_params(),
            "thresholds": resolve_thresholds(key, args.profile),
        }
    judges = {kind: {"check": raw.check, "note": raw.note} for kind, raw in sorted(RAW_JUDGES.items())}
    return {"profile": args.profile, "profiles": sorted(PROFILES), "kinds": kinds, "parsers": judges}


def _finite(value: Any) -> Any:
    """The result with every non-finite float as None (the measurement's labels.invalid names it):
    the printed JSON stays valid JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _one_line(text: str, limit: int = 500) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m checks", description="Kiln check parsers")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (
        ("parse", "parse one captured tool output file, print its measurements as JSON"),
        ("judge", "judge one captured output with a check's thresholds, print the verdict as JSON"),
    ):
        p_cmd = sub.add_parser(name, help=text)
        p_cmd.add_argument("kind", help=f"parser kind, check key, or {XML_KIND}")
        p_cmd.add_argument("file")
        p_cmd.add_argument("--profile", default=None, help="hardware profile for thresholds (default: check defaults)")
        p_cmd.add_argument("--check", default=None, help=f"judge {XML_KIND} with this check only")
    p_list = sub.add_parser("list", help="list check kinds with default params and thresholds")
    p_list.add_argument("--profile", default=None)
    args = parser.parse_args(argv)
    try:
        if args.command == "list" and args.profile and args.profile not in PROFILES:
            raise UsageError(f"unknown profile {args.profile!r}; known: {', '.join(sorted(PROFILES))}")
        result = cmd_list(args) if args.command == "list" else cmd_parse(args)
        rendered = json.dumps(_finite(result), indent=2, allow_nan=False)
    except (UsageError, ParamsError) as exc:
        print(f"error: {_one_line(str(exc))}", file=sys.stderr)
        return 2
    except Exception as exc:  # the CLI's promise: one line and exit 2, never a traceback
        where = f" ({args.kind} {args.file})" if args.command != "list" else ""
        print(f"error: internal error{where}: {type(exc).__name__}: {_one_line(str(exc))}", file=sys.stderr)
        return 2
    sys.stdout.write(rendered + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
