"""Verification as a bounded service: slots per user and for the site (429 + Retry-After), uploads
refused with 413 while they stream, and a verifier child that holds none of the parent's secrets."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.handlers.wsgi import WSGIHandler
from django.db import connection, connections
from django.test import Client, RequestFactory
from django.urls import reverse

from portal.certificates import sandbox, slots, verification
from portal.certificates.seal import NOT_A_CERTIFICATE, Verdict

VERIFY_PAGE = "certificates:certificate_verify"
VERIFY_API = "/api/v1/certificates/verify/"
MiB = 1024**2


@contextmanager
def held_elsewhere(user_id: int) -> Iterator[None]:
    """A verification of `user_id` in progress in another thread (its own database connection)."""
    taken, release, failed = threading.Event(), threading.Event(), []

    def hold() -> None:
        try:
            with slots.verification_slot(user_id):
                taken.set()
                release.wait(30)
        except slots.Busy as exc:
            failed.append(exc)
            taken.set()
        finally:
            connections.close_all()

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert taken.wait(30) and not failed
        yield
    finally:
        release.set()
        thread.join(30)


def _pdf() -> SimpleUploadedFile:
    return SimpleUploadedFile("c.pdf", b"%PDF-1.7\nnot a certificate\n", content_type="application/pdf")


@pytest.fixture
def viewer_client(make_user) -> tuple[Client, Any]:
    user = make_user("vic", "viewer")
    client = Client()
    client.force_login(user)
    return client, user


@pytest.fixture
def no_verifier(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """certificate_verify recorded, not run: the tests here are about whether it runs."""
    calls: list[bytes] = []

    def fake(*, data: bytes, digests: bool = False) -> Verdict:
        calls.append(data)
        return Verdict(NOT_A_CERTIFICATE, "fake")

    monkeypatch.setattr(verification, "certificate_verify", fake)
    return calls


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("scope", ["user", "site"])
def test_over_the_limit_the_page_and_the_api_answer_429_with_retry_after(
    scope: str, viewer_client, make_user, no_verifier, settings
) -> None:
    client, user = viewer_client
    settings.KILN_VERIFY_CONCURRENCY, settings.KILN_VERIFY_PER_USER, settings.KILN_VERIFY_RETRY_AFTER_S = 1, 1, 7
    holder = user.pk if scope == "user" else make_user("other", "viewer").pk
    with held_elsewhere(holder):
        page = client.post(reverse(VERIFY_PAGE), {"pdf": _pdf()})
        api = client.post(VERIFY_API, {"pdf": _pdf()})
    assert no_verifier == []
    assert page.status_code == 429 and page["Retry-After"] == "7"
    text = page.content.decode()
    assert 'id="verify-busy"' in text and "try again in 7 s" in text
    assert ("your earlier verifications" if scope == "user" else "the site is verifying") in text
    assert api.status_code == 429 and api["Retry-After"] == "7"
    assert api.json()["detail"].startswith("Busy: ")
    # The slot is free again once its holder is done.
    assert client.post(reverse(VERIFY_PAGE), {"pdf": _pdf()}).status_code == 200
    assert client.post(VERIFY_API, {"pdf": _pdf()}).status_code == 200
    assert len(no_verifier) == 2


@pytest.mark.django_db(transaction=True)
def test_the_limits_are_per_user_and_for_the_site(make_user, settings) -> None:
    settings.KILN_VERIFY_CONCURRENCY, settings.KILN_VERIFY_PER_USER = 2, 1
    a, b, c = (make_user(name, "viewer").pk for name in ("a", "b", "c"))
    with held_elsewhere(a):
        with pytest.raises(slots.Busy) as busy:
            with slots.verification_slot(a):
                pass
        assert busy.value.scope == "user"
        with held_elsewhere(b):  # the site's second slot
            with pytest.raises(slots.Busy) as busy:
                with slots.verification_slot(c):
                    pass
            assert busy.value.scope == "site"


@pytest.mark.django_db(transaction=True)
def test_a_killed_process_frees_its_slot(viewer_client, no_verifier, settings) -> None:
    """The slot is a session lock of PostgreSQL: a web process killed mid-verification leaves none held."""
    client, user = viewer_client
    settings.KILN_VERIFY_PER_USER = 1
    db = connection.settings_dict
    holder = subprocess.Popen(
        [sys.executable, "-c", "import psycopg, sys, time\n"
         f"c = psycopg.connect(host={db['HOST']!r}, port={int(db['PORT'] or 5432)}, user={db['USER']!r}, "
         f"dbname={db['NAME']!r}, autocommit=True)\n"
         f"c.execute('SELECT pg_advisory_lock(%s)', [{slots._key(user.pk, 0)}])\n"
         "print('held', flush=True)\ntime.sleep(60)\n"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert client.post(reverse(VERIFY_PAGE), {"pdf": _pdf()}).status_code == 429
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
    for _ in range(50):  # PostgreSQL ends the session when it sees the socket close: well under 5 s
        if client.post(reverse(VERIFY_PAGE), {"pdf": _pdf()}).status_code == 200:
            break
        threading.Event().wait(0.1)
    else:
        pytest.fail("the killed process's slot was never freed")


def test_on_sqlite_the_slots_are_file_locks(tmp_path: Path, settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """flock(2) locks conflict between two open files of one process too, so threads count apart."""
    settings.DATA_DIR, settings.KILN_VERIFY_PER_USER, settings.KILN_VERIFY_CONCURRENCY = tmp_path, 1, 1
    monkeypatch.setattr(slots, "connection", type("C", (), {"vendor": "sqlite"})())
    with slots.verification_slot(5):
        with pytest.raises(slots.Busy):
            with slots.verification_slot(5):
                pass
        with pytest.raises(slots.Busy) as busy:
            with slots.verification_slot(6):
                pass
        assert busy.value.scope == "site"
    with slots.verification_slot(6):
        pass


class Counting(io.RawIOBase):
    """A request body of `size` bytes made as it is read, counting what the server read."""

    def __init__(self, head: bytes, size: int) -> None:
        self.head, self.size, self.read_bytes = head, size, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = min(len(buffer), self.size - self.read_bytes)
        chunk = self.head[self.read_bytes : self.read_bytes + n]
        buffer[:n] = chunk + b"\0" * (n - len(chunk))
        self.read_bytes += n
        return n


def _multipart(size: int, boundary: str = "xyz") -> tuple[Counting, int]:
    head = (f'--{boundary}\r\nContent-Disposition: form-data; name="pdf"; filename="big.pdf"\r\n'
            "Content-Type: application/pdf\r\n\r\n%PDF-1.7\n").encode()  # fmt: skip
    return Counting(head, size), size


def _wsgi(client: Client | None, body: Counting, length: int, path: str) -> tuple[int, int]:
    cookie = {}
    if client is not None:
        cookie["HTTP_COOKIE"] = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    environ = RequestFactory()._base_environ(
        PATH_INFO=path,
        REQUEST_METHOD="POST",
        CONTENT_TYPE="multipart/form-data; boundary=xyz",
        CONTENT_LENGTH=str(length),
        **cookie,
    )
    environ["wsgi.input"] = io.BufferedReader(body, 64 * 1024)
    answer: list[int] = []
    result = WSGIHandler()(environ, lambda status, headers, exc_info=None: answer.append(int(status.split()[0])))
    b"".join(result)
    result.close()
    return answer[0], body.read_bytes


@pytest.mark.django_db(transaction=True)  # a WSGI request closes the connection (request_started)
@pytest.mark.parametrize("path", [VERIFY_API, "/certificates/verify/"])
def test_a_400_mib_upload_is_refused_before_a_byte_is_read(path: str, viewer_client, no_verifier) -> None:
    client, _ = viewer_client
    body, length = _multipart(400 * MiB)
    status, read = _wsgi(client, body, length, path)
    assert status == 413 and read == 0 and no_verifier == []


@pytest.mark.django_db(transaction=True)  # a WSGI request closes the connection (request_started)
@pytest.mark.parametrize("path", [VERIFY_API, "/certificates/verify/"])
def test_a_file_that_grows_past_the_limit_stops_the_parser_there(
    path: str, viewer_client, no_verifier, settings
) -> None:
    """The body's length is under the limit for the whole request (file + other fields), the file
    alone is over it: the upload handler stops reading at the file limit, not at the body's end."""
    client, _ = viewer_client
    settings.KILN_MAX_UPLOAD_MB, settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1, 3 * MiB
    body, length = _multipart(4 * MiB - 1)
    status, read = _wsgi(client, body, length, path)
    assert status == 413 and no_verifier == []
    assert read < 1 * MiB + 256 * 1024, read  # the limit plus a chunk or two of the parser's


