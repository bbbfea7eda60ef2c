"""Verifying an uploaded PDF in a child process with memory, CPU and time limits.

The PDF comes from anyone with the viewer role (the verify page) or from a customer's mail
(kiln_verify). pypdf caps what it decompresses, pyHanko does not, and both are large parsers: a
crafted object stream could inflate to gigabytes or loop. So the document steps run in a fresh
`python -m portal.certificates.sandbox`: it limits its own address space and CPU time before it reads
a byte, reads the PDF from stdin, and prints one JSON verdict. The parent waits with a wall-clock
timeout; a child that dies or overruns means "could not be read within limits": tampered for a Kiln
certificate, not a certificate otherwise. The database steps (revocation) stay in the parent.

What the child is given: an environment of its own (child_env: none of the parent's variables, so no
DATABASE_URL, secret key or token), the public half of the trust store on stdin (not the key folder),
no inherited descriptors but its pipes, and, when the parent is root, the uid and gid of nobody. It
sets no-new-privileges, no file writes, no core dump, few descriptors, a lower CPU priority. It is not
a container: as the parent's uid it can still read what that uid can read and open network sockets.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import resource
import secrets
import stat
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import django
from cryptography.hazmat.primitives import serialization

from portal.certificates import keys, seal

# The limits are settings (KILN_VERIFY_MEMORY_MB, KILN_VERIFY_CPU_S, KILN_VERIFY_WALL_S in
# portal/settings.py). The parent hands the first two to the child in its environment: the child
# limits itself before it imports the parsers, so that the limits cover all of them.
LIMIT_ENV = ("KILN_VERIFY_MEMORY_MB", "KILN_VERIFY_CPU_S")
MAX_INPUT = 64 * 1024**2  # the verify page accepts 50 MiB
MAX_TRUST = 4 * 1024**2  # the trust store's line: a CA certificate is ~1 KB of PEM, a site has a few
NOBODY = 65534  # the conventional uid and gid of nobody (Debian, RHEL, the python image)
PR_SET_NO_NEW_PRIVS = 38  # linux/prctl.h
OPEN_FILES = 64  # Python with Django's imports opens ~20; the PDF comes on stdin
NICE = 10  # below the web threads: a flood of uploads slows the verifications, not the pages
log = logging.getLogger(__name__)
SUMMARY_KEYS = ("number", "verdict", "issued_at", "format", "audit_head")


def _summary(payload: dict[str, Any] | None, digests: bool = False, hardware: bool = False) -> dict[str, Any] | None:
    """What the pages and kiln_verify show of the payload (the full evidence can be 100+ MB); with
    `digests`, also the sealed evidence digests an export is checked against (export.py); with
    `hardware`, the sealed hardware identities the live nodes are compared with (hardware.py)."""
    if not isinstance(payload, dict):
        return None
    cluster = payload.get("cluster")
    if not isinstance(cluster, dict):
        cluster = {}
    out = {key: payload.get(key) for key in SUMMARY_KEYS}
    out["cluster"] = {key: cluster.get(key) for key in ("name", "customer", "site")}
    out["waivers"] = len(payload.get("waivers") or [])
    if digests:
        out["evidence_digests"] = seal.sealed_digests(payload)
    if hardware:
        out["hardware"] = seal.sealed_hardware(payload)
    return out


def _fallback(data: bytes, why: str) -> seal.Verdict:
    from portal.certificates.document import looks_like_kiln

    if data.startswith(b"%PDF-") and looks_like_kiln(data):
        return seal.Verdict(seal.TAMPERED, f"a Kiln certificate that could not be checked within limits: {why}")
    return seal.Verdict(seal.NOT_A_CERTIFICATE, f"not a readable Kiln certificate: {why}")


def child_env() -> dict[str, str]:
    """The child's whole environment: no DATABASE_URL, keys or tokens of the parent's, no .env read
    (KILN_ENV_FILE empty), and a data folder that does not exist, so that settings find no secret key,
    credential key or metrics token file either. The child sets up no Django; should anything load
    the settings there, they find no secret of the parent's, and the secret key is a throwaway."""
    from django.conf import settings

    env = {
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "KILN_ENV_FILE": "",
        "KILN_DATA_DIR": "/nonexistent/kiln-verify",
        "KILN_SECRET_KEY": secrets.token_urlsafe(32),
    }
    env.update({name: str(getattr(settings, name)) for name in LIMIT_ENV})
    return env


def _trust_line(store: keys.TrustStore) -> bytes:
    """The public part of the trust store, one JSON line: the child reads no key folder (it holds the
    private keys too, and a child dropped to another uid could not read it)."""
    roots = [cert.public_bytes(serialization.Encoding.PEM).decode() for cert in store.roots]
    tsa = [cert.public_bytes(serialization.Encoding.PEM).decode() for cert in store.tsa_roots]
    return json.dumps({"seal": sorted(store.seal_fingerprints), "roots": roots, "tsa_roots": tsa}).encode() + b"\n"


