"""kiln_keys init|rotate|list|ca|export-public|import|trust: the site's certificate-signing keys.

Keys are made only here (never at first use): a worker that cannot load them refuses to issue, and
the campaign page says why. See portal/certificates/keys.py for the layout of KILN_KEY_DIR.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from portal.certificates import keys


class Command(BaseCommand):
    help = "Create, rotate, list and export the site's certificate-signing keys (KILN_KEY_DIR)."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        init = sub.add_parser("init", help="create the site CA and the first signing keys (once)")
        init.add_argument("--site", default="", help="organisation/site name in the certificates (default: hostname)")
        init.add_argument("--if-missing", action="store_true", help="do nothing when keys exist (for scripts)")
        sub.add_parser("rotate", help="new signing keys; old certificates keep verifying")
        sub.add_parser("list", help="every key: fingerprint, kind, current or retired")
        ca = sub.add_parser("ca", help="print the site CA certificate (PEM) and its SHA-256 fingerprint")
        ca.add_argument("--pem", action="store_true", help="the PEM alone (to save as a file for a PDF reader)")
        sub.add_parser("export-public", help="print the public keys and CA certificates (PEM)")
        imp = sub.add_parser("import", help="sign PDFs with a certificate from the site's own PKI")
        imp.add_argument("--cert", required=True, type=Path, help="PDF-signing certificate (PEM)")
        imp.add_argument("--key", required=True, type=Path, help="its private key (PEM, unencrypted, ECDSA or RSA)")
        imp.add_argument("--ca", required=True, type=Path, help="the root CA certificate (PEM): the trust anchor")
        imp.add_argument("--chain", type=Path, action="append", default=[], help="intermediate certificate(s)")
        trust = sub.add_parser(
            "trust",
            help="also accept every CA certificate and Ed25519 seal key in a PEM file (another site's export-public)",
        )
        trust.add_argument("file", type=Path)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            getattr(self, "_" + options["action"].replace("-", "_"))(options)
        except keys.KeyringError as exc:
            raise CommandError(str(exc)) from None

    def _init(self, options: dict[str, Any]) -> None:
        root = keys.key_dir()
        if options["if_missing"] and (root / keys.CURRENT).exists():
            self.stdout.write(f"site keys exist in {root}")
            return
        identity = keys.keyring_init(site=options["site"] or socket.gethostname())
        self.stdout.write(f"created the site keys in {root} (generation {identity.generation})")
        self._list(options)

    def _rotate(self, options: dict[str, Any]) -> None:
        identity, retired = keys.keyring_rotate()
        self.stdout.write(f"now signing with generation {identity.generation}; retired: {', '.join(retired) or '-'}")
        self._list(options)

    def _import(self, options: dict[str, Any]) -> None:
        identity = keys.keyring_import(
            cert_path=options["cert"], key_path=options["key"], chain_paths=options["chain"], ca_path=options["ca"]
        )
        self.stdout.write(f"now signing PDFs as {identity.pdf_cert.subject.rfc4514_string()}")
        self._list(options)

    def _trust(self, options: dict[str, Any]) -> None:
        for added in keys.trust_import(path=options["file"]):
            self.stdout.write(f"trusted {added.role:7} {added.fingerprint}  {added.subject or added.role.label}")

    def _list(self, options: dict[str, Any]) -> None:
        store = keys.trust_store_load()
        if not store.keys:
            self.stdout.write(f"no keys in {keys.key_dir()}: run `kiln keys init`")
        for key in store.keys:
            state = "current" if key.current else "retired/imported"
            self.stdout.write(f"{key.role:7} {state:16} {key.fingerprint}  {key.subject or key.source}")

    def _ca(self, options: dict[str, Any]) -> None:
        cert = keys.site_ca()
        if not options["pem"]:
            self.stdout.write(f"Site CA: {cert.subject.rfc4514_string()}")
            self.stdout.write(f"SHA-256 fingerprint: {keys.cert_fingerprint(cert)}")
            self.stdout.write(f"Valid until: {cert.not_valid_after_utc:%Y-%m-%d} (UTC)")
        self.stdout.write(keys.site_ca_pem(), ending="")

    def _export_public(self, options: dict[str, Any]) -> None:
        self.stdout.write(keys.public_export(), ending="")