@pytest.mark.django_db(transaction=True)  # a WSGI request closes the connection (request_started)
@pytest.mark.parametrize(("path", "expected"), [(VERIFY_API, 401), ("/certificates/verify/", 302)])
def test_an_anonymous_upload_is_answered_before_a_byte_is_read(path: str, expected: int, no_verifier) -> None:
    """No session, no token: the login redirect or a 401, without the CSRF check parsing 10 MiB first."""
    body, length = _multipart(10 * MiB)
    status, read = _wsgi(None, body, length, path)
    assert status == expected and read == 0 and no_verifier == []


@pytest.mark.django_db
def test_a_chunked_body_is_refused_with_411(viewer_client) -> None:
    """Django reads no body without a Content-Length; gunicorn would then drain the chunks itself."""
    client, _ = viewer_client
    response = client.post(reverse(VERIFY_PAGE), {"pdf": _pdf()}, HTTP_TRANSFER_ENCODING="chunked")
    assert response.status_code == 411


def test_the_verifier_child_holds_none_of_the_parents_secrets(monkeypatch: pytest.MonkeyPatch, settings) -> None:
    """The child's environment, and the settings Django builds from it in the child: no DATABASE_URL,
    no secret key, credential key or metrics token of the parent's (from its environment or its files)."""
    monkeypatch.setenv("KILN_SECRET_KEY", "parent-secret-key-sentinel")
    monkeypatch.setenv("KILN_API_SENTINEL", "parent-env-sentinel")
    secrets = [
        "parent-secret-key-sentinel",
        "parent-env-sentinel",
        os.environ["DATABASE_URL"],
        settings.SECRET_KEY,
        settings.KILN_CREDENTIAL_KEY.split(",")[0],
        settings.KILN_METRICS_TOKEN,
    ]
    env = sandbox.child_env()
    shown = subprocess.run(
        [sys.executable, "-E", "-s", "-c",
         "import json, os, django; django.setup(); from django.conf import settings as s\n"
         "print(json.dumps([dict(os.environ), s.SECRET_KEY, s.DATABASES['default'], s.KILN_CREDENTIAL_KEY, "
         "s.KILN_METRICS_TOKEN], default=str))\n"
         "print(open('/proc/self/status').read())"],
        env=env, cwd=settings.BASE_DIR, capture_output=True, text=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    found, _ = shown.split("\n", 1)
    child_environ = json.loads(found)[0]
    assert "DATABASE_URL" not in child_environ and "KILN_API_SENTINEL" not in child_environ
    for secret in filter(None, secrets):
        assert secret not in shown, secret
    # Its own limits: no new privileges, no file writes.
    limited = subprocess.run(
        [sys.executable, "-E", "-s", "-c",
         "import resource; from portal.certificates import sandbox; sandbox._limit_self()\n"
         "print(resource.getrlimit(resource.RLIMIT_FSIZE)); print(open('/proc/self/status').read())"],
        env=env, cwd=settings.BASE_DIR, capture_output=True, text=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    assert limited.startswith("(0, 0)") and "NoNewPrivs:\t1" in limited