def _others_can_read(path: Path) -> bool:
    """Every folder down to `path` searchable, and `path` itself readable, by a uid of no group."""
    path = path.resolve()
    for folder in path.parents:
        if not folder.stat().st_mode & stat.S_IXOTH:
            return False
    return bool(path.stat().st_mode & stat.S_IROTH)


def _drop() -> dict[str, Any]:
    """Run as nobody (65534), no supplementary groups, when the parent is root and nobody can reach
    Python, its libraries and the code (a Python under /root cannot be: then as root, logged)."""
    if os.geteuid() != 0:
        return {}
    from django.conf import settings

    needed = [Path(sys.executable), Path(os.__file__).parent, Path(django.__file__).parent, Path(settings.BASE_DIR)]
    if not all(_others_can_read(path) for path in needed):
        log.warning("the certificate verifier runs as root: uid %s cannot read Python or Kiln", NOBODY)
        return {}
    return {"user": NOBODY, "group": NOBODY, "extra_groups": []}


def verify_isolated(data: bytes, *, digests: bool = False, hardware: bool = False) -> seal.Verdict:
    """document.verify_document in a limited child process (`digests`, `hardware`: see _summary)."""
    if len(data) > MAX_INPUT:
        return seal.Verdict(seal.NOT_A_CERTIFICATE, f"larger than {MAX_INPUT // 1024**2} MiB")
    from django.conf import settings

    try:
        header = _trust_line(keys.trust_store_load())
    except (keys.KeyringError, ValueError, OSError) as exc:
        return _fallback(data, f"this site's keys cannot be read: {exc}")
    wall = float(settings.KILN_VERIFY_WALL_S)
    try:
        proc = subprocess.run(
            [sys.executable, "-E", "-s", "-m", "portal.certificates.sandbox", *(["--digests"] if digests else []),
             *(["--hardware"] if hardware else [])],
            input=header + data, capture_output=True, timeout=wall, env=child_env(), check=False,
            cwd=settings.BASE_DIR, close_fds=True, **_drop(),
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return _fallback(data, f"no answer after {wall:g} s")
    if proc.returncode != 0:
        last = (proc.stderr.decode("utf-8", "replace").strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        return _fallback(data, last[:300])
    try:
        answer = json.loads(proc.stdout)
        return seal.Verdict(**answer)
    except (ValueError, TypeError) as exc:
        return _fallback(data, f"unreadable answer ({exc})")


def _no_new_privileges() -> None:
    """prctl(PR_SET_NO_NEW_PRIVS): no setuid binary or file capability can raise this process again."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")


def _limit_self() -> None:
    """In the child, before the parsers are imported: the parent put the limits in the environment (LIMIT_ENV). No file
    written (RLIMIT_FSIZE 0), no core dump, few descriptors, and a lower CPU priority than the pages."""
    _no_new_privileges()
    memory = int(os.environ["KILN_VERIFY_MEMORY_MB"]) * 1024**2
    cpu = int(os.environ["KILN_VERIFY_CPU_S"])
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NOFILE, (OPEN_FILES, OPEN_FILES))
    os.nice(NICE)


def _trust_read(line: bytes) -> keys.TrustStore:
    from cryptography import x509

    found = json.loads(line)
    roots = tuple(x509.load_pem_x509_certificate(pem.encode()) for pem in found["roots"])
    tsa = tuple(x509.load_pem_x509_certificate(pem.encode()) for pem in found.get("tsa_roots", []))
    return keys.TrustStore(frozenset(found["seal"]), roots, (), tsa)


def main() -> int:
    _limit_self()
    # No django.setup(): the document steps read no setting and no model, and loading every app
    # would cost more CPU than checking the signatures.
    from portal.certificates import document

    store = _trust_read(sys.stdin.buffer.readline(MAX_TRUST))
    data = sys.stdin.buffer.read(MAX_INPUT + 1)
    try:
        verdict = document.verify_document(data, store)
    except MemoryError:
        print("MemoryError: the PDF needs more memory than the verifier allows", file=sys.stderr)
        return 3
    except Exception as exc:  # any parser failure on hostile bytes: the parent decides what it means
        print(f"{type(exc).__name__}: {str(exc)[:300]}", file=sys.stderr)
        return 3
    flags = sys.argv[1:]
    verdict.payload = _summary(verdict.payload, digests="--digests" in flags, hardware="--hardware" in flags)
    sys.stdout.write(json.dumps(asdict(verdict)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
