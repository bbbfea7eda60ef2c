"""The site's signing keys on disk: created only by `manage.py kiln_keys`, never at first use.

Two keys sign a certificate (see seal.py and signing.py):
- an Ed25519 key seals the canonical JSON payload (the machine-readable evidence);
- an ECDSA P-256 key with an X.509 certificate signs the finished PDF (PAdES), so that any PDF
  reader shows the signature. poppler's pdfsig validates ECDSA P-256 but not Ed25519 PDF signatures,
  and common readers are the same; P-256 is also what the EU's ETSI TS 119 312 lists for signatures.

Layout of KILN_KEY_DIR (default DATA_DIR/keys), mode 0700, private keys 0600:

    ca.crt.pem                 the site CA: the trust anchor of the PDF signature (public)
    ca.key.pem                 its private key (absent when the site imported its certificate)
    current -> generations/S   symlink to the generation that signs now
    generations/S/             seal.key.pem, pdf.key.pem (private; removed when retired),
                               seal.pub.pem, pdf.crt.pem, chain.pem (public; kept for verifying)
    trusted/                   public keys (*.pub.pem) and CA certificates (*.crt.pem) imported from
                               elsewhere: another site, or a key directory that was lost

Rotation makes a new generation, swaps the symlink atomically, and deletes the old private keys:
old certificates keep verifying against their generation's public parts. Every file is written to
a temporary name, fsynced and renamed, so a full disk never leaves a truncated key behind.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import re
import tempfile
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.x509.oid import NameOID

from portal.certificates.seal import fingerprint

CA_CERT = "ca.crt.pem"
CA_KEY = "ca.key.pem"
CURRENT = "current"
GENERATIONS = "generations"
TRUSTED = "trusted"
IMPORTED = "imported"  # how trust_store_load names a key from TRUSTED/
SEAL_KEY, SEAL_PUB = "seal.key.pem", "seal.pub.pem"
PDF_KEY, PDF_CERT, CHAIN = "pdf.key.pem", "pdf.crt.pem", "chain.pem"

# The CRL embedded with each signature (site_crl) only has to cover the moment of signing; a day
# leaves room for a worker's clock and the TSA's to disagree by hours.
CRL_HOURS = 24

# Validity: the CA outlives every certificate it signs; a PDF signed today must still verify in 10
# years (a cluster's service life), so the signing certificate is valid for 11 and the CA for 21.
CA_DAYS = 21 * 365
SIGNER_DAYS = 11 * 365

PdfSigningKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


class KeyringError(RuntimeError):
    """The keys are missing, unreadable or inconsistent; the message says what to run."""


@dataclass(frozen=True)
class SigningIdentity:
    """What issuing a certificate needs: the current generation's private keys and certificate chain."""

    seal_key: Ed25519PrivateKey
    pdf_key: PdfSigningKey
    pdf_cert: x509.Certificate
    chain: tuple[x509.Certificate, ...]
    generation: str


class KeyRole(StrEnum):
    """What a trusted key is for (its value is the word kiln_keys and the public export print)."""

    SEAL = "seal"  # Ed25519 key of the payload seal
    CA = "ca"  # trust anchor of the PDF signature
    SIGNER = "signer"  # PDF-signing certificate (issued by a CA; not exported on its own)

    @property
    def label(self) -> str:
        return _ROLE_LABELS[self]


_ROLE_LABELS = {
    KeyRole.SEAL: "payload seal key (Ed25519)",
    KeyRole.CA: "CA certificate (trust anchor of the PDF signature)",
    KeyRole.SIGNER: "PDF-signing certificate",
}


@dataclass(frozen=True)
class TrustedKey:
    """A public key or CA certificate that verification accepts, and where it came from."""

    role: KeyRole
    fingerprint: str
    subject: str
    source: str
    current: bool
    pem: str

    @property
    def imported(self) -> bool:
        """Accepted from elsewhere (`kiln_keys trust`), not one of this site's own keys."""
        return self.source.startswith(IMPORTED)


@dataclass(frozen=True)
class TrustStore:
    seal_fingerprints: frozenset[str]
    roots: tuple[x509.Certificate, ...]
    keys: tuple[TrustedKey, ...]
    # Roots of the timestamp authorities whose RFC 3161 time verification trusts (KILN_TSA_CA): not
    # trust anchors of the document signature, which only the site's CA (and imported ones) are.
    tsa_roots: tuple[x509.Certificate, ...] = ()


