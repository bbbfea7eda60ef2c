"""The data folder's layout, made by `manage.py kiln_init` (and `make up`), never at import.

settings.py only reads from here (it must import nothing of Django's apps); kiln_init writes. The
secret key, the credential key and the /metrics bearer token are created atomically and never
replaced: two kiln_init runs at once (web and worker containers starting together) end with one
key that both read.
"""

from __future__ import annotations

import base64
import os
import secrets
import tempfile
from collections.abc import Mapping
from pathlib import Path

SECRET_KEY_FILE = "secret_key"
# 50 URL-safe bytes: Django's check --deploy asks for at least 50 characters (security.W009).
SECRET_KEY_BYTES = 50
# The Fernet key that seals facility endpoint credentials (portal/facility/credentials.py).
CREDENTIAL_KEY_FILE = "credential_key"
# The bearer token Prometheus sends to /metrics (portal/health/views.py), unless KILN_METRICS_TOKEN is set.
METRICS_TOKEN_FILE = "metrics_token"
# 32 random bytes (256 bits), URL-safe: the size Python's `secrets` docs recommend for tokens.
METRICS_TOKEN_BYTES = 32


def env_file(base_dir: Path, environ: Mapping[str, str]) -> Path | None:
    """The `.env` file settings read, or None. KILN_ENV_FILE names it (set but empty: none); else
    `.env` in the working directory, as docker-compose and dotenv tools look for it; else the
    checkout's. Its values never override a variable the environment already sets."""
    if "KILN_ENV_FILE" in environ:
        named = environ["KILN_ENV_FILE"].strip()
        return Path(named) if named else None
    for candidate in (Path.cwd() / ".env", base_dir / ".env"):
        if candidate.is_file():
            return candidate
    return None


def broker_dirs(data_dir: Path) -> tuple[Path, Path]:
    """The filesystem broker's (queue, control) folders of the embedded default."""
    return data_dir / "broker" / "queue", data_dir / "broker" / "control"


def layout(data_dir: Path) -> list[Path]:
    """Every folder the embedded setup writes to: SQLite file, broker, collected static files, logs."""
    return [data_dir, *broker_dirs(data_dir), data_dir / "static", data_dir / "logs"]


def secret_key_read(data_dir: Path) -> str:
    """The generated secret key, or "" when kiln_init has not made one."""
    return _read(data_dir / SECRET_KEY_FILE)


def credential_key_read(data_dir: Path) -> str:
    """The generated credential key (a Fernet key), or "" when kiln_init has not made one."""
    return _read(data_dir / CREDENTIAL_KEY_FILE)


def metrics_token_read(data_dir: Path) -> str:
    """The generated /metrics bearer token, or "" when kiln_init has not made one."""
    return _read(data_dir / METRICS_TOKEN_FILE)


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        return ""


def secret_key_create(data_dir: Path) -> bool:
    """Writes a new random key unless one exists; True if this call made it."""
    return _create_private(data_dir / SECRET_KEY_FILE, secrets.token_urlsafe(SECRET_KEY_BYTES))


def credential_key_create(data_dir: Path) -> bool:
    """Writes a new Fernet key (32 random bytes, URL-safe base64) unless one exists; True if made."""
    key = base64.urlsafe_b64encode(secrets.token_bytes(32)).decode()
    return _create_private(data_dir / CREDENTIAL_KEY_FILE, key)


def metrics_token_create(data_dir: Path) -> bool:
    """Writes a new random /metrics bearer token unless one exists; True if this call made it."""
    return _create_private(data_dir / METRICS_TOKEN_FILE, secrets.token_urlsafe(METRICS_TOKEN_BYTES))


def _create_private(target: Path, content: str) -> bool:
    """Written to a private temporary file first, then linked into place: the key is whole or
    absent, and a key another process linked first is kept."""
    if target.exists():
        return False
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")  # mode 0600
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        os.link(tmp, target)
    except FileExistsError:
        return False
    finally:
        os.unlink(tmp)
    return True


def init_data_dir(
    data_dir: Path, *, secret_key: bool = True, credential_key: bool = True, metrics_token: bool = True
) -> list[Path]:
    """Makes the folders and, unless they come from the environment, the secret key, the credential
    key and the /metrics token. Returns what it created (empty when everything was there)."""
    made = []
    for folder in layout(data_dir):
        if not folder.is_dir():
            folder.mkdir(parents=True, exist_ok=True)
            made.append(folder)
    if secret_key and secret_key_create(data_dir):
        made.append(data_dir / SECRET_KEY_FILE)
    if credential_key and credential_key_create(data_dir):
        made.append(data_dir / CREDENTIAL_KEY_FILE)
    if metrics_token and metrics_token_create(data_dir):
        made.append(data_dir / METRICS_TOKEN_FILE)
    return made
