"""kiln_evidence NUMBER [-o FILE]: export a certificate's detailed evidence as JSON lines.

Each line after the header is one node's evidence record (or a group result's); its SHA-256 is the
`evidence_sha256` the sealed payload carries. Check an export with
`kiln_verify CERT.pdf --evidence FILE`."""

from __future__ import annotations

import json
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from portal.certificates import export
from portal.certificates.models import Certificate


class Command(BaseCommand):
    help = "Export a format-3 certificate's detailed evidence (JSON lines; - or no -o: standard output)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("number", help="the certificate number, e.g. KILN-c1-3f2a9c1b-20260101-001")
        parser.add_argument("-o", "--output", default="-", help="file to write (default: standard output)")

    def handle(self, *args: Any, **options: Any) -> None:
        certificate = Certificate.objects.filter(number=options["number"]).only("number", "payload", "sha256").first()
        if certificate is None:
            raise CommandError(f"no certificate {options['number']}")
        lines = export.evidence_lines(payload=json.loads(certificate.payload), payload_sha256=certificate.sha256)
        try:
            first = next(lines)
        except export.NoEvidence as exc:
            raise CommandError(str(exc)) from None
        if options["output"] == "-":
            out = sys.stdout.buffer
            out.write(first)
            out.writelines(lines)
            out.flush()
            return
        with open(options["output"], "wb") as f:
            f.write(first)
            f.writelines(lines)
        self.stderr.write(f"wrote {options['output']}")
