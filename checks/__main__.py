"""Command line: `python -m checks parse|judge|list`.

`parse KIND FILE` parses one captured tool output (KIND: nccl, gpu_burn, nvidia_smi_xml, dmesg, ibstat,
fio, ior, elbencho, dcgmi_diag, redfish_thermal, ipmitool_sdr, ...) and prints
{"kind", "measurements": [{"name", "value", "unit", "gpu", "labels"}], "warnings"}; it exits 2 with a
one-line reason on stderr when the output cannot be parsed at all.

`judge KIND FILE [--profile P]` runs a check's evaluation on a captured output and prints
{"kind", "measurements", "verdict": {"status", "reason"}}. KIND is a check key (FILE is probe JSON,
or nvidia-smi -q -x XML, detected by content), or `nvidia_smi_xml`: FILE is nvidia-smi XML, judged by
every probe-based check (or just `--check KEY`). `parse CHECK_KEY FILE` is the same as judge.
Exit 2 on usage problems (unknown kind or profile, unreadable file).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from checks import REGISTRY, get_check
from checks.base import Command, CommandOutput, EvidenceError, NodeContext, ParamsError, run_check
from checks.probe_check import PROBE_LABEL, ProbeCheck
from checks.profiles import PROFILES, resolve_thresholds

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


def judge(kind: str, stdout: str, *, profile: str | None, hostname: str = "-") -> dict[str, Any]:
    """One check's measurements and verdict on a captured output, as a JSON-ready dict."""
    check = get_check(kind)
    thresholds = resolve_thresholds(kind, profile)
    label = PROBE_LABEL if isinstance(check, ProbeCheck) else "file"
    output = CommandOutput(
        command=Command(argv=("file",), timeout=0, label=label), stdout=stdout, stderr="", exit_code=0
    )
    measurements, verdict = run_check(check, None, thresholds, [output], NodeContext(hostname=hostname))
    return {
        "kind": kind,
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
    from checks.parsers import PARSERS

    if args.kind in PARSERS and args.command == "parse":
        text = _read(args.file)
        try:
            parsed = PARSERS[args.kind](text)
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
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None


def cmd_judge(args: argparse.Namespace) -> dict[str, Any]:
    if args.kind != XML_KIND and args.kind not in REGISTRY:
        from checks.parsers import PARSERS

        known = ", ".join(sorted({*REGISTRY, *PARSERS, XML_KIND}))
        raise UsageError(f"unknown kind {args.kind!r}; known: {known}")
    if args.profile and args.profile not in PROFILES:
        raise UsageError(f"unknown profile {args.profile!r}; known: {', '.join(sorted(PROFILES))}")
    text = _read(args.file)
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
    return {"profile": args.profile, "profiles": sorted(PROFILES), "kinds": kinds}


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
    except (UsageError, ParamsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
