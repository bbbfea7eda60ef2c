"""kiln_verify FILE.pdf [--evidence EXPORT.jsonl] [--json]: is this certificate valid, tampered, revoked,
or sealed by an unknown key? With --evidence, does the exported detailed evidence (kiln_evidence, or
the portal's evidence download) match the digests the certificate seals, node by node?

It also prints when the PDF was signed: a trusted time from an RFC 3161 timestamp by a TSA whose root is
in KILN_TSA_CA (named), or the portal's own clock.

Exit codes (stable; scripts may rely on them):
  0 valid          every byte is signed by this site, the evidence is sealed, the pages agree with it
  1 tampered       any byte of the signed PDF or payload changed (a damaged or truncated certificate
                   included), or the pages contradict the evidence, or this portal's audit log no
                   longer verifies (kiln_audit: an event or revocation deleted or altered)
  2 unknown key    sound signatures, but by keys this site does not hold (another site's certificate)
  3 not a certificate  not a PDF, or a PDF without a Kiln signature, payload or producer line
  4 revoked        valid, but this site revoked it (the reason is printed)
  5 evidence mismatch  the certificate is valid, but the evidence export does not match it (the nodes
                   whose evidence differs, is missing or is extra are named)
  64 usage error   a missing or unreadable file, or wrong arguments (EX_USAGE from sysexits.h, so it
                   never reads as "unknown key")
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any, NoReturn

from django.core.management.base import BaseCommand, CommandParser

from portal.certificates import export, seal, signing, verification

EX_USAGE = 64


def signed_time_line(time: dict[str, str]) -> str:
    """'signed at T, ...': a TSA's trusted time, or the portal's own clock (and why not a TSA's)."""
    if time.get("source") == signing.TIME_TSA:
        return f"signed at {time['time']} (trusted time: RFC 3161 timestamp by {time['tsa']})"
    return f"signed at {time.get('time') or 'an unknown time'} by the portal's clock ({time.get('note', '')})"


class Command(BaseCommand):
    help = (
        "Verify a Kiln certificate PDF offline: its PDF signature, its sealed payload, its first page and this "
        "site's revocations; with --evidence, an evidence export against the sealed digests. Exit 0 valid, "
        "1 tampered, 2 unknown key, 3 not a certificate, 4 revoked, 5 evidence mismatch."
    )

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        parser = super().create_parser(prog_name, subcommand, **kwargs)

        def exit_usage(status: int = 0, message: str | None = None) -> NoReturn:
            if message:
                sys.stderr.write(message)
            sys.exit(EX_USAGE if status else 0)

        parser.exit = exit_usage  # type: ignore[method-assign]
        return parser

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="the certificate PDF")
        parser.add_argument("--json", action="store_true", help="print the answer as JSON")
        parser.add_argument("--evidence", help="an evidence export (JSON lines) to check against the certificate")

    def handle(self, *args: Any, **options: Any) -> None:
        path = Path(options["file"])
        try:
            data = path.read_bytes()
        except OSError as exc:  # nothing was verified: a wrong path is the caller's error, not a verdict
            sys.stderr.write(f"kiln_verify: cannot read {path}: {exc.strerror or exc}\n")
            sys.exit(EX_USAGE)
        verdict = verification.certificate_verify(data=data, digests=bool(options["evidence"]))
        code = verification.EXIT_CODES[verdict.status]
        evidence = self._evidence(verdict, options["evidence"]) if options["evidence"] else None
        if evidence is not None and not evidence.ok and code == 0:
            code = verification.EVIDENCE_MISMATCH_EXIT
        if options["json"]:
            self.stdout.write(json.dumps(self._as_json(verdict, code, evidence), indent=2))
        else:
            self._print(path, verdict, evidence)
        sys.exit(code)

    @staticmethod
    def _evidence(verdict: seal.Verdict, name: str) -> export.EvidenceCheck:
        try:
            with open(name, "rb") as f:  # streamed: an export of 12,500 nodes is about a gigabyte
                return verification.evidence_check(verdict=verdict, lines=f)
        except OSError as exc:
            return export.EvidenceCheck(False, f"cannot read {name}: {exc.strerror or exc}")

    @staticmethod
    def _as_json(verdict: seal.Verdict, code: int, evidence: export.EvidenceCheck | None) -> dict[str, Any]:
        payload = verdict.payload or {}
        return {
            **({"evidence": asdict(evidence)} if evidence is not None else {}),
            "status": verdict.status,
            "exit_code": code,
            "detail": verdict.detail,
            "notes": verdict.notes,
            "number": payload.get("number"),
            "verdict": payload.get("verdict"),
            "cluster": (payload.get("cluster") or {}).get("name"),
            "key_fingerprint": verdict.fingerprint,
            "time": verdict.time,  # {"time", "source", "tsa", "note"}: when it was signed, by whose clock
        }

    def _print(self, path: Path, verdict: seal.Verdict, evidence: export.EvidenceCheck | None) -> None:
        self.stdout.write(f"{path}: {verdict.status.upper()}")
        self.stdout.write(f"  {verdict.detail}")
        if verdict.payload:
            p = verdict.payload
            self.stdout.write(
                f"  certificate {p.get('number')} for cluster {(p.get('cluster') or {}).get('name')}: "
                f"{p.get('verdict')}, issued {p.get('issued_at')}"
            )
        if verdict.time:
            self.stdout.write(f"  {signed_time_line(verdict.time)}")
        for note in verdict.notes:
            self.stdout.write(f"  {note}")
        if evidence is not None:
            self.stdout.write(f"  evidence: {'MATCHES' if evidence.ok else 'DOES NOT MATCH'}: {evidence.detail}")