def key_dir() -> Path:
    from django.conf import settings

    configured = str(settings.KILN_KEY_DIR or "")
    return Path(configured) if configured else Path(settings.DATA_DIR) / "keys"


def cert_fingerprint(cert: x509.Certificate) -> str:
    """SHA-256 of the DER certificate, hex with colons: what openssl, pdfsig and browsers show."""
    return "SHA256:" + cert.fingerprint(hashes.SHA256()).hex(":").upper()


def cert_sha256(cert: x509.Certificate) -> str:
    return hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest()


# --- writing ------------------------------------------------------------------------------------


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes, *, mode: int = 0o600) -> None:
    """Write to a temporary file in the same folder (created with `mode`), fsync, rename over
    `path`. On any failure (ENOSPC included) the temporary file is removed and `path` is untouched."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _private_pem(key: Ed25519PrivateKey | PdfSigningKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _public_pem(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def _cert_pem(*certs: x509.Certificate) -> bytes:
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)


def _name(common_name: str, organisation: str) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name[:64])]
    if organisation:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organisation[:64]))
    return x509.Name(attributes)


def _usage(*, sign: bool, ca: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=sign, content_commitment=sign, key_encipherment=False, data_encipherment=False,
        key_agreement=False, key_cert_sign=ca, crl_sign=ca, encipher_only=False, decipher_only=False,
    )  # fmt: skip


def _ca_build(site: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    name = _name(f"Kiln site CA ({site})", site)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_usage(sign=False, ca=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def _signer_build(
    site: str, ca_key: ec.EllipticCurvePrivateKey, ca_cert: x509.Certificate
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(f"Kiln certificate signing ({site})", site))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(min(now + datetime.timedelta(days=SIGNER_DAYS), ca_cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_usage(sign=True, ca=False), critical=True)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return key, cert


def _stamp() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S%fZ")


def _generation_write(
    root: Path, *, pdf_key: PdfSigningKey, pdf_cert: x509.Certificate, chain: list[x509.Certificate]
) -> str:
    """A new generation folder with a fresh Ed25519 seal key; returns its name (not yet current)."""
    seal_key = Ed25519PrivateKey.generate()
    name = _stamp()
    folder = root / GENERATIONS / name
    folder.mkdir(parents=True, mode=0o700)
    write_atomic(folder / SEAL_KEY, _private_pem(seal_key))
    write_atomic(folder / PDF_KEY, _private_pem(pdf_key))
    write_atomic(folder / SEAL_PUB, _public_pem(seal_key.public_key()), mode=0o644)
    write_atomic(folder / PDF_CERT, _cert_pem(pdf_cert), mode=0o644)
    write_atomic(folder / CHAIN, _cert_pem(*chain), mode=0o644)
    return name


def _current_set(root: Path, generation: str) -> None:
    """Point `current` at a generation atomically (a new symlink renamed over the old one)."""
    tmp = root / f".{CURRENT}.{generation}"
    tmp.unlink(missing_ok=True)
    os.symlink(Path(GENERATIONS) / generation, tmp)
    os.replace(tmp, root / CURRENT)
    _fsync_dir(root)


def _retire_private(root: Path, keep: str) -> list[str]:
    """Delete the private keys of every generation but `keep`; their public parts stay."""
    retired = []
    for folder in sorted((root / GENERATIONS).iterdir()):
        if folder.name == keep or not folder.is_dir():
            continue
        for name in (SEAL_KEY, PDF_KEY):
            if (folder / name).exists():
                (folder / name).unlink()
                retired.append(folder.name)
    return sorted(set(retired))


def keyring_init(*, site: str) -> SigningIdentity:
    """Create the site CA and the first generation. Refuses when keys exist (use rotate)."""
    root = key_dir()
    if (root / CURRENT).exists():  # an init that failed half-way (no `current`) may simply run again
        raise KeyringError(f"{root} already holds site keys: use `kiln_keys rotate` to replace them")
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(root, 0o700)
    ca_key, ca_cert = _ca_build(site)
    write_atomic(root / CA_KEY, _private_pem(ca_key))
    write_atomic(root / CA_CERT, _cert_pem(ca_cert), mode=0o644)
    pdf_key, pdf_cert = _signer_build(site, ca_key, ca_cert)
    _current_set(root, _generation_write(root, pdf_key=pdf_key, pdf_cert=pdf_cert, chain=[ca_cert]))
    return signing_identity_load()


def keyring_rotate() -> tuple[SigningIdentity, list[str]]:
    """A new seal key and PDF-signing key (certified by the site CA); the old private keys are deleted."""
    root = key_dir()
    signing_identity_load()  # the current generation must be sound before it is replaced
    ca_cert = _ca_cert(root)
    if not (root / CA_KEY).exists():
        raise KeyringError(
            f"{root / CA_KEY} is absent (the signing certificate was imported): import a new one with "
            "`kiln_keys import` instead"
        )
    ca_key = serialization.load_pem_private_key((root / CA_KEY).read_bytes(), password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise KeyringError(f"{root / CA_KEY} is not an ECDSA key")
    site = _organisation(ca_cert) or "site"
    pdf_key, pdf_cert = _signer_build(site, ca_key, ca_cert)
    generation = _generation_write(root, pdf_key=pdf_key, pdf_cert=pdf_cert, chain=[ca_cert])
    _current_set(root, generation)
    retired = _retire_private(root, generation)
    return signing_identity_load(), retired


def keyring_import(*, cert_path: Path, key_path: Path, chain_paths: list[Path], ca_path: Path) -> SigningIdentity:
    """Sign PDFs with a certificate the site's own PKI issued (ECDSA or RSA). The CA given becomes the
    trust anchor; a new Ed25519 seal key is made; older generations stay verifiable."""
    root = key_dir()
    cert = _load_cert(cert_path)
    key = serialization.load_pem_private_key(_read(key_path), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise KeyringError(f"{key_path}: a PDF-signing key must be ECDSA or RSA (PDF readers reject Ed25519)")
    if key.public_key().public_numbers() != cert.public_key().public_numbers():  # type: ignore[union-attr]
        raise KeyringError(f"{key_path} is not the private key of {cert_path}")
    ca = _load_cert(ca_path)
    chain = [_load_cert(p) for p in chain_paths] + [ca]
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    previous = root / CA_CERT
    if previous.exists() and cert_sha256(_ca_cert(root)) != cert_sha256(ca):
        write_atomic(root / TRUSTED / f"ca-{_stamp()}.crt.pem", previous.read_bytes(), mode=0o644)
    write_atomic(root / CA_CERT, _cert_pem(ca), mode=0o644)
    (root / CA_KEY).unlink(missing_ok=True)
    generation = _generation_write(root, pdf_key=key, pdf_cert=cert, chain=chain)
    _current_set(root, generation)
    _retire_private(root, generation)
    return signing_identity_load()


_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----\r?\n.*?-----END \1-----", re.DOTALL)


def _bundle_read(path: Path) -> list[x509.Certificate | Ed25519PublicKey]:
    """Every certificate and Ed25519 public key in a PEM file (a `kiln_keys export-public` bundle, or
    one key); anything else in it refuses the whole file, so nothing is trusted half-way."""
    data = _read(path)
    found: list[x509.Certificate | Ed25519PublicKey] = []
    for number, block in enumerate(_PEM_BLOCK.finditer(data), start=1):
        kind = block.group(1).decode()
        try:
            if kind == "CERTIFICATE":
                found.append(x509.load_pem_x509_certificate(block.group(0)))
                continue
            if kind == "PUBLIC KEY":
                public = serialization.load_pem_public_key(block.group(0))
                if isinstance(public, Ed25519PublicKey):
                    found.append(public)
                    continue
                raise KeyringError(f"{path}: PEM block {number} is a {type(public).__name__}, not an Ed25519 seal key")
        except ValueError as exc:
            raise KeyringError(f"{path}: PEM block {number} ({kind}) cannot be read: {exc}") from None
        if "PRIVATE" in kind:
            raise KeyringError(f"{path}: PEM block {number} is a PRIVATE key: trust only public keys, never share one")
        raise KeyringError(f"{path}: PEM block {number} is a {kind}, neither a certificate nor a public key")
    if not found:
        raise KeyringError(
            f"{path}: no PEM certificate or public key in it (expected `kiln_keys export-public` output)"
        )
    return found


def trust_import(*, path: Path) -> list[TrustedKey]:
    """Accept every CA certificate and Ed25519 seal key in a PEM file (another site's
    `kiln_keys export-public` bundle, or a single key) for verification."""
    root = key_dir()
    added: list[TrustedKey] = []
    for item in _bundle_read(path):
        if isinstance(item, x509.Certificate):
            write_atomic(root / TRUSTED / f"ca-{cert_sha256(item)[:16]}.crt.pem", _cert_pem(item), mode=0o644)
            added.append(_trusted_cert(item, KeyRole.CA, str(path), False))
            continue
        fp = fingerprint(item)
        safe = fp.split(":", 1)[1].replace("/", "_").replace("+", "-")[:16]
        write_atomic(root / TRUSTED / f"seal-{safe}.pub.pem", _public_pem(item), mode=0o644)
        added.append(TrustedKey(KeyRole.SEAL, fp, "", str(path), False, _public_pem(item).decode()))
    return added


# --- reading ------------------------------------------------------------------------------------


def _read(path: Path) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise KeyringError(f"cannot read {path}: {exc.strerror or exc}") from None
    if not data.strip():
        raise KeyringError(f"{path} is empty (a failed write?): restore it from a backup or run `kiln_keys rotate`")
    return data


def _load_cert(path: Path) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(_read(path))
    except ValueError as exc:
        raise KeyringError(f"{path} is not a PEM certificate: {exc}") from None


def _load_certs(path: Path) -> list[x509.Certificate]:
    try:
        return x509.load_pem_x509_certificates(_read(path))
    except ValueError as exc:
        raise KeyringError(f"{path} holds no PEM certificate: {exc}") from None


def _ca_cert(root: Path) -> x509.Certificate:
    return _load_cert(root / CA_CERT)


def _organisation(cert: x509.Certificate) -> str:
    values = cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    return str(values[0].value) if values else ""


def _private(path: Path) -> Ed25519PrivateKey | PdfSigningKey:
    try:
        key = serialization.load_pem_private_key(_read(path), password=None)
    except ValueError as exc:
        raise KeyringError(f"{path} is not a PEM private key: {exc}") from None
    if not isinstance(key, Ed25519PrivateKey | ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise KeyringError(f"{path}: unsupported key type {type(key).__name__}")
    return key


def _current_folder(root: Path) -> Path:
    link = root / CURRENT
    if not link.exists():
        raise KeyringError(
            f"no site signing key in {root}: an administrator runs `kiln keys init` once "
            "(workers share this folder, or KILN_KEY_DIR points every worker at a copy)"
        )
    return link.resolve()


def signing_identity_load() -> SigningIdentity:
    """The keys that sign now. Raises KeyringError (never creates a key)."""
    root = key_dir()
    folder = _current_folder(root)
    seal_key = _private(folder / SEAL_KEY)
    pdf_key = _private(folder / PDF_KEY)
    if not isinstance(seal_key, Ed25519PrivateKey):
        raise KeyringError(f"{folder / SEAL_KEY} is not an Ed25519 key")
    if isinstance(pdf_key, Ed25519PrivateKey):
        raise KeyringError(f"{folder / PDF_KEY} must be ECDSA or RSA")
    pdf_cert = _load_cert(folder / PDF_CERT)
    chain = tuple(_load_certs(folder / CHAIN))
    return SigningIdentity(seal_key, pdf_key, pdf_cert, chain, folder.name)


def _trusted_cert(cert: x509.Certificate, role: KeyRole, source: str, current: bool) -> TrustedKey:
    return TrustedKey(role, cert_fingerprint(cert), cert.subject.rfc4514_string(), source, current,
                      _cert_pem(cert).decode())  # fmt: skip


def trust_store_load() -> TrustStore:
    """Every key verification accepts: each generation's seal key and the site CA (current and
    retired), plus what `kiln_keys trust` imported. An empty store (no keys yet) trusts nothing."""
    root = key_dir()
    keys: list[TrustedKey] = []
    roots: list[x509.Certificate] = []
    current = (root / CURRENT).resolve() if (root / CURRENT).exists() else None
    if (root / CA_CERT).exists():
        roots.append(_ca_cert(root))
        keys.append(_trusted_cert(roots[-1], KeyRole.CA, "site CA", True))
    generations = sorted((root / GENERATIONS).iterdir()) if (root / GENERATIONS).is_dir() else []
    for folder in reversed(generations):
        if not (folder / SEAL_PUB).exists():
            continue
        public = serialization.load_pem_public_key(_read(folder / SEAL_PUB))
        if isinstance(public, Ed25519PublicKey):
            is_current = folder == current
            keys.append(TrustedKey(KeyRole.SEAL, fingerprint(public), "", f"generation {folder.name}", is_current,
                                   _public_pem(public).decode()))  # fmt: skip
        if (folder / PDF_CERT).exists():
            signer = _load_cert(folder / PDF_CERT)
            keys.append(_trusted_cert(signer, KeyRole.SIGNER, f"generation {folder.name}", folder == current))
    for path in sorted((root / TRUSTED).glob("*.pem")) if (root / TRUSTED).is_dir() else []:
        if path.name.endswith(".crt.pem"):
            roots.append(_load_cert(path))
            keys.append(_trusted_cert(roots[-1], KeyRole.CA, f"{IMPORTED} ({path.name})", False))
        else:
            public = serialization.load_pem_public_key(_read(path))
            if isinstance(public, Ed25519PublicKey):
                pem = _public_pem(public).decode()
                keys.append(TrustedKey(KeyRole.SEAL, fingerprint(public), "", f"{IMPORTED} ({path.name})", False, pem))
    seal_fps = frozenset(k.fingerprint for k in keys if k.role is KeyRole.SEAL)
    return TrustStore(seal_fps, tuple(roots), tuple(keys), tsa_roots())


def tsa_roots() -> tuple[x509.Certificate, ...]:
    """The timestamp authorities' root certificates (KILN_TSA_CA); none when it is not set."""
    from django.conf import settings

    configured = str(settings.KILN_TSA_CA or "")
    return tuple(_load_certs(Path(configured))) if configured else ()


