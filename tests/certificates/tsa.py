"""A local RFC 3161 timestamp authority for the tests: its own CA and an RSA TSA certificate, pyHanko's
DummyTimeStamper to sign the tokens, served over HTTP from a thread on a free loopback port. `mode`
makes it misbehave the ways a real TSA or the network can: an HTTP error, garbage, a reply to
another request (wrong nonce), a token over another digest (wrong imprint)."""

from __future__ import annotations

import datetime
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from asn1crypto import keys as asn1_keys
from asn1crypto import tsp
from asn1crypto import x509 as asn1_x509
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

GOOD = "good"
HTTP_ERROR = "http 500"
GARBAGE = "garbage"
WRONG_NONCE = "wrong nonce"
WRONG_IMPRINT = "wrong imprint"
REFUSED = "refused"
TSA_NAME = "Test Time Authority"


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Test TSA Org")])  # fmt: skip


def _pair() -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate, rsa.RSAPrivateKey, x509.Certificate]:
    """A root CA (ECDSA) and the TSA's certificate it issues (RSA: the dummy TSA signs with RSA only)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder().subject_name(_name("Test TSA Root")).issuer_name(_name("Test TSA Root"))
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    tsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    tsa = (
        x509.CertificateBuilder().subject_name(_name(TSA_NAME)).issuer_name(ca.subject)
        .public_key(tsa_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.TIME_STAMPING]), critical=True)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    return ca_key, ca, tsa_key, tsa


@dataclass
class LocalTsa:
    """A running TSA: its URL, its root (what KILN_TSA_CA names), how it behaves now, what it answered."""

    url: str
    root: x509.Certificate
    root_pem: Path
    mode: str = GOOD
    served: list[str] = field(default_factory=list)
    authorizations: list[str] = field(default_factory=list)  # each request's Authorization header


def _answer(stamper: object, body: bytes, mode: str) -> tuple[int, str, bytes]:
    import asyncio

    if mode == HTTP_ERROR:
        return 500, "text/html", b"<h1>Internal Server Error</h1>"
    if mode == GARBAGE:
        return 200, "application/timestamp-reply", b"\x30\x03\x02\x01\x00 not a timestamp"
    if mode == REFUSED:  # a TimeStampResp of a status alone (asn1crypto will not build one without a token)
        status = tsp.PKIStatusInfo({"status": "rejection", "status_string": ["policy not accepted"]}).dump()
        return 200, "application/timestamp-reply", b"\x30" + bytes([len(status)]) + status
    request = tsp.TimeStampReq.load(body)
    if mode == WRONG_NONCE:
        request["nonce"] = request["nonce"].native + 1
    if mode == WRONG_IMPRINT:
        imprint = request["message_imprint"]
        imprint["hashed_message"] = bytes(32)
    reply = asyncio.run(stamper.async_request_tsa_response(request))  # type: ignore[attr-defined]
    return 200, "application/timestamp-reply", reply.dump()


@contextmanager
def local_tsa(folder: Path) -> Iterator[LocalTsa]:
    """Serve a TSA until the block ends (then the port is closed: a TSA that is down)."""
    from pyhanko.sign.timestamps import DummyTimeStamper

    _, root, tsa_key, tsa_cert = _pair()
    der = tsa_key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())  # fmt: skip
    stamper = DummyTimeStamper(
        tsa_cert=asn1_x509.Certificate.load(tsa_cert.public_bytes(serialization.Encoding.DER)),
        tsa_key=asn1_keys.PrivateKeyInfo.load(der),
    )
    root_pem = folder / "tsa-root.pem"
    root_pem.write_bytes(root.public_bytes(serialization.Encoding.PEM))
    state = LocalTsa(url="", root=root, root_pem=root_pem)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            state.authorizations.append(self.headers.get("Authorization", ""))
            code, kind, reply = _answer(stamper, body, state.mode)
            state.served.append(state.mode)
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}/tsa"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
