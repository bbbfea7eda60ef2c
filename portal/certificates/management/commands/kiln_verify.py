"""kiln_verify FILE.pdf [--json]: is this certificate valid, tampered, or sealed by an unknown key?

Exit code: 0 valid, 1 tampered, 2 unknown key, 3 not a Kiln certificate (or unreadable).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from portal.certificates import seal, services

EXIT_CODES = {seal.VALID: 0, seal.TAMPERED: 1, seal.UNKNOWN_KEY: 2, seal.NOT_A_CERTIFICATE: 3}


class Command(BaseCommand):
    help = "Verify a Kiln certificate PDF offline: its embedded payload against its Ed25519 seal and this site's keys."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="the certificate PDF")
        parser.add_argument("--json", action="store_true", help="print the answer as JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        path = Path(options["file"])
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc}") from None
        verdict = services.certificate_verify(data=data)
        if options["json"]:
            payload = verdict.payload or {}
            out = {
                "status": verdict.status,
                "detail": verdict.detail,
                "notes": verdict.notes,
                "number": payload.get("number"),
                "cluster": (payload.get("cluster") or {}).get("name"),
                "key_fingerprint": verdict.fingerprint,
            }
            self.stdout.write(json.dumps(out, indent=2))
        else:
            self.stdout.write(f"{path}: {verdict.status.upper()}")
            self.stdout.write(f"  {verdict.detail}")
            if verdict.payload:
                p = verdict.payload
                self.stdout.write(
                    f"  certificate {p.get('number')} for cluster {(p.get('cluster') or {}).get('name')}: "
                    f"{p.get('verdict')}, issued {p.get('issued_at')}"
                )
            for note in verdict.notes:
                self.stdout.write(f"  {note}")
        sys.exit(EXIT_CODES.get(verdict.status, 3))
