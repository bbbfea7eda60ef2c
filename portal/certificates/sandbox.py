"""Verifying an uploaded PDF in a child process with memory, CPU and time limits.

The PDF comes from anyone with the viewer role (the verify page) or from a customer's mail
(kiln_verify). pypdf caps what it decompresses, pyHanko does not, and both are large parsers: a
crafted object stream could inflate to gigabytes or loop. So the document steps run in a fresh
`python -m portal.certificates.sandbox`: it limits its own address space and CPU time before it reads
a byte, reads the PDF from stdin, and prints one JSON verdict. The parent waits with a wall-clock
timeout; a child that dies or overruns means "could not be read within limits": tampered for a Kiln
certificate, not a certificate otherwise. The database steps (revocation) stay in the parent.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from dataclasses import asdict
from typing import Any

from portal.certificates import seal

# The limits are settings (KILN_VERIFY_MEMORY_MB, KILN_VERIFY_CPU_S, KILN_VERIFY_WALL_S in
# portal/settings.py). The parent hands the first two to the child in its environment: the child
# limits itself before it loads Django, so that the limits cover all of it.
LIMIT_ENV = ("KILN_VERIFY_MEMORY_MB", "KILN_VERIFY_CPU_S")
MAX_INPUT = 64 * 1024**2  # the verify page accepts 50 MiB
SUMMARY_KEYS = ("number", "verdict", "issued_at", "format", "audit_head")


def _summary(payload: dict[str, Any] | None, digests: bool = False) -> dict[str, Any] | None:
    """What the pages and kiln_verify show of the payload (the full evidence can be 100+ MB); with
    `digests`, also the sealed evidence digests an export is checked against (export.py)."""
    if not isinstance(payload, dict):
        return None
    cluster = payload.get("cluster")
    if not isinstance(cluster, dict):
        cluster = {}
    out = {key: payload.get(key) for key in SUMMARY_KEYS}
    out["cluster"] = {key: cluster.get(key) for key in ("name", "customer", "site")}
    out["waivers"] = len(payload.get("waivers") or [])
    if digests:
        from portal.certificates.export import sealed_digests

        out["evidence_digests"] = sealed_digests(payload)
    return out


def _fallback(data: bytes, why: str) -> seal.Verdict:
    from portal.certificates.verification import looks_like_kiln

    if data.startswith(b"%PDF-") and looks_like_kiln(data):
        return seal.Verdict(seal.TAMPERED, f"a Kiln certificate that could not be checked within limits: {why}")
    return seal.Verdict(seal.NOT_A_CERTIFICATE, f"not a readable Kiln certificate: {why}")


def verify_isolated(data: bytes, *, digests: bool = False) -> seal.Verdict:
    """verification.verify_document in a limited child process (`digests`: see _summary)."""
    from portal.certificates import keys

    if len(data) > MAX_INPUT:
        return seal.Verdict(seal.NOT_A_CERTIFICATE, f"larger than {MAX_INPUT // 1024**2} MiB")
    from django.conf import settings

    env = {**os.environ, "KILN_KEY_DIR": str(keys.key_dir())}  # the parent's keys, however it found them
    env.update({name: str(getattr(settings, name)) for name in LIMIT_ENV})
    wall = float(settings.KILN_VERIFY_WALL_S)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "portal.certificates.sandbox", *(["--digests"] if digests else [])],
            input=data, capture_output=True, timeout=wall, env=env, check=False,
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


def _limit_self() -> None:
    """In the child, before Django: the parent put the limits in the environment (LIMIT_ENV)."""
    memory = int(os.environ["KILN_VERIFY_MEMORY_MB"]) * 1024**2
    cpu = int(os.environ["KILN_VERIFY_CPU_S"])
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))


def main() -> int:
    _limit_self()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    from portal.certificates import keys, verification

    data = sys.stdin.buffer.read(MAX_INPUT + 1)
    try:
        verdict = verification.verify_document(data, keys.trust_store_load())
    except MemoryError:
        print("MemoryError: the PDF needs more memory than the verifier allows", file=sys.stderr)
        return 3
    except Exception as exc:  # any parser failure on hostile bytes: the parent decides what it means
        print(f"{type(exc).__name__}: {str(exc)[:300]}", file=sys.stderr)
        return 3
    verdict.payload = _summary(verdict.payload, digests="--digests" in sys.argv[1:])
    sys.stdout.write(json.dumps(asdict(verdict)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
