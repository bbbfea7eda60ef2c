"""The seal: canonical JSON, SHA-256, Ed25519. Pure functions plus the site key on disk.

Canonical form of a certificate payload (format "kiln-certificate/1"):
- UTF-8 JSON, keys sorted at every level, separators "," and ":" (no whitespace), non-ASCII kept
  as UTF-8 (not \\u-escaped).
- No JSON floats: every float is written as a string, Python's shortest round-trip repr
  (`repr(350.0)` = "350.0", `repr(1e-05)` = "1e-05"); NaN and infinities as "NaN", "Infinity",
  "-Infinity". Integers, booleans, null and strings stay as they are. So a verifier in any language
  hashes the exact bytes it received and never re-formats a number.
- The digest is SHA-256 over those bytes; the Ed25519 signature is over the 32 raw digest bytes.

The seal itself travels next to the payload (it cannot be inside what it signs):
{"algorithm": "Ed25519", "sha256": HEX, "signature": BASE64, "public_key": BASE64 raw 32 bytes,
 "key_fingerprint": "SHA256:..."}.

Site key: KILN_SIGNING_KEY (a path to a PKCS#8 PEM Ed25519 private key) when set; otherwise
DATA_DIR/signing_key.pem, generated at first use with mode 0600. KILN_TRUSTED_KEYS: extra public
keys this site accepts (comma-separated paths to PEM public keys, e.g. a retired site key).
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

FORMAT = "kiln-certificate/1"
VALID = "valid"
TAMPERED = "tampered"
UNKNOWN_KEY = "unknown key"
NOT_A_CERTIFICATE = "not a certificate"

_key_lock = threading.Lock()


def _plain(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, int | str):
        return value
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return repr(value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    raise TypeError(f"not allowed in a certificate payload: {type(value).__name__}")


def canonical(value: Any) -> Any:
    """The payload as it will be hashed: floats turned into strings (see the module docstring)."""
    return _plain(value)


def canonical_bytes(value: Any) -> bytes:
    return json.dumps(_plain(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def sha256_hex(data: bytes | str) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def public_raw(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(encoding=serialization.Encoding.Raw, format=serialization.PublicFormat.Raw)


def fingerprint(key: Ed25519PublicKey | bytes) -> str:
    """SSH-style: SHA256: + unpadded base64 of the SHA-256 of the raw public key."""
    raw = key if isinstance(key, bytes) else public_raw(key)
    return "SHA256:" + base64.b64encode(hashlib.sha256(raw).digest()).decode().rstrip("=")


def _setting(name: str) -> str:
    from django.conf import settings

    return str(getattr(settings, name, "") or os.environ.get(name, "") or "")


def signing_key_path() -> Path:
    from django.conf import settings

    configured = _setting("KILN_SIGNING_KEY")
    return Path(configured) if configured else Path(settings.DATA_DIR) / "signing_key.pem"


def signing_key_load() -> Ed25519PrivateKey:
    """The site key. Generated at first use when not configured (O_EXCL + 0600: never world-readable,
    and two processes starting together cannot both write one)."""
    path = signing_key_path()
    with _key_lock:
        if not path.exists():
            if _setting("KILN_SIGNING_KEY"):
                raise FileNotFoundError(f"KILN_SIGNING_KEY={path} does not exist")
            key = Ed25519PrivateKey.generate()
            pem = key.private_bytes(
                encoding=serialization.Encoding.PEM,
                format=serialization.PrivateFormat.PKCS8,
                encryption_algorithm=serialization.NoEncryption(),
            )
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                pass
            else:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(pem)
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"{path} is not an Ed25519 private key")
    return key


@dataclass(frozen=True)
class SiteKey:
    fingerprint: str
    public_key_b64: str
    source: str
    current: bool


def trusted_keys() -> list[SiteKey]:
    """The current site key, then every key of KILN_TRUSTED_KEYS."""
    current = signing_key_load().public_key()
    keys = [
        SiteKey(fingerprint(current), base64.b64encode(public_raw(current)).decode(), str(signing_key_path()), True)
    ]
    for entry in _setting("KILN_TRUSTED_KEYS").split(","):
        entry = entry.strip()
        if not entry:
            continue
        public = serialization.load_pem_public_key(Path(entry).read_bytes())
        if not isinstance(public, Ed25519PublicKey):
            raise ValueError(f"KILN_TRUSTED_KEYS: {entry} is not an Ed25519 public key")
        keys.append(SiteKey(fingerprint(public), base64.b64encode(public_raw(public)).decode(), entry, False))
    return keys


def seal(payload_bytes: bytes, key: Ed25519PrivateKey) -> dict[str, str]:
    digest = hashlib.sha256(payload_bytes).digest()
    public = key.public_key()
    return {
        "algorithm": "Ed25519",
        "sha256": digest.hex(),
        "signature": base64.b64encode(key.sign(digest)).decode(),
        "public_key": base64.b64encode(public_raw(public)).decode(),
        "key_fingerprint": fingerprint(public),
    }


@dataclass
class Verdict:
    """What a verification found. `status` is one of VALID, TAMPERED, UNKNOWN_KEY, NOT_A_CERTIFICATE;
    `detail` says which test decided it."""

    status: str
    detail: str
    payload: dict[str, Any] | None = None
    fingerprint: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == VALID


def verify(payload_bytes: bytes, seal_data: dict[str, Any], trusted: list[str]) -> Verdict:
    """Check, in order: the digest (payload changed?), the signature (seal forged or altered?), that
    the payload names the key that sealed it, then that the key is one this site trusts."""
    try:
        digest_hex = str(seal_data["sha256"])
        signature = base64.b64decode(seal_data["signature"], validate=True)
        raw_public = base64.b64decode(seal_data["public_key"], validate=True)
        public = Ed25519PublicKey.from_public_bytes(raw_public)
    except (KeyError, TypeError, ValueError) as exc:
        return Verdict(TAMPERED, f"the seal is malformed ({type(exc).__name__}: {exc})")
    actual = hashlib.sha256(payload_bytes).hexdigest()
    if actual != digest_hex:
        return Verdict(
            TAMPERED,
            f"digest mismatch: the payload hashes to {actual}, the seal says {digest_hex} "
            "(the payload was changed after it was sealed)",
        )
    try:
        public.verify(signature, bytes.fromhex(digest_hex))
    except (InvalidSignature, ValueError):
        return Verdict(TAMPERED, "signature invalid: the seal's signature does not match its digest and key")
    try:
        payload = json.loads(payload_bytes.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return Verdict(TAMPERED, f"the payload is not JSON: {exc}")
    fp = fingerprint(raw_public)
    named = (payload.get("seal") or {}).get("key_fingerprint") if isinstance(payload, dict) else None
    if named != fp:
        return Verdict(TAMPERED, f"the payload names key {named}, but it was sealed with {fp}", payload, fp)
    if fp not in trusted:
        return Verdict(
            UNKNOWN_KEY,
            f"the signature is sound but key {fp} is not this site's (trusted: {', '.join(trusted) or 'none'})",
            payload,
            fp,
        )
    return Verdict(VALID, f"digest and Ed25519 signature check out; key {fp} is this site's", payload, fp)
