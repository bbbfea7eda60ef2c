"""Credentials of facility endpoints (PDU and CDU Redfish services), sealed at rest with Fernet
(AES-128-CBC + HMAC-SHA256, from `cryptography`).

The key is settings.KILN_CREDENTIAL_KEY: the environment variable, else the file `manage.py kiln_init`
generates into KILN_DATA_DIR/credential_key. Several comma-separated keys rotate: the first seals,
every one opens. The database holds only the token; the plain credential exists in memory while a
service re-seals it or the worker uses it, inside objects whose repr hides it. Nothing here logs.
"""

from __future__ import annotations

import binascii
import json
from dataclasses import dataclass

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings


class CredentialError(ValueError):
    """A credential cannot be sealed or opened; the message says why and never holds it."""


@dataclass(frozen=True)
class Credential:
    """A user name and password in the clear (in memory only). repr() shows neither."""

    username: str
    password: str

    def __repr__(self) -> str:
        return "Credential(<hidden>)"

    __str__ = __repr__


def _keys() -> list[str]:
    return [k.strip() for k in str(settings.KILN_CREDENTIAL_KEY or "").split(",") if k.strip()]


def key_configured() -> bool:
    """Whether any key is set (valid or not)."""
    return bool(_keys())


def key_problem() -> str:
    """Why credentials cannot be sealed or opened with the configured key(s); "" when they can."""
    keys = _keys()
    if not keys:
        return "no credential key: KILN_CREDENTIAL_KEY is empty and KILN_DATA_DIR has no credential_key"
    for index, key in enumerate(keys, start=1):
        try:
            Fernet(key)
        except (ValueError, binascii.Error):
            return f"credential key {index} of {len(keys)} is not a Fernet key (32 bytes, URL-safe base64)"
    return ""


def _fernet() -> MultiFernet:
    problem = key_problem()
    if problem:
        raise CredentialError(f"{problem}; run `kiln init` (`manage.py kiln_init`) or set KILN_CREDENTIAL_KEY")
    return MultiFernet([Fernet(k) for k in _keys()])


def seal(credential: Credential) -> str:
    """The Fernet token (text) of a credential."""
    data = json.dumps({"username": credential.username, "password": credential.password})
    return _fernet().encrypt(data.encode()).decode("ascii")


def unseal(token: str) -> Credential:
    """The credential a token holds; CredentialError when the keys cannot open it."""
    fernet = _fernet()  # a missing key says so, not "cannot be opened"
    try:
        data = json.loads(fernet.decrypt(token.encode("ascii")))
    except (InvalidToken, UnicodeError, ValueError):
        raise CredentialError(
            "the stored credential cannot be opened with the configured credential key (was the key "
            "changed?): enter it again"
        ) from None
    return Credential(str(data.get("username", "")), str(data.get("password", "")))


def generate_key() -> str:
    return Fernet.generate_key().decode("ascii")
