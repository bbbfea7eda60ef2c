"""kiln_verify FILE.pdf [--evidence EXPORT.jsonl] [--against CLUSTER] [--json]: is this certificate valid,
tampered, revoked, or sealed by an unknown key? With --evidence, does the exported detailed evidence
(kiln_evidence, or the portal's evidence download) match the digests the certificate seals, node by
node? With --against, are the parts in the cluster's nodes now the ones the certificate seals
(serials, UUIDs, GUIDs, firmware, read again over SSH: portal/certificates/hardware.py)?

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
  6 hardware differs  the certificate is valid, but a part of a node differs from the sealed one (--against:
                   each swapped, changed, missing or extra part is named with its node, index and values)
  7 could not tell  the certificate is valid and no difference was found, but some node or part could not
                   be read (--against: unreachable, not in the cluster, a field not reported now), or
                   the certificate seals no hardware (issued before format 4)
  The first that applies wins: the certificate's own code, then 5, 6, 7.
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

from portal.certificates import export, hardware, seal, signing, verification
from portal.inventory.models import Cluster

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
        "1 tampered, 2 unknown key, 3 not a certificate, 4 revoked, 5 evidence mismatch; with --against CLUSTER, the "
        "nodes' hardware against the sealed identities: 6 hardware differs, 7 could not tell."
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
        parser.add_argument(
            "--against",
            metavar="CLUSTER",
            help="read the hardware identities of this cluster's nodes over SSH and compare them with the sealed ones",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        path = Path(options["file"])
        cluster = None
        if options["against"]:
            cluster = Cluster.objects.filter(name=options["against"]).first()
            if cluster is None:
                sys.stderr.write(f"kiln_verify: no cluster named {options['against']!r}\n")
                sys.exit(EX_USAGE)
        try:
            data = path.read_bytes()
        except OSError as exc:  # nothing was verified: a wrong path is the caller's error, not a verdict
            sys.stderr.write(f"kiln_verify: cannot read {path}: {exc.strerror or exc}\n")
            sys.exit(EX_USAGE)
        verdict = verification.certificate_verify(
            data=data, digests=bool(options["evidence"]), hardware=cluster is not None
        )
        code = verification.EXIT_CODES[verdict.status]
        evidence = self._evidence(verdict, options["evidence"]) if options["evidence"] else None
        if evidence is not None and not evidence.ok and code == 0:
            code = verification.EVIDENCE_MISMATCH_EXIT
        parts = hardware.certificate_hardware_verify(verdict=verdict, cluster=cluster) if cluster is not None else None
        if parts is not None and code == 0:
            code = parts.exit_code
        if options["json"]:
            self.stdout.write(json.dumps(self._as_json(verdict, code, evidence, parts), indent=2))
        else:
            self._print(path, verdict, evidence)
            self._print_hardware(parts)
        sys.exit(code)

    def _print_hardware(self, parts: hardware.HardwareCheck | None) -> None:
        if parts is None:
            return
        word = "DIFFERS" if parts.differs else ("COULD NOT TELL" if parts.unknown else "MATCHES")
        self.stdout.write(f"  hardware: {word}: {parts.detail}")
        for difference in parts.differences:
            self.stdout.write(f"    {difference.line()}")
        for line in parts.unknown:
            self.stdout.write(f"    {line}")
        for note in parts.notes:
            self.stdout.write(f"    note: {note}")

    @staticmethod
    def _evidence(verdict: seal.Verdict, name: str) -> export.EvidenceCheck:
        try:
            with open(name, "rb") as f:  # streamed: an export of 12,500 nodes is about a gigabyte
                return verification.evidence_check(verdict=verdict, lines=f)
        except OSError as exc:
            return export.EvidenceCheck(False, f"cannot read {name}: {exc.strerror or exc}")

    @staticmethod
    def _as_json(
        verdict: seal.Verdict, code: int, evidence: export.EvidenceCheck | None, parts: hardware.HardwareCheck | None
    ) -> dict[str, Any]:
        payload = verdict.payload or {}
        return {
            **({"evidence": asdict(evidence)} if evidence is not None else {}),
            **({"hardware": parts.as_json()} if parts is not None else {}),
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