def site_crl(identity: SigningIdentity) -> x509.CertificateRevocationList | None:
    """A CRL the site CA signs now, embedded beside each signature (PAdES B-LT): it says the signing
    certificate was not revoked when it signed, so the signature verifies offline after the
    certificate is rotated away or expires. Empty: the site never revokes a signing certificate
    (rotation retires a key without distrusting what it signed). None when the site CA's key is not
    here (an imported certificate: the site's own PKI publishes its revocation data)."""
    root = key_dir()
    if not (root / CA_KEY).exists():
        return None
    ca_cert = _ca_cert(root)
    if identity.pdf_cert.issuer != ca_cert.subject:
        return None
    ca_key = serialization.load_pem_private_key(_read(root / CA_KEY), password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise KeyringError(f"{root / CA_KEY} is not an ECDSA key")
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateRevocationListBuilder()
        .issuer_name(ca_cert.subject)
        .last_update(now - datetime.timedelta(minutes=5))
        .next_update(now + datetime.timedelta(hours=CRL_HOURS))
        .add_extension(x509.CRLNumber(int(now.timestamp() * 1_000_000)), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )


def public_export() -> str:
    """PEM bundle of everything a verifier elsewhere needs: CA certificates and seal public keys."""
    store = trust_store_load()
    parts = []
    for key in store.keys:
        if key.role is KeyRole.SIGNER:  # not a trust anchor: the CA that issued it is
            continue
        state = "current" if key.current else "retired or imported"
        parts.append(f"# {key.role} {key.fingerprint} ({state}) {key.subject}\n{key.pem}")
    return "".join(parts)


def site_ca() -> x509.Certificate:
    """The site CA certificate: the trust anchor a PDF reader needs to show this site's signatures as
    trusted. Raises KeyringError when there is none yet (never creates one)."""
    root = key_dir()
    if not (root / CA_CERT).exists():
        raise KeyringError(f"no site CA in {root}: an administrator runs `kiln keys init` once")
    return _ca_cert(root)


def site_ca_pem() -> str:
    return _cert_pem(site_ca()).decode()


def trust_anchor(identity: SigningIdentity) -> x509.Certificate:
    """The CA certificate at the end of `identity`'s chain: the one its PDF signatures chain up to."""
    return identity.chain[-1] if identity.chain else identity.pdf_cert
