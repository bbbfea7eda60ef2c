"""kiln_audit verify [--json]: does the audit log's hash chain still link from the first event to
the newest, does every event hash to what it carries, and does every revocation match its event?

Exit codes (as kiln_verify's): 0 the log verifies; 1 tampered (each problem is printed: an event
deleted or altered, a revocation deleted while its event remains, or the other way round).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from portal.certificates import auditchain

TAMPERED_EXIT = 1  # kiln_verify's "tampered"


class Command(BaseCommand):
    help = "Verify the audit log's hash chain and the revocations against it. Exit 0 sound, 1 tampered."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        verify = sub.add_parser("verify", help="check every link and hash, and the revocations")
        verify.add_argument("--json", action="store_true", help="print the answer as JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        report = auditchain.chain_verify()
        if options["json"]:
            out = {"ok": report.ok, "events": report.events, "head": report.head, "problems": report.problems}
            self.stdout.write(json.dumps(out, indent=2))
        else:
            head = report.head or {}
            self.stdout.write(
                f"audit log: {'SOUND' if report.ok else 'TAMPERED'}: {report.events} events, "
                f"head #{head.get('id', '-')} sha256 {head.get('sha256', '-')}"
            )
            for problem in report.problems:
                self.stdout.write(f"  {problem}")
        sys.exit(0 if report.ok else TAMPERED_EXIT)
