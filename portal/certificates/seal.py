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

Format 3 (evidence.py) keeps per-node summaries and digests of each node's detailed evidence in the
payload; the evidence itself is exported beside the certificate and checked against those digests.

Format 2 adds `seal.pdf_certificate_sha256` to the payload: the PDF-signing certificate that must
sign the document around it (signing.py), so the two signatures cannot be mixed and matched.
The keys live on disk (keys.py); this module holds only pure functions.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

FORMAT = "kiln-certificate/4"
# Format 2 carried every result's full evidence in the body; format 3 carries per-node summaries and
# digests of the evidence (evidence.py); format 4 adds each node's hardware identities (hardware.py).
# All verify the same way: nothing here reads the layout.
FORMATS = ("kiln-certificate/2", "kiln-certificate/3", FORMAT)
# The formats whose nodes carry evidence digests (an evidence export is checked against them).
DIGEST_FORMATS = ("kiln-certificate/3", FORMAT)
LEGACY_FORMAT = "kiln-certificate/1"  # payload-only seal; the PDF itself was not signed
VALID = "valid"
TAMPERED = "tampered"
UNKNOWN_KEY = "unknown key"
NOT_A_CERTIFICATE = "not a certificate"
REVOKED = "revoked"


def _plain(value: Any) -> Any:
    if value.__class__ is str or value is None or isinstance(value, bool | int | str):
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


def plain_bytes(value: Any) -> bytes:
    """canonical_bytes of a value that holds no floats (already passed through `canonical`): the C
    JSON encoder alone, no walk over the value."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


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
    """What a verification found. `status` is one of VALID, TAMPERED, UNKNOWN_KEY, NOT_A_CERTIFICATE,
    REVOKED; `detail` says which test decided it."""

    status: str
    detail: str
    payload: dict[str, Any] | None = None
    fingerprint: str = ""
    notes: list[str] = field(default_factory=list)
    # Format 1 (no PDF signature): valid only if byte-identical to the copy the portal stored.
    legacy: bool = False
    payload_sha256: str = ""
    # When the PDF was signed and by whose clock (signing.SignatureCheck's time fields): "time",
    # "source" (a timestamp authority or the portal's clock), "tsa", "note". Empty: not checked.
    time: dict[str, str] = field(default_factory=dict)

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


def sealed_digests(payload: dict[str, Any]) -> dict[str, str]:
    """What an export must match: "node NAME" / "group result ID" -> the sealed digest."""
    out = {f"node {n['hostname']}": n["evidence_sha256"] for n in payload.get("nodes") or [] if "evidence_sha256" in n}
    for g in payload.get("group_results") or []:
        if "evidence_sha256" in g:
            out[f"group result {g['result_id']}"] = g["evidence_sha256"]
    return out


def sealed_hardware(payload: dict[str, Any]) -> dict[str, Any]:
    """What `kiln verify --against` compares (portal/certificates/hardware.py): each node's sealed
    hardware identities, and the plan items that read them (as the cited runs ran them, else as the
    campaign's plan has them). Nodes of a certificate before format 4 have none."""
    nodes = [
        {"hostname": n.get("hostname"), "hardware": n["hardware"]}
        for n in payload.get("nodes") or []
        if isinstance(n, dict) and isinstance(n.get("hardware"), dict)
    ]
    wanted = {key for n in nodes for key in n["hardware"].get("items") or []}
    items: dict[str, Any] = {}
    for plan in payload.get("plans") or []:
        for item in (plan.get("snapshot") or {}).get("items") or []:
            if item.get("key") in wanted:
                items[item["key"]] = item
    for item in (payload.get("campaign_plan") or {}).get("items") or []:
        if item.get("key") in wanted:
            items.setdefault(item["key"], item)
    return {"nodes": nodes, "items": items}
